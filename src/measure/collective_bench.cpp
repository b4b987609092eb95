// `dtrain bench collective`: nccl-tests' measurements over dtrain's process
// group (Gloo on CPU, NCCL on CUDA builds).
//
// Note [Collectives as nccl-tests runs them]
// nccl-tests times each collective out-of-place (separate send and receive
// buffers) and in-place (the send buffer is, or lies inside, the receive
// buffer), fills every rank's input with known values and counts the result
// elements that differ from the expected ones (#wrong). Buffer layouts per op
// (n ranks, c = "count" column):
//   allreduce       send c, recv c                 recv = reduce_r send_r
//   allgather       send c, recv n*c                recv chunk j = send_j
//                   in-place: send = recv chunk rank
//   reduce_scatter  send n*c, recv c                recv = reduce_r chunk rank of send_r
//                   in-place: recv = send chunk rank
//   broadcast       send c, recv c                  recv = send_root
//   reduce          send c, recv c (root)           recv = reduce_r send_r
//   alltoall        send n*c, recv n*c              recv chunk j = chunk rank of send_j
// c10d has no out-of-place allreduce, broadcast or reduce: those copy send
// into recv and run in place, so the copy is part of the out-of-place time.
// Gloo has no reduce_scatter in LibTorch 1.13: it is an alltoall of the
// chunks followed by a local reduction, which moves the same (n-1)/n of the
// buffer per rank as a ring reduce-scatter; NCCL uses its own. An in-place
// alltoall goes through a scratch buffer (nccl-tests does not check it; we do).
// Values are small integers, so every reduction is exact in every type and
// the comparison is equality.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "common/strings.h"
#include "dtrain/bench.h"
#include "dtrain/comm.h"
#include "dtrain/device.h"
#include "dtrain/errors.h"

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;

constexpr CollectiveOp kOps[] = {CollectiveOp::kAllreduce,     CollectiveOp::kAllgather,
                                 CollectiveOp::kReduceScatter, CollectiveOp::kBroadcast,
                                 CollectiveOp::kReduce,        CollectiveOp::kAlltoall};

bool reduces(CollectiveOp op) {
  return op == CollectiveOp::kAllreduce || op == CollectiveOp::kReduceScatter ||
         op == CollectiveOp::kReduce;
}
bool rooted(CollectiveOp op) {
  return op == CollectiveOp::kBroadcast || op == CollectiveOp::kReduce;
}
// Ops whose buffers hold one chunk per rank.
bool chunked(CollectiveOp op) {
  return op == CollectiveOp::kAllgather || op == CollectiveOp::kReduceScatter ||
         op == CollectiveOp::kAlltoall;
}

constexpr CollectiveDtype kDtypes[] = {CollectiveDtype::kFloat, CollectiveDtype::kDouble,
                                       CollectiveDtype::kInt32, CollectiveDtype::kInt64};
constexpr CollectiveReduceOp kReduceOps[] = {CollectiveReduceOp::kSum, CollectiveReduceOp::kProd,
                                             CollectiveReduceOp::kMin, CollectiveReduceOp::kMax};

at::ScalarType scalar_type(CollectiveDtype dtype) {
  switch (dtype) {
    case CollectiveDtype::kFloat:
      return at::kFloat;
    case CollectiveDtype::kDouble:
      return at::kDouble;
    case CollectiveDtype::kInt32:
      return at::kInt;
    case CollectiveDtype::kInt64:
      return at::kLong;
  }
  return at::kFloat;
}

