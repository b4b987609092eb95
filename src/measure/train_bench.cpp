// `dtrain bench train`: whole training steps of train() (the loop of
// `dtrain train`) on synthetic data, timed and reported as tf_cnn_benchmarks
// does; the timing is a TrainOptions::step_observer.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include "common/cuda_memory.h"
#include "common/strings.h"
#include "dtrain/bench.h"
#include "dtrain/compat.h"
#include "dtrain/config.h"
#include "dtrain/errors.h"
#include "dtrain/models.h"
#include "dtrain/train.h"
#if DTRAIN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;

// The GPU's memory (torch.cuda.get_device_properties(device).total_memory);
// 0 when the CUDA runtime cannot tell, or in a CPU-only build.
int64_t gpu_total_memory_bytes(int device) {
#if DTRAIN_HAVE_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return 0;
  return static_cast<int64_t>(prop.totalGlobalMem);
#else
  (void)device;
  return 0;
#endif
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

int64_t resolved_image_size(const TrainBenchOptions& o) {
  return o.image_size > 0 ? o.image_size : (o.train.model == "cnn" ? 28 : 224);
}

void check_options(const TrainBenchOptions& o) {
  auto at_least = [](const char* field, int64_t v, int64_t min) {
    if (v < min) {
      throw InvalidArgument(cat("TrainBenchOptions::", field,
                                min > 0 ? " must be positive, got " : " must be >= 0, got ", v));
    }
  };
  at_least("steps", o.steps, 1);
  at_least("display_every", o.display_every, 1);
  at_least("num_classes", o.num_classes, 1);
  at_least("warmup_steps", o.warmup_steps, 0);
  at_least("image_size", o.image_size, 0);
}

// Note [Timing as tf_cnn_benchmarks]
// The clock starts at the end of the warm-up (the step observer's call after
// step warmup_steps, or before the first step without warm-up) once every
// rank is there (a barrier), and each timed interval ends at a step the
// observer sees: train() has read that step's loss from the device then, so
// the interval's work is done. Ranks run in lock-step (every step ends in
// DDP's allreduce), so rank 0's clock over an interval times every rank's
// steps and the total rate is world x batch x steps / time; the whole run's
// time is averaged over ranks.
class StepClock {
 public:
  StepClock(const TrainBenchOptions& o, const ProcessGroup& pg, at::Device device,
            const TrainBenchPrinter& print, TrainBenchResult& r)
      : o_(o), pg_(pg), device_(device), print_(print), r_(r) {}

  void operator()(const TrainStep& s) {
    if (s.step == 0) header();
    if (s.step == o_.warmup_steps) start();
    const int64_t i = s.step - o_.warmup_steps;  // timed steps so far
    if (i < 1) return;
    const bool last = i == o_.steps;
    if (i % o_.display_every != 0 && !last) return;
    const auto now = Clock::now();
    const double secs = std::chrono::duration<double>(now - display_start_).count();
    say(cat(i, "\ttotal images/sec: ", fixed(images_per_step() * (i - display_from_) / secs, 1),
            "\t", fixed(s.loss, 3)));
    display_start_ = now;
    display_from_ = i;
    if (last) finish(s.loss);
  }

 private:
  double images_per_step() const {
    return static_cast<double>(o_.train.batch_size) * o_.train.accumulation_steps * pg_.size();
  }
  void say(const std::string& line) const {
    if (pg_.rank() == 0 && print_) print_(line);
  }

  void header() const {
    const TrainOptions& t = o_.train;
    const int64_t size = resolved_image_size(o_);
    say(cat("Model:       ", t.model, " (", size, "x", size, ", ", o_.num_classes, " classes)"));
    say(cat("Batch size:  ", t.batch_size * pg_.size(), " global, ", t.batch_size, " per process"));
    say(cat("Processes:   ", pg_.size(), " (", pg_.backend_name(), "), device ", r_.device,
            ", threads ", at::get_num_threads()));
    say(cat("AMP:         ", to_string(t.amp), ", memory format ",
            t.channels_last ? "channels_last" : "contiguous"));
    say(cat("Optimizer:   ", to_string(t.optimizer.type), " (momentum ", t.optimizer.momentum,
            "), synthetic data"));
    // As KvSync::describe() words it: each rank is a worker.
    say(cat("Gradients:   ", !t.kvstore ? std::string("DDP allreduce")
                                        : cat("kvstore ", kvstore_type_name(*t.kvstore), " (",
                                              pg_.size(), " worker(s)), optimizer on the ",
                                              optimizer_on_servers(t) ? "servers" : "workers")));
    say(cat("Warm-up:     ", o_.warmup_steps, " steps, timed: ", o_.steps, " steps"));
  }

  void start() {
    // The peak over the timed steps (torch.cuda.reset_peak_memory_stats()
    // then max_memory_allocated(), as the peer measures it): the weights,
    // gradients and optimizer state the warm-up made plus each step's most.
    if (device_.is_cuda()) compat::reset_cuda_peak_allocated(device_.index());
    pg_.barrier();
    say("Step\tImg/sec\ttotal_loss");
    start_ = display_start_ = Clock::now();
  }

  void finish(double loss) {
    r_.final_loss = loss;
    const double total_s = all_reduce_mean(pg_, seconds_since(start_));
    r_.step_ms = total_s * 1000.0 / o_.steps;
    r_.images_per_sec = images_per_step() * o_.steps / total_s;
    if (device_.is_cuda()) {
      constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
      r_.peak_mem_gib =
          static_cast<double>(compat::cuda_peak_allocated_bytes(device_.index())) / kGiB;
      r_.gpu_mem_gib = static_cast<double>(gpu_total_memory_bytes(device_.index())) / kGiB;
    }
  }

  const TrainBenchOptions& o_;
  const ProcessGroup& pg_;
  at::Device device_;
  const TrainBenchPrinter& print_;
  TrainBenchResult& r_;
  Clock::time_point start_, display_start_;
  int64_t display_from_ = 0;
};

}  // namespace

