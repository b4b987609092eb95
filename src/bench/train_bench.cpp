// `dtrain bench train`: whole training steps on synthetic data, timed and
// reported as tf_cnn_benchmarks does.
#include <chrono>
#include <cstdio>
#include <memory>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <nlohmann/json.hpp>

#include "common/cuda_memory.h"
#include "common/strings.h"
#include "dtrain/amp.h"
#include "dtrain/bench.h"
#include "dtrain/config.h"
#include "dtrain/ddp.h"
#include "dtrain/errors.h"
#include "dtrain/metrics.h"
#include "dtrain/models.h"
#include "dtrain/summary.h"
#include "dtrain/timeline.h"
#include "dtrain/train.h"
#include "train/kv_sync.h"
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

// The bench's optimizer (SGD, lr 0.01, momentum 0.9) and kvstore, as the
// trainer's options, so that --kvstore means the same in both.
TrainOptions as_train_options(const TrainBenchOptions& o) {
  TrainOptions t;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 0.01;
  t.optimizer.momentum = 0.9;
  t.amp = o.amp;
  t.kvstore = o.kvstore;
  t.kvstore_optimizer = o.kvstore_optimizer;
  t.kvstore_instance = o.kvstore_instance;
  return t;
}

void check_options(const TrainBenchOptions& o) {
  if (o.batch_size < 1 || o.steps < 1 || o.warmup_steps < 0 || o.image_size < 0 ||
      o.num_classes < 1 || o.display_every < 1 || o.tensorboard_every < 1 || o.threads < 0) {
    throw InvalidArgument(
        "bench train: --batch-size, --steps, --num-classes, --display-every and "
        "--tensorboard-every must be positive, --warmup-steps, --image-size and --threads "
        "non-negative");
  }
  if (o.amp != "none" && o.amp != "bf16" && o.amp != "fp16") {
    throw InvalidArgument(cat("bench train: --amp '", o.amp, "' is not one of none, bf16, fp16"));
  }
  detail::validate_kvstore(as_train_options(o));
}

}  // namespace