c10d::ReduceOp reduce_op(CollectiveReduceOp op) {
  switch (op) {
    case CollectiveReduceOp::kSum:
      return c10d::ReduceOp::SUM;
    case CollectiveReduceOp::kProd:
      return c10d::ReduceOp::PRODUCT;
    case CollectiveReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case CollectiveReduceOp::kMax:
      return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

// The element-wise reduction `op` of `t` along dimension 0.
at::Tensor reduce_dim0(const at::Tensor& t, CollectiveReduceOp op) {
  switch (op) {
    case CollectiveReduceOp::kProd:
      return t.prod(0);
    case CollectiveReduceOp::kMin:
      return std::get<0>(t.min(0));
    case CollectiveReduceOp::kMax:
      return std::get<0>(t.max(0));
    case CollectiveReduceOp::kSum:
      break;
  }
  return t.sum(0);
}

// Rank r's value at global index i: small integers, exact under every
// reduction of a few ranks (products of 1s and 2s for prod).
at::Tensor values(int r, int64_t first, int64_t count, CollectiveReduceOp redop) {
  at::Tensor i = at::arange(first, first + count, at::kLong);
  if (redop == CollectiveReduceOp::kProd) return (i + r).remainder(2) + 1;
  return (i * 3 + r).remainder(13) + (r + 1);
}

// The element-wise reduction of the ranks' tensors, in double precision.
at::Tensor reduce_ranks(const std::vector<at::Tensor>& per_rank, CollectiveReduceOp redop) {
  return reduce_dim0(at::stack(per_rank).to(at::kDouble), redop);
}

struct Buffers {
  at::Tensor send, recv, scratch;
};

class Runner {
 public:
  Runner(const CollectiveBenchOptions& o, const ProcessGroup& pg, int64_t count)
      : o_(o), pg_(pg), n_(pg.size()), rank_(pg.rank()), count_(count) {
    dtype_ = scalar_type(o.dtype);
    // NCCL's buffers live on this rank's GPU, cuda:<local rank> (the device
    // join_group picked); Gloo's on the CPU.
    if (pg.backend_name() == "nccl") device_ = pick_device(DeviceChoice::cuda(), pg);
    const int64_t big = chunked(o.op) ? count * n_ : count;
    auto make = [&](int64_t numel) {
      return at::zeros({numel}, at::TensorOptions(dtype_).device(device_));
    };
    b_.send = make(o.op == CollectiveOp::kAllgather ? count : big);
    b_.recv = make(o.op == CollectiveOp::kReduceScatter ? count : big);
    b_.scratch = make(big);
  }

  // Fills the input for one mode (in place: inside recv, or send for
  // reduce_scatter whose input is the big buffer).
  void fill(bool in_place) {
    const int64_t first = o_.op == CollectiveOp::kAllgather ? rank_ * count_ : 0;
    // In slices: values() works in int64 with temporaries, about 32 bytes per
    // element at once, which for VGG-16's 138 M elements took 4 GB per rank.
    constexpr int64_t kSlice = int64_t{1} << 22;
    at::Tensor in = input(in_place);
    for (int64_t at = 0; at < in.numel(); at += kSlice) {
      const int64_t n = std::min(kSlice, in.numel() - at);
      in.narrow(0, at, n).copy_(values(rank_, first + at, n, o_.redop));
    }
    if (!in_place) b_.recv.zero_();
  }

  void run(bool in_place) {
    const CollectiveOp op = o_.op;
    at::Tensor in = input(in_place);
    if (op == CollectiveOp::kAllreduce) {
      if (!in_place) b_.recv.copy_(in);
      std::vector<at::Tensor> t{b_.recv};
      c10d::AllreduceOptions opts;
      opts.reduceOp = reduce_op(o_.redop);
      wait(pg_.backend()->allreduce(t, opts));
    } else if (rooted(op)) {
      if (!in_place) b_.recv.copy_(in);
      std::vector<at::Tensor> t{b_.recv};
      if (op == CollectiveOp::kBroadcast) {
        c10d::BroadcastOptions opts;
        opts.rootRank = o_.root;
        wait(pg_.backend()->broadcast(t, opts));
      } else {
        c10d::ReduceOptions opts;
        opts.rootRank = o_.root;
        opts.reduceOp = reduce_op(o_.redop);
        wait(pg_.backend()->reduce(t, opts));
      }
    } else if (op == CollectiveOp::kAllgather) {
      std::vector<at::Tensor> inputs{in};
      std::vector<std::vector<at::Tensor>> outputs(1);
      for (int j = 0; j < n_; ++j) outputs[0].push_back(b_.recv.narrow(0, j * count_, count_));
      wait(pg_.backend()->allgather(outputs, inputs));
    } else if (op == CollectiveOp::kAlltoall) {
      std::vector<int64_t> even;
      at::Tensor out = in_place ? b_.scratch : b_.recv;
      wait(pg_.backend()->alltoall_base(out, in, even, even));
      if (in_place) b_.recv.copy_(b_.scratch);
    } else {  // reduce_scatter
      at::Tensor out = in_place ? in.narrow(0, rank_ * count_, count_) : b_.recv;
      if (pg_.backend_name() == "nccl") {
        std::vector<at::Tensor> outputs{out};
        std::vector<std::vector<at::Tensor>> inputs(1);
        for (int j = 0; j < n_; ++j) inputs[0].push_back(in.narrow(0, j * count_, count_));
        c10d::ReduceScatterOptions opts;
        opts.reduceOp = reduce_op(o_.redop);
        wait(pg_.backend()->reduce_scatter(outputs, inputs, opts));
      } else {
        std::vector<int64_t> even;
        wait(pg_.backend()->alltoall_base(b_.scratch, in, even, even));
        at::Tensor parts = b_.scratch.view({n_, count_});
        out.copy_(reduce_dim0(parts, o_.redop));
      }
    }
  }

  // Elements of this rank's result that differ from the expected ones.
  int64_t wrong(bool in_place) {
    const CollectiveOp op = o_.op;
    if (op == CollectiveOp::kReduce && rank_ != o_.root) return 0;  // only the root has a result
    at::Tensor got = result(in_place).to(at::kCPU, at::kDouble);
    at::Tensor expected;
    const int64_t c = count_;
    std::vector<at::Tensor> per_rank;
    if (op == CollectiveOp::kAllreduce || op == CollectiveOp::kReduce) {
      for (int r = 0; r < n_; ++r) per_rank.push_back(values(r, 0, c, o_.redop));
      expected = reduce_ranks(per_rank, o_.redop);
    } else if (op == CollectiveOp::kReduceScatter) {
      for (int r = 0; r < n_; ++r) per_rank.push_back(values(r, rank_ * c, c, o_.redop));
      expected = reduce_ranks(per_rank, o_.redop);
    } else if (op == CollectiveOp::kBroadcast) {
      expected = values(o_.root, 0, c, o_.redop);
    } else if (op == CollectiveOp::kAllgather) {
      for (int j = 0; j < n_; ++j) per_rank.push_back(values(j, j * c, c, o_.redop));
      expected = at::cat(per_rank);
    } else {  // alltoall: chunk j comes from rank j's chunk `rank`
      for (int j = 0; j < n_; ++j) per_rank.push_back(values(j, rank_ * c, c, o_.redop));
      expected = at::cat(per_rank);
    }
    return got.ne(expected.to(at::kDouble)).sum().item<int64_t>();
  }

  // Waits for the device too, so host time covers the operation.
  void sync() {
    if (device_.is_cuda()) (void)b_.recv.narrow(0, 0, 1).to(at::kCPU);
  }

 private:
  at::Tensor input(bool in_place) {
    if (!in_place) return b_.send;
    if (o_.op == CollectiveOp::kAllgather) return b_.recv.narrow(0, rank_ * count_, count_);
    if (o_.op == CollectiveOp::kReduceScatter) return b_.send;  // its output is a chunk of it
    return b_.recv;
  }
  at::Tensor result(bool in_place) {
    if (in_place && o_.op == CollectiveOp::kReduceScatter)
      return b_.send.narrow(0, rank_ * count_, count_);
    return b_.recv;
  }
  void wait(const c10::intrusive_ptr<c10d::Work>& work) {
    wait_work(work, pg_, cat("bench ", to_string(o_.op)));
  }

  const CollectiveBenchOptions& o_;
  const ProcessGroup& pg_;
  int n_, rank_;
  int64_t count_;
  at::ScalarType dtype_;
  at::Device device_{at::kCPU};
  Buffers b_;
};

void validate(const CollectiveBenchOptions& o, const ProcessGroup& pg) {
  if (o.min_bytes < 1 || o.max_bytes < o.min_bytes || o.step_factor < 2) {
    throw InvalidArgument(cat("bench collective: bad size range -b ", o.min_bytes, " -e ",
                              o.max_bytes, " -f ", o.step_factor,
                              "; need 1 <= -b <= -e and -f >= 2"));
  }
  if (o.iterations < 1 || o.warmup < 0) {
    throw InvalidArgument("bench collective: need -n >= 1 and -w >= 0");
  }
  if (o.root < 0 || o.root >= pg.size()) {
    throw InvalidArgument(cat("bench collective: root ", o.root, " is not a rank of the ",
                              pg.size(), "-rank group; pass -r between 0 and ", pg.size() - 1));
  }
  if (!pg.backend()) {
    throw InvalidArgument(
        "bench collective needs several ranks; start it with 'dtrain run --nproc-per-node N'");
  }
}

CollectiveBenchTiming measure(Runner& runner, const CollectiveBenchOptions& o,
                              const ProcessGroup& pg, bool in_place, int64_t bytes) {
  runner.fill(in_place);
  for (int i = 0; i < o.warmup; ++i) runner.run(in_place);
  runner.sync();
  pg.barrier();
  const auto start = Clock::now();
  for (int i = 0; i < o.iterations; ++i) runner.run(in_place);
  runner.sync();
  const double us =
      std::chrono::duration<double, std::micro>(Clock::now() - start).count() / o.iterations;
  CollectiveBenchTiming t;
  t.time_us = all_reduce_mean(pg, us);
  t.algbw_gbps = bytes / (t.time_us * 1e-6) / 1e9;
  t.busbw_gbps = t.algbw_gbps * bus_bandwidth_factor(o.op, pg.size());
  if (o.check) {
    runner.fill(in_place);
    runner.run(in_place);
    t.wrong = static_cast<int64_t>(all_reduce_sum(pg, static_cast<double>(runner.wrong(in_place))));
  }
  return t;
}

}  // namespace

std::string to_string(CollectiveDtype dtype) {
  switch (dtype) {
    case CollectiveDtype::kFloat:
      return "float";
    case CollectiveDtype::kDouble:
      return "double";
    case CollectiveDtype::kInt32:
      return "int32";
    case CollectiveDtype::kInt64:
      return "int64";
  }
  return "?";
}

CollectiveDtype parse_collective_dtype(const std::string& name) {
  for (CollectiveDtype d : kDtypes) {
    if (name == to_string(d)) return d;
  }
  throw InvalidArgument(
      cat("bench collective: unknown type '", name, "'; use float, double, int32 or int64"));
}

std::string to_string(CollectiveReduceOp op) {
  switch (op) {
    case CollectiveReduceOp::kSum:
      return "sum";
    case CollectiveReduceOp::kProd:
      return "prod";
    case CollectiveReduceOp::kMin:
      return "min";
    case CollectiveReduceOp::kMax:
      return "max";
  }
  return "?";
}

CollectiveReduceOp parse_collective_reduce_op(const std::string& name) {
  for (CollectiveReduceOp op : kReduceOps) {
    if (name == to_string(op)) return op;
  }
  throw InvalidArgument(
      cat("bench collective: unknown reduction '", name, "'; use sum, prod, min or max"));
}

std::string to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllreduce:
      return "allreduce";
    case CollectiveOp::kAllgather:
      return "allgather";
    case CollectiveOp::kReduceScatter:
      return "reduce_scatter";
    case CollectiveOp::kBroadcast:
      return "broadcast";
    case CollectiveOp::kReduce:
      return "reduce";
    case CollectiveOp::kAlltoall:
      return "alltoall";
  }
  return "?";
}

