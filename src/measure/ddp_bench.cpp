#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "common/strings.h"
#include "dtrain/bench.h"
#include "dtrain/comm.h"
#include "dtrain/ddp.h"
#include "dtrain/errors.h"
#include "dtrain/models.h"
#include "dtrain/powersgd.h"
#include "dtrain/timeline.h"

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct StepTimes {
  std::vector<double> step, forward, backward, optimizer;
};

// Standalone communication with nothing to overlap: DDP's buckets as flat
// fp32 tensors, all launched back to back, then waited.
double time_bucket_allreduce(const ProcessGroup& pg, const std::vector<int64_t>& bucket_bytes,
                             int reps) {
  if (pg.size() == 1) return 0;
  std::vector<at::Tensor> buckets;
  for (int64_t b : bucket_bytes) buckets.push_back(at::ones({std::max<int64_t>(b / 4, 1)}));
  std::vector<double> times;
  for (int r = 0; r < reps + 2; ++r) {
    pg.barrier();
    auto t = Clock::now();
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (auto& b : buckets) {
      std::vector<at::Tensor> one{b};
      works.push_back(pg.backend()->allreduce(one));
    }
    for (size_t i = 0; i < works.size(); ++i) wait_work(works[i], pg, "bench allreduce");
    if (r >= 2) times.push_back(ms_since(t));
  }
  return mean(times);
}

double time_buffer_broadcast(const ProcessGroup& pg, torch::nn::Module& m, int reps) {
  int64_t numel = 0;
  for (const auto& b : m.buffers()) {
    if (b.is_floating_point()) numel += b.numel();
  }
  if (pg.size() == 1 || numel == 0) return 0;
  std::vector<at::Tensor> flat{at::zeros({numel})};
  std::vector<double> times;
  for (int r = 0; r < reps + 2; ++r) {
    pg.barrier();
    auto t = Clock::now();
    pg.broadcast(flat, 0);
    if (r >= 2) times.push_back(ms_since(t));
  }
  return mean(times);
}

}  // namespace

DdpBenchResult run_ddp_bench(const DdpBenchOptions& o, const ProcessGroup& pg) {
  if (o.batch_size < 1 || o.steps < 1 || o.warmup < 0) {
    throw InvalidArgument(
        "bench ddp: DdpBenchOptions::batch_size and steps must be positive, warmup >= 0");
  }
  // A named interface that is absent fails here, before any traffic.
  if (!o.wire_interface.empty()) read_interface_bytes(o.wire_interface);
  if (o.threads > 0) at::set_num_threads(o.threads);
  DdpBenchResult r;
  r.options = o;
  r.world_size = pg.size();
  const bool cnn = o.model == "cnn";
  ModelOptions mo;
  mo.in_channels = cnn ? 1 : 3;
  mo.image_size = o.image_size > 0 ? o.image_size : (cnn ? 28 : 32);
  mo.num_classes = o.num_classes;
  r.options.image_size = mo.image_size;
  torch::manual_seed(0);
  auto model = make_model(o.model, mo);
  std::unique_ptr<Timeline> tl;
  if (!o.timeline.empty()) {
    tl = std::make_unique<Timeline>(timeline_path_for_rank(o.timeline, pg.rank(), pg.size()),
                                    TimelineOptions{pg.rank(), ""});
  }
  DdpOptions dopt;
  dopt.bucket_observer = timeline_bucket_observer(tl.get());
  dopt.bucket_cap_mb = o.bucket_cap_mb;
  dopt.comm_hook = comm_hook_by_name(o.comm_hook, o.powersgd);
  check_powersgd_rank(dopt.comm_hook.get(), *model, o.model,
                      "PowerSGDOptions::matrix_approximation_rank");
  dopt.find_unused_parameters = o.find_unused_parameters;
  DistributedDataParallel<ImageClassifier> ddp(model, pg, dopt);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  // One fixed synthetic batch per rank: the benchmark measures compute and
  // communication, not data loading.
  torch::manual_seed(1 + pg.rank());
  at::Tensor x = at::randn({o.batch_size, mo.in_channels, mo.image_size, mo.image_size});
  at::Tensor y = at::randint(0, o.num_classes, {o.batch_size}, at::kLong);

  auto step = [&](bool sync, StepTimes* t) {
    TimelineSpan step_span(tl.get(), sync ? "step" : "step (no_sync)");
    auto start = Clock::now();
    opt.zero_grad();
    auto f0 = Clock::now();
    at::Tensor loss;
    double fwd, bwd;
    if (sync) {
      {
        TimelineSpan s(tl.get(), "forward");
        loss = torch::nn::functional::cross_entropy(ddp.forward(x), y);
      }
      fwd = ms_since(f0);
      auto b0 = Clock::now();
      {
        TimelineSpan s(tl.get(), "backward");
        loss.backward();
      }
      bwd = ms_since(b0);
    } else {
      auto guard = ddp.no_sync();
      {
        TimelineSpan s(tl.get(), "forward");
        loss = torch::nn::functional::cross_entropy(ddp.forward(x), y);
      }
      fwd = ms_since(f0);
      auto b0 = Clock::now();
      {
        TimelineSpan s(tl.get(), "backward");
        loss.backward();
        pg.barrier();  // keep ranks in lock-step as DDP does
      }
      bwd = ms_since(b0);
    }
    auto o0 = Clock::now();
    {
      TimelineSpan s(tl.get(), "optimizer step");
      opt.step();
    }
    if (t) {
      t->forward.push_back(fwd);
      t->backward.push_back(bwd);
      t->optimizer.push_back(ms_since(o0));
      t->step.push_back(ms_since(start));
    }
  };
  for (int i = 0; i < o.warmup; ++i) step(true, nullptr);
  for (int i = 0; i < o.warmup; ++i) step(false, nullptr);
  // Interleave blocks of 5 so that outside load hits both kinds alike.
  StepTimes synced, local;
  // Bytes on the wire of the DDP steps alone (DdpBenchResult::wire_*).
  std::optional<InterfaceBytes> wire = InterfaceBytes{};
  const auto counters = [&wire, &o]() -> InterfaceBytes {
    if (!wire) return {};
    try {
      return read_interface_bytes(o.wire_interface);
    } catch (const std::exception&) {
      wire.reset();  // no /proc/net/dev here: reported as -1
      return {};
    }
  };
  for (int done = 0; done < o.steps;) {
    int n = std::min(5, o.steps - done);
    const InterfaceBytes before = counters();
    for (int i = 0; i < n; ++i) step(true, &synced);
    const InterfaceBytes after = counters();
    if (wire) {
      wire->tx += after.tx - before.tx;
      wire->rx += after.rx - before.rx;
    }
    for (int i = 0; i < n; ++i) step(false, &local);
    done += n;
  }
  DdpStats stats = ddp.stats();
  if (const auto* p = dynamic_cast<const PowerSGDHook*>(dopt.comm_hook.get())) {
    r.powersgd_stats = p->stats();
  }
  r.bucket_bytes = stats.bucket_bytes;
  for (int64_t b : r.bucket_bytes) r.grad_bytes += b;
  for (const auto& p : model->parameters()) {
    if (p.requires_grad()) r.grad_shapes.push_back(p.sizes().vec());
  }
  const int reps = std::max(5, o.steps / 2);
  double allreduce = time_bucket_allreduce(pg, r.bucket_bytes, reps);
  double broadcast = time_buffer_broadcast(pg, *model, reps);

  std::vector<double> v = all_reduce_mean(
      pg, {mean(synced.step), median(synced.step), mean(synced.forward), mean(synced.backward),
           mean(synced.optimizer), mean(local.step), median(local.step), mean(local.backward),
           allreduce, broadcast, stats.overlap_fraction(),
           wire ? static_cast<double>(wire->tx) / o.steps : -1.0,
           wire ? static_cast<double>(wire->rx) / o.steps : -1.0});
  r.step_ms = v[0];
  r.step_p50_ms = v[1];
  r.forward_ms = v[2];
  r.backward_ms = v[3];
  r.optimizer_ms = v[4];
  r.step_nosync_ms = v[5];
  r.step_nosync_p50_ms = v[6];
  r.backward_compute_ms = v[7];
  r.allreduce_ms = v[8];
  r.broadcast_ms = v[9];
  r.reducer_overlap_fraction = v[10];
  // A rank without counters makes the mean negative: then none is reported.
  r.wire_tx_bytes_per_step = v[11] < 0 ? -1.0 : v[11];
  r.wire_rx_bytes_per_step = v[12] < 0 ? -1.0 : v[12];
  r.comm_ms = r.allreduce_ms + r.broadcast_ms;
  r.images_per_sec = r.step_ms > 0 ? pg.size() * o.batch_size / r.step_ms * 1000.0 : 0;
  r.exposed_comm_ms = std::max(0.0, r.step_p50_ms - r.step_nosync_p50_ms);
  r.hidden_fraction =
      r.comm_ms > 0 ? std::clamp(1.0 - r.exposed_comm_ms / r.comm_ms, 0.0, 1.0) : 0.0;
  return r;
}

