#include <chrono>

#include <ATen/ATen.h>

#include "comm/state.h"
#include "common/strings.h"
#include "dtrain/bench.h"
#include "dtrain/errors.h"

namespace dtrain {
namespace {

// nccl-tests' bus bandwidth factors: what each rank's link carries relative
// to the message, so busbw compares with the hardware's bandwidth.
double bus_factor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "allgather") return static_cast<double>(n - 1) / n;
  return 1.0;  // broadcast
}

c10::intrusive_ptr<c10d::Work> issue(const std::string& op, const ProcessGroup& pg,
                                     std::vector<at::Tensor>& in,
                                     std::vector<std::vector<at::Tensor>>& out) {
  if (op == "allreduce") return pg.backend()->allreduce(in);
  if (op == "broadcast") return pg.backend()->broadcast(in);
  return pg.backend()->allgather(out, in);
}

}  // namespace

std::vector<CollectiveBenchRow> run_collective_bench(const CollectiveBenchOptions& o,
                                                     const ProcessGroup& pg) {
  if (o.op != "allreduce" && o.op != "allgather" && o.op != "broadcast") {
    throw InvalidArgument(cat("unknown collective '", o.op, "'; use allreduce, allgather or broadcast"));
  }
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.step_factor < 2 || o.iterations < 1) {
    throw InvalidArgument("bench collective: need 4 <= min bytes <= max bytes, factor >= 2, iterations >= 1");
  }
  if (!pg.backend()) {
    throw InvalidArgument("bench collective needs several ranks; start it with 'dtrain run --nproc-per-node N'");
  }
  std::vector<CollectiveBenchRow> rows;
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.step_factor) {
    const int64_t numel = std::max<int64_t>(bytes / 4, 1);
    std::vector<at::Tensor> in{at::ones({numel})};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < pg.size(); ++r) out[0].push_back(at::empty({numel}));
    for (int i = 0; i < o.warmup; ++i) wait_work(issue(o.op, pg, in, out), pg, o.op);
    pg.barrier();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iterations; ++i) wait_work(issue(o.op, pg, in, out), pg, o.op);
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                    .count() /
                o.iterations;
    us = all_reduce_mean(pg, us);
    CollectiveBenchRow row;
    row.bytes = numel * 4;
    row.time_us = us;
    row.algbw_gbps = row.bytes / (us * 1e-6) / 1e9;
    row.busbw_gbps = row.algbw_gbps * bus_factor(o.op, pg.size());
    rows.push_back(row);
  }
  return rows;
}

}  // namespace dtrain