TrainOptions train_options_for(const TrainBenchOptions& o, int world_size) {
  TrainOptions t = o.train;
  const int64_t size = resolved_image_size(o);
  // One epoch of exactly warmup_steps + steps optimizer steps.
  const int64_t batches =
      (static_cast<int64_t>(o.warmup_steps) + o.steps) * std::max(1, o.train.accumulation_steps);
  t.dataset.name = "synthetic";
  t.dataset.data_dir = cat(o.train.model == "cnn" ? 1 : 3, "x", size, "x", size, ":", o.num_classes,
                           ":", t.batch_size * world_size * batches);
  t.dataset.image_size = 0;
  t.epochs = 1;
  t.evaluate_every_epoch = false;
  t.eval_batch_size = 1;     // the test split's one batch stays small
  t.checkpoint_dir.clear();  // no resume: the steps are counted from 0
  t.checkpoint_every_steps = t.checkpoint_every_epochs = 0;
  t.log_run = false;
  t.progress = TrainOptions::Progress::kNone;
  t.step_observer = nullptr;
  return t;
}

TrainBenchResult run_train_bench(const TrainBenchOptions& o, const ProcessGroup& pg,
                                 const TrainBenchPrinter& print, std::shared_ptr<KVStore> kvstore) {
  check_options(o);
  TrainBenchResult r;
  r.options = o;
  r.options.image_size = resolved_image_size(o);
  r.world_size = pg.size();
  TrainOptions t = train_options_for(o, pg.size());
  validate(t);  // before anything runs: a bad option fails as in dtrain train
  const at::Device device = pick_device(t.device, pg);
  r.device = device.str();
  {
    // Counted on a CPU copy of the model: the count depends on the shapes only.
    ModelOptions mo;
    mo.in_channels = t.model == "cnn" ? 1 : 3;
    mo.image_size = r.options.image_size;
    mo.num_classes = o.num_classes;
    auto model = make_model(t.model, mo);
    r.forward_macs = forward_macs(*model, mo.in_channels, mo.image_size);
  }
  StepClock clock(o, pg, device, print, r);
  t.step_observer = [&clock, user = o.train.step_observer](const TrainStep& s) {
    if (user) user(s);
    clock(s);
  };
  const std::vector<EpochMetrics> epochs = train(t, pg, std::move(kvstore), &std::cout);
  r.loss_scale = !epochs.empty() && epochs.back().loss_scale > 0 ? epochs.back().loss_scale : 1.0;
  // Note [Achieved FLOP/s] A training step is counted as 3 forward passes
  // (backward computes the gradients of inputs and of weights, each about a
  // forward's work), 2 FLOPs per multiply-accumulate: 6 x forward MACs per
  // image, times the total images/sec of all ranks.
  r.tflops = 6.0 * static_cast<double>(r.forward_macs) * r.images_per_sec / 1e12;
  const std::string rule(64, '-');
  auto say = [&](const std::string& line) {
    if (pg.rank() == 0 && print) print(line);
  };
  say(rule);
  say(cat("total images/sec: ", fixed(r.images_per_sec, 2)));
  say(rule);
  say(cat("achieved TFLOP/s: ", fixed(r.tflops, 3), " (", pg.size(), " process(es); 6 x ",
          fixed(static_cast<double>(r.forward_macs) / 1e9, 3),
          " GMACs per image, forward convolutions and linear layers)"));
  say(r.peak_mem_gib
          ? cat("peak GPU memory: ", fixed(*r.peak_mem_gib, 2), " GiB of ",
                fixed(r.gpu_mem_gib.value_or(0), 2), " GiB (rank 0, ", r.device, ", timed steps)")
          : cat("peak GPU memory: n/a (", r.device, ")"));
  return r;
}

std::string to_json(const TrainBenchResult& r) {
  nlohmann::json j;
  j["impl"] = "dtrain";
  j["bench"] = "train";
  const TrainOptions& t = r.options.train;
  j["model"] = t.model;
  j["world_size"] = r.world_size;
  j["batch_size"] = t.batch_size;
  j["image_size"] = r.options.image_size;
  j["num_classes"] = r.options.num_classes;
  j["amp"] = to_string(t.amp);
  j["channels_last"] = t.channels_last;
  j["threads"] = t.threads;
  j["device"] = r.device;
  j["kvstore"] = t.kvstore ? kvstore_type_name(*t.kvstore) : "none";
  j["steps"] = r.options.steps;
  j["warmup_steps"] = r.options.warmup_steps;
  j["images_per_sec"] = r.images_per_sec;
  j["step_ms"] = r.step_ms;
  j["final_loss"] = r.final_loss;
  j["loss_scale"] = r.loss_scale;
  j["forward_gmacs"] = static_cast<double>(r.forward_macs) / 1e9;
  j["tflops"] = r.tflops;
  j["peak_mem_gib"] = r.peak_mem_gib ? nlohmann::json(*r.peak_mem_gib) : nlohmann::json(nullptr);
  j["gpu_mem_gib"] = r.gpu_mem_gib ? nlohmann::json(*r.gpu_mem_gib) : nlohmann::json(nullptr);
  return j.dump();
}

}  // namespace dtrain