CollectiveOp parse_collective_op(const std::string& name) {
  for (CollectiveOp op : kOps) {
    if (name == to_string(op)) return op;
  }
  throw InvalidArgument(
      cat("unknown collective '", name, "'; use ", join(collective_bench_ops(), ", ")));
}

std::vector<std::string> collective_bench_ops() {
  std::vector<std::string> names;
  for (CollectiveOp op : kOps) names.push_back(to_string(op));
  return names;
}

double bus_bandwidth_factor(CollectiveOp op, int n) {
  if (op == CollectiveOp::kAllreduce) return 2.0 * (n - 1) / n;
  if (chunked(op)) return static_cast<double>(n - 1) / n;
  return 1.0;  // broadcast, reduce
}

int64_t parse_byte_size(const std::string& text) {
  std::string digits = text;
  int64_t unit = 1;
  if (!digits.empty()) {
    switch (std::toupper(static_cast<unsigned char>(digits.back()))) {
      case 'K':
        unit = int64_t{1} << 10;
        break;
      case 'M':
        unit = int64_t{1} << 20;
        break;
      case 'G':
        unit = int64_t{1} << 30;
        break;
      default:
        break;
    }
    if (unit != 1) digits.pop_back();
  }
  long long value = 0;
  if (!parse_int(digits, &value) || value < 0 || value > (int64_t{1} << 50) / unit) {
    throw InvalidArgument(
        cat("bad byte size '", text,
            "'; use a number with an optional K, M or G suffix (e.g. 8, 64K, 128M)"));
  }
  return value * unit;
}