TrainBenchResult run_train_bench(const TrainBenchOptions& o, const ProcessGroup& pg,
                                 const TrainBenchPrinter& print) {
  check_options(o);
  if (o.threads > 0) at::set_num_threads(o.threads);
  const bool rank0 = pg.rank() == 0;
  auto say = [&](const std::string& line) {
    if (rank0 && print) print(line);
  };
  TrainBenchResult r;
  r.options = o;
  r.world_size = pg.size();
  const at::Device device = pick_device(o.device, pg);
  r.device = device.str();
  const bool amp = o.amp != "none";
  const at::ScalarType amp_dtype = amp ? amp_dtype_from_name(o.amp) : at::kFloat;
  if (amp) check_autocast(device.type(), amp_dtype);

  const bool cnn = o.model == "cnn";
  ModelOptions mo;
  mo.in_channels = cnn ? 1 : 3;
  mo.image_size = o.image_size > 0 ? o.image_size : (cnn ? 28 : 224);
  mo.num_classes = o.num_classes;
  r.options.image_size = mo.image_size;

  // Sinks first: a directory that cannot be created fails before any work.
  std::unique_ptr<SummaryWriter> tb;
  if (rank0 && !o.tensorboard.empty()) tb = std::make_unique<SummaryWriter>(o.tensorboard);
  std::unique_ptr<Timeline> tl;
  if (!o.timeline.empty()) {
    tl = std::make_unique<Timeline>(timeline_path_for_rank(o.timeline, pg.rank(), pg.size()),
                                    TimelineOptions{pg.rank(), ""});
  }
  std::unique_ptr<MetricsExporter> metrics;
  if (o.metrics_port >= 0) {
    MetricsOptions mo;
    mo.port = o.metrics_port == 0 ? 0 : o.metrics_port + pg.local_rank();
    mo.host = o.metrics_host;
    mo.rank = pg.rank();
    mo.gpu_metrics = device.is_cuda();
    metrics = std::make_unique<MetricsExporter>(mo);
    std::printf("rank %d: metrics on http://%s:%d/metrics\n", pg.rank(), mo.host.c_str(),
                metrics->port());
    std::fflush(stdout);
  }

  torch::manual_seed(0);
  auto model = make_model(o.model, mo);
  model->to(device);
  if (o.channels_last) to_channels_last(*model);
  r.forward_macs = forward_macs(*model, mo.in_channels, mo.image_size);  // eval mode, restored
  DdpOptions dopt;
  dopt.bucket_observer =
      timeline_bucket_observer(tl.get(), o.kvstore.empty() ? "allreduce" : "pushpull");
  const TrainOptions kv_options = as_train_options(o);
  std::unique_ptr<detail::KvSync> kv =
      detail::KvSync::open(kv_options, pg, *model, kv_options.optimizer.lr);
  if (kv) dopt.comm_hook = kv->hook();
  DistributedDataParallel<ImageClassifier> ddp(model, pg, dopt);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  GradScalerOptions so;
  so.enabled = amp && needs_grad_scaler(amp_dtype);
  so.process_group = pg;
  GradScaler scaler(so);

  // Synthetic data as tf_cnn_benchmarks makes it: one random batch on the
  // device, labels fixed for the run; nothing is loaded or copied per step.
  torch::manual_seed(1 + pg.rank());
  const auto fopts = at::TensorOptions().device(device);
  at::Tensor x = at::randn({o.batch_size, mo.in_channels, mo.image_size, mo.image_size}, fopts);
  if (o.channels_last) x = x.contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor y = at::randint(0, o.num_classes, {o.batch_size}, fopts.dtype(at::kLong));

  auto step = [&]() -> at::Tensor {
    TimelineSpan step_span(tl.get(), "step");
    opt.zero_grad();
    at::Tensor loss;
    {
      TimelineSpan s(tl.get(), "forward");
      AutocastGuard autocast(device.type(), amp_dtype, amp);
      loss = torch::nn::functional::cross_entropy(ddp.forward(x), y);
    }
    {
      TimelineSpan s(tl.get(), "backward");
      scaler.scale(loss).backward();
    }
    {
      TimelineSpan s(tl.get(), "optimizer step");
      if (kv && kv->updates_on_servers()) {
        kv->step();  // the servers' SGD: their weights into the model
      } else {
        scaler.step(opt);
        scaler.update();
      }
    }
    return loss;
  };

  say(cat("Model:       ", o.model, " (", mo.image_size, "x", mo.image_size, ", ", o.num_classes,
          " classes)"));
  say(cat("Batch size:  ", o.batch_size * pg.size(), " global, ", o.batch_size, " per process"));
  say(cat("Processes:   ", pg.size(), " (", pg.backend_name(), "), device ", r.device, ", threads ",
          at::get_num_threads()));
  say(cat("AMP:         ", o.amp, ", memory format ",
          o.channels_last ? "channels_last" : "contiguous"));
  say(cat("Optimizer:   sgd (momentum 0.9), synthetic data"));
  say(cat("Gradients:   ", kv ? kv->describe() : std::string("DDP allreduce")));
  say(cat("Warm-up:     ", o.warmup_steps, " steps, timed: ", o.steps, " steps"));
  at::Tensor loss;
  for (int i = 0; i < o.warmup_steps; ++i) loss = step();
  // Note [Timing as tf_cnn_benchmarks] Ranks run in lock-step (every step
  // ends in DDP's allreduce), so rank 0's wall clock over an interval times
  // every rank's steps and the total rate is world x batch x steps / time.
  // Reading the loss (item()) waits for the device, so each interval ends
  // with its work done; no other synchronisation is added to the steps.
  if (loss.defined()) loss.item<float>();
  // The peak over the timed steps (torch.cuda.reset_peak_memory_stats()
  // then max_memory_allocated(), as the peer measures it): the weights,
  // gradients and optimizer state the warm-up made plus each step's most.
  if (device.is_cuda()) compat::reset_cuda_peak_allocated(device.index());
  pg.barrier();
  say("Step\tImg/sec\ttotal_loss");
  const double images_per_step = static_cast<double>(o.batch_size) * pg.size();
  const auto start = Clock::now();
  auto display_start = start, tb_start = start;
  int display_from = 0, tb_from = 0;
  auto step_start = start;
  double last_loss = 0;
  for (int i = 1; i <= o.steps; ++i) {
    loss = step();
    if (metrics) {  // no device synchronisation: the loss is the last one read
      const auto now = Clock::now();
      metrics->record_step(
          {std::chrono::duration<double>(now - step_start).count(), o.batch_size, last_loss, 0, 0});
      step_start = now;
    }
    const bool display = i % o.display_every == 0 || i == o.steps;
    const bool write_tb = tb && (i % o.tensorboard_every == 0 || i == o.steps);
    if (!display && !write_tb) continue;
    const double loss_value = loss.item<float>();
    last_loss = loss_value;
    const auto now = Clock::now();
    if (display) {
      const double secs = std::chrono::duration<double>(now - display_start).count();
      say(cat(i, "\ttotal images/sec: ", fixed(images_per_step * (i - display_from) / secs, 1),
              "\t", fixed(loss_value, 3)));
      if (metrics) metrics->set_images_per_second(o.batch_size * (i - display_from) / secs);
      display_start = now;
      display_from = i;
    }
    if (write_tb) {
      const double secs = std::chrono::duration<double>(now - tb_start).count();
      tb->add_scalar("images_per_sec", images_per_step * (i - tb_from) / secs, i);
      tb->add_scalar("loss", loss_value, i);
      tb->add_scalar("loss_scale", scaler.is_enabled() ? scaler.get_scale() : 1.0, i);
      tb_start = now;
      tb_from = i;
    }
  }
  r.final_loss = loss.item<float>();
  const double total_s = all_reduce_mean(pg, seconds_since(start));
  r.step_ms = total_s * 1000.0 / o.steps;
  r.images_per_sec = images_per_step * o.steps / total_s;
  r.loss_scale = scaler.is_enabled() ? scaler.get_scale() : 1.0;
  // Note [Achieved FLOP/s] A training step is counted as 3 forward passes
  // (backward computes the gradients of inputs and of weights, each about a
  // forward's work), 2 FLOPs per multiply-accumulate: 6 x forward MACs per
  // image, times the total images/sec of all ranks.
  r.tflops = 6.0 * static_cast<double>(r.forward_macs) * r.images_per_sec / 1e12;
  if (device.is_cuda()) {
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    r.peak_mem_gib = static_cast<double>(compat::cuda_peak_allocated_bytes(device.index())) / kGiB;
    r.gpu_mem_gib = static_cast<double>(gpu_total_memory_bytes(device.index())) / kGiB;
  }
  if (kv) kv->close();
  if (tb) tb->flush();
  if (tl) tl->flush();
  const std::string rule(64, '-');
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
  j["model"] = r.options.model;
  j["world_size"] = r.world_size;
  j["batch_size"] = r.options.batch_size;
  j["image_size"] = r.options.image_size;
  j["num_classes"] = r.options.num_classes;
  j["amp"] = r.options.amp;
  j["channels_last"] = r.options.channels_last;
  j["threads"] = r.options.threads;
  j["device"] = r.device;
  j["kvstore"] = r.options.kvstore.empty() ? "none" : r.options.kvstore;
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