std::string to_json(const DdpBenchResult& r) {
  nlohmann::json j;
  j["impl"] = "dtrain";
  j["model"] = r.options.model;
  j["world_size"] = r.world_size;
  j["batch_size"] = r.options.batch_size;
  j["image_size"] = r.options.image_size;
  j["threads"] = r.options.threads;
  j["bucket_cap_mb"] = r.options.bucket_cap_mb;
  j["comm_hook"] = r.options.comm_hook;
  j["find_unused_parameters"] = r.options.find_unused_parameters;
  j["steps"] = r.options.steps;
  j["warmup"] = r.options.warmup;
  j["step_ms"] = r.step_ms;
  j["step_p50_ms"] = r.step_p50_ms;
  j["images_per_sec"] = r.images_per_sec;
  j["forward_ms"] = r.forward_ms;
  j["backward_ms"] = r.backward_ms;
  j["optimizer_ms"] = r.optimizer_ms;
  j["step_nosync_ms"] = r.step_nosync_ms;
  j["step_nosync_p50_ms"] = r.step_nosync_p50_ms;
  j["backward_compute_ms"] = r.backward_compute_ms;
  j["allreduce_ms"] = r.allreduce_ms;
  j["broadcast_ms"] = r.broadcast_ms;
  j["comm_ms"] = r.comm_ms;
  j["exposed_comm_ms"] = r.exposed_comm_ms;
  j["hidden_fraction"] = r.hidden_fraction;
  j["reducer_overlap_fraction"] = r.reducer_overlap_fraction;
  j["wire_tx_bytes_per_step"] = r.wire_tx_bytes_per_step;
  j["wire_rx_bytes_per_step"] = r.wire_rx_bytes_per_step;
  j["grad_bytes"] = r.grad_bytes;
  j["num_buckets"] = r.bucket_bytes.size();
  j["bucket_bytes"] = r.bucket_bytes;
  if (r.powersgd_stats) {
    j["powersgd_rank"] = r.options.powersgd.matrix_approximation_rank;
    j["powersgd_start_iter"] = r.options.powersgd.start_powersgd_iter;
    j["powersgd_iterations"] = r.powersgd_stats->iterations;
    j["powersgd_compression_rate"] = r.powersgd_stats->compression_rate();
  }
  return j.dump();
}

}  // namespace dtrain