std::vector<CollectiveBenchRow> run_collective_bench(const CollectiveBenchOptions& o,
                                                     const ProcessGroup& pg) {
  validate(o, pg);
  const int n = pg.size();
  const int64_t elem = at::elementSize(scalar_type(o.dtype));
  std::vector<CollectiveBenchRow> rows;
  for (int64_t size = o.min_bytes; size <= o.max_bytes; size *= o.step_factor) {
    // nccl-tests: count per rank (or per chunk), size rounded down to it.
    const int64_t count = chunked(o.op) ? size / elem / n : size / elem;
    if (count == 0) continue;  // too small to give every rank an element
    CollectiveBenchRow row;
    row.count = count;
    row.bytes = (chunked(o.op) ? count * n : count) * elem;
    row.type = to_string(o.dtype);
    row.redop = reduces(o.op) ? to_string(o.redop) : "none";
    row.root = rooted(o.op) ? o.root : -1;
    Runner runner(o, pg, count);
    row.out_of_place = measure(runner, o, pg, false, row.bytes);
    row.in_place = measure(runner, o, pg, true, row.bytes);
    rows.push_back(row);
    if (size > o.max_bytes / o.step_factor) break;  // no overflow
  }
  return rows;
}

std::string format_collective_table(const CollectiveBenchOptions& o,
                                    const std::vector<CollectiveBenchRow>& rows, int world_size,
                                    const std::string& backend) {
  std::string out =
      cat("# dtrain bench collective: ", to_string(o.op), ", ", world_size, " ranks, ", backend,
          ", -b ", o.min_bytes, " -e ", o.max_bytes, " -f ", o.step_factor, " -n ", o.iterations,
          " -w ", o.warmup, " -c ", o.check ? 1 : 0, "\n#\n");
  out +=
      "#                                                              out-of-place                 "
      "      in-place          \n"
      "#       size         count      type   redop    root     time   algbw   busbw #wrong     "
      "time   algbw   busbw #wrong\n"
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            "
      "(us)  (GB/s)  (GB/s)       \n";
  char line[256];
  int64_t wrong = 0;
  double busbw = 0;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%12lld  %12lld  %8s  %6s  %6d",
                  static_cast<long long>(r.bytes), static_cast<long long>(r.count), r.type.c_str(),
                  r.redop.c_str(), r.root);
    out += line;
    for (const CollectiveBenchTiming* t : {&r.out_of_place, &r.in_place}) {
      const std::string w = t->wrong < 0 ? "N/A" : std::to_string(t->wrong);
      std::snprintf(line, sizeof line, "  %7.2f  %6.2f  %6.2f  %5s", t->time_us, t->algbw_gbps,
                    t->busbw_gbps, w.c_str());
      out += line;
      wrong += std::max<int64_t>(t->wrong, 0);
      busbw += t->busbw_gbps;
    }
    out += "\n";
  }
  std::snprintf(line, sizeof line,
                "# Out of bounds values : %lld %s\n# Avg bus bandwidth    : %g \n#\n",
                static_cast<long long>(wrong), wrong == 0 ? "OK" : "FAILED",
                rows.empty() ? 0.0 : busbw / (2.0 * rows.size()));
  out += line;
  return out;
}

}  // namespace dtrain
