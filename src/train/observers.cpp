// TensorBoard, timeline, Prometheus and GPU readings of a training run; see
// observers.h.
#include "train/observers.h"

#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <vector>

#include <torch/nn/module.h>

#include "common/cuda_memory.h"
#include "common/net.h"
#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/metrics.h"

namespace dtrain::detail {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

double seconds(TrainObservers::Clock::time_point a, TrainObservers::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The run's configuration for TensorBoard's Text tab (a markdown table).
std::string config_markdown(const TrainOptions& o, int world_size) {
  std::vector<std::pair<std::string, std::string>> rows = {
      {"model", o.model},
      {"dataset",
       o.dataset.name + (o.dataset.data_dir.empty() ? "" : " (" + o.dataset.data_dir + ")")},
      {"world size", std::to_string(world_size)},
      {"batch size per rank", std::to_string(o.batch_size)},
      {"accumulation steps", std::to_string(o.accumulation_steps)},
      {"epochs", std::to_string(o.epochs)},
      {"optimizer", to_string(o.optimizer.type)},
      {"lr", cat(o.optimizer.lr)},
      {"lr scaling", to_string(o.lr_scaling)},
      {"lr schedule", to_string(o.lr_schedule)},
      {"weight decay", cat(o.optimizer.weight_decay)},
      {"label smoothing", cat(o.label_smoothing)},
      {"clip grad norm", cat(o.clip_grad_norm)},
      {"amp", to_string(o.amp)},
      {"channels last", o.channels_last ? "yes" : "no"},
      {"device", to_string(o.device)},
      {"bucket cap MB", cat(o.ddp.bucket_cap_mb)},
      {"seed", std::to_string(o.seed)},
  };
  std::string text = "| option | value |\n|---|---|\n";
  for (const auto& [k, v] : rows) text += cat("| ", k, " | ", v, " |\n");
  return text;
}

}  // namespace

// Mean utilisation of this rank's GPU over an epoch (NVML, sampled at most
// once a second from the training thread) and the allocator's peak.
class GpuSampler {
 public:
  explicit GpuSampler(int cuda_index)
      : index_(cuda_index), gpu_(nvml_selector_for_cuda_device(cuda_index)) {}

  void reset() {
    sum_ = 0;
    count_ = 0;
    last_ = TrainObservers::Clock::time_point{};
    compat::reset_cuda_peak_allocated(index_);
  }
  void maybe_sample(TrainObservers::Clock::time_point now) {
    if (!gpu_.available() || seconds(last_, now) < 1.0) return;
    last_ = now;
    if (const std::optional<double> util = gpu_.read()) {
      sum_ += *util;
      ++count_;
    }
  }
  std::string summary() {
    maybe_sample(TrainObservers::Clock::now());
    char buf[96];
    const double gib = static_cast<double>(compat::cuda_peak_allocated_bytes(index_)) / (1 << 30);
    if (count_ > 0) {
      std::snprintf(buf, sizeof buf, "  gpu_util %.0f%%  peak_mem %.2f GiB", sum_ / count_, gib);
    } else {
      std::snprintf(buf, sizeof buf, "  peak_mem %.2f GiB", gib);
    }
    return buf;
  }

 private:
  int index_;
  GpuUtilizationReader gpu_;
  double sum_ = 0;
  int64_t count_ = 0;
  TrainObservers::Clock::time_point last_;
};

TrainObservers::TrainObservers(const TrainOptions& o, const ProcessGroup& pg, std::ostream* log)
    : o_(o), world_size_(pg.size()) {
  device_ = pick_device(o.device, pg);
  if (pg.rank() == 0 && !o.tensorboard.empty()) {
    tb_ = std::make_unique<SummaryWriter>(o.tensorboard);
  }
  if (!o.timeline.empty()) {
    timeline_ = std::make_unique<Timeline>(timeline_path_for_rank(o.timeline, pg.rank(), pg.size()),
                                           TimelineOptions{pg.rank(), ""});
  }
  if (o.metrics_port >= 0) {
    MetricsOptions m;
    m.port = o.metrics_port == 0 ? 0 : o.metrics_port + pg.local_rank();
    m.host = o.metrics_host;
    m.rank = pg.rank();
    m.node = env_or("DTRAIN_NODE_NAME", host_name());
    m.run_id = env_or("TORCHELASTIC_RUN_ID", "none");
    m.gpu_metrics = device_.is_cuda();
    if (device_.is_cuda()) m.gpus = {nvml_selector_for_cuda_device(device_.index())};
    metrics_ = std::make_unique<MetricsExporter>(m);
    long long restarts = 0;
    parse_int(env_or("TORCHELASTIC_RESTART_COUNT", "0"), &restarts);
    metrics_->set_restarts(restarts);
    if (log != nullptr) {
      *log << "rank " << pg.rank() << ": metrics on http://" << m.host << ":" << metrics_->port()
           << "/metrics" << std::endl;
    }
  }
  if (device_.is_cuda()) gpu_ = std::make_unique<GpuSampler>(device_.index());
  active_ = tb_ || timeline_ || metrics_ || gpu_;
}

TrainObservers::~TrainObservers() = default;

DdpOptions TrainObservers::ddp_options(DdpOptions base) const {
  if (!timeline_) return base;
  // Under --kvstore each bucket's exchange is its push to the servers and the
  // pull of the result (Note [Gradients through a kvstore], kv_sync.cpp).
  auto ours = timeline_bucket_observer(timeline_.get(), o_.kvstore ? "pushpull" : "allreduce");
  if (!base.bucket_observer) {
    base.bucket_observer = std::move(ours);
  } else {
    base.bucket_observer = [user = std::move(base.bucket_observer),
                            ours = std::move(ours)](const BucketTiming& t) {
      user(t);
      ours(t);
    };
  }
  return base;
}

void TrainObservers::attach(const DataParallel& ddp, const GradScaler& scaler,
                            ImageClassifier& model, const std::string& config, int64_t step) {
  ddp_ = &ddp;
  scaler_ = &scaler;
  model_ = &model;
  if (tb_) {
    tb_->add_text("config", config_markdown(o_, world_size_) + config, step);
    tb_->flush();  // TensorBoard shows the run from its start
  }
}

double TrainObservers::exposed_comm_total() const {
  if (ddp_ == nullptr) return 0;
  const DdpStats s = ddp_->stats();
  return s.exposed_comm_seconds * static_cast<double>(s.iterations);
}

void TrainObservers::epoch_start(int64_t epoch) {
  if (!active_) return;
  if (timeline_) timeline_->begin(cat("epoch ", epoch + 1), "train");
  if (metrics_) metrics_->set_epoch(epoch + 1);
  if (gpu_) gpu_->reset();
  step_start_ = window_start_ = Clock::now();
  step_wait_ = step_loss_sum_ = window_wait_ = window_loss_sum_ = 0;
  step_samples_ = step_batches_ = window_samples_ = window_batches_ = 0;
  step_comm_base_ = window_comm_base_ = exposed_comm_total();
}

void TrainObservers::record_wait() {
  const auto now = Clock::now();
  const double waited = seconds(wait_start_, now);
  step_wait_ += waited;
  window_wait_ += waited;
  if (timeline_) timeline_->complete("data wait", "data", wait_start_, now);
}

void TrainObservers::record_batch(int64_t samples, double loss, bool sync_step, int64_t step,
                                  double lr) {
  step_samples_ += samples;
  window_samples_ += samples;
  ++step_batches_;
  ++window_batches_;
  step_loss_sum_ += loss;
  window_loss_sum_ += loss;
  if (!sync_step) return;
  const auto now = Clock::now();
  if (gpu_) gpu_->maybe_sample(now);
  if (metrics_) {
    const double comm = exposed_comm_total();
    const double secs = seconds(step_start_, now);
    metrics_->record_step(
        {secs, step_samples_, step_loss_sum_ / step_batches_, step_wait_, comm - step_comm_base_});
    if (secs > 0) metrics_->set_images_per_second(static_cast<double>(step_samples_) / secs);
    step_comm_base_ = comm;
  }
  step_start_ = now;
  step_wait_ = step_loss_sum_ = 0;
  step_samples_ = step_batches_ = 0;
  if (tb_ && o_.tensorboard_every > 0 && step % o_.tensorboard_every == 0) {
    write_scalars(step, lr, seconds(window_start_, now));
    window_start_ = now;
  }
}

// Note [TensorBoard scalars]
// Per window of tensorboard_every optimizer steps, at the window's last step:
// rank 0's mean batch loss, the group's images/sec (rank 0's rate x world
// size, as the progress line), the learning rate, the fp16 loss scale, and
// the fractions of the window's wall time rank 0 waited for data and for
// communication not hidden behind backward (DdpStats::exposed_comm_seconds).
void TrainObservers::write_scalars(int64_t step, double lr, double secs) {
  const double comm = exposed_comm_total();
  tb_->add_scalar("train/loss", window_loss_sum_ / std::max<int64_t>(1, window_batches_), step);
  tb_->add_scalar("train/lr", lr, step);
  if (secs > 0) {
    tb_->add_scalar("train/images_per_sec",
                    static_cast<double>(window_samples_) * world_size_ / secs, step);
    tb_->add_scalar("train/data_wait_fraction", window_wait_ / secs, step);
    tb_->add_scalar("train/exposed_comm_fraction", (comm - window_comm_base_) / secs, step);
  }
  if (scaler_ != nullptr && scaler_->is_enabled()) {
    tb_->add_scalar("train/loss_scale", scaler_->get_scale(), step);
  }
  window_comm_base_ = comm;
  window_wait_ = window_loss_sum_ = 0;
  window_samples_ = window_batches_ = 0;
}

void TrainObservers::gradients(int64_t step) {
  if (!tb_ || !o_.tensorboard_histograms || model_ == nullptr) return;
  // Under fp16 the gradients are still scaled here: shown as the optimizer
  // will see them.
  const double inv_scale =
      scaler_ != nullptr && scaler_->is_enabled() ? 1.0 / scaler_->get_scale() : 1.0;
  for (const auto& item : model_->named_parameters()) {
    const at::Tensor& g = item.value().grad();
    if (!g.defined()) continue;
    tb_->add_histogram("gradients/" + item.key(), inv_scale == 1.0 ? g : g * inv_scale, step);
  }
}

void TrainObservers::epoch_end(const EpochMetrics& m, int64_t step) {
  if (!active_) return;
  if (gpu_) epoch_suffix_ = gpu_->summary();
  if (timeline_) timeline_->end(cat("epoch ", m.epoch), "train");
  if (metrics_) metrics_->set_images_per_second(m.images_per_sec / std::max(1, world_size_));
  if (!tb_) return;
  tb_->add_scalar("epoch/train_loss", m.train_loss, step);
  if (o_.evaluate_every_epoch) {
    tb_->add_scalar("epoch/test_top1", m.test_acc, step);
    tb_->add_scalar("epoch/test_top5", m.test_top5, step);
    tb_->add_scalar("epoch/test_loss", m.test_loss, step);
  }
  tb_->add_scalar("epoch/images_per_sec", m.images_per_sec, step);
  tb_->add_scalar("epoch/epoch", static_cast<double>(m.epoch), step);
  if (o_.tensorboard_histograms && model_ != nullptr) {
    for (const auto& item : model_->named_parameters()) {
      tb_->add_histogram("weights/" + item.key(), item.value(), step);
    }
  }
  tb_->flush();
}

// Note [Recovery events]
// Live recovery (dtrain/live.h) reports each new generation as a
// RecoveryEvent on every member. What it costs is the time from detecting
// the loss to the new group (detect_to_group) plus any state transfer to a
// joiner: the timeline span covers that much time before the event arrived.
// The log line is written by one member (the caller's choice), the metrics
// and span by every member, the TensorBoard scalar by the rank holding the
// writer (the first generation's rank 0; it stops when that rank is lost).
// The line is formatted here rather than with RecoveryEvent::to_string() so
// that it names the launcher's member ids and says "training resumed".
std::string recovery_line(const RecoveryEvent& e) {
  std::ostringstream line;
  line << "live recovery: generation " << e.generation << " at step " << e.step << ": ";
  switch (e.kind) {
    case RecoveryEvent::Kind::kFormed:
      return cat(line.str(), "formed with ", e.world_size, " workers");
    case RecoveryEvent::Kind::kFenced:
      return cat(line.str(), e.member, " fenced itself (lost the store or left behind); it stops");
    default:
      break;
  }
  for (size_t i = 0; i < e.lost.size(); ++i) {
    line << (i ? ", " : "lost ") << e.lost[i].member << " (" << to_string(e.lost[i].cause) << ")";
  }
  for (size_t i = 0; i < e.joined.size(); ++i) {
    line << (i ? ", " : (e.lost.empty() ? "joined " : "; joined ")) << e.joined[i];
  }
  if (!e.redo_reason.empty()) {
    line << (e.lost.empty() && e.joined.empty() ? "" : "; ") << "step redone (" << e.redo_reason
         << ")";
  }
  line << "; " << e.world_size << " workers (was " << e.previous_world_size
       << "); training resumed " << std::fixed << std::setprecision(2)
       << (e.detect_to_group + e.state_transfer).count() / 1e3 << " s after detection";
  if (e.state_transfer.count() > 0) {
    line << " (state transfer " << e.state_transfer.count() / 1e3 << " s)";
  }
  return line.str();
}

void TrainObservers::recovery(const RecoveryEvent& e, std::ostream* log) {
  if (log) *log << recovery_line(e) << std::endl;
  world_size_ = std::max(1, e.world_size);
  if (metrics_) {
    if (e.kind == RecoveryEvent::Kind::kLost || e.kind == RecoveryEvent::Kind::kJoined) {
      metrics_->record_recovery(e.world_size);
    } else {
      metrics_->set_world_size(e.world_size);
    }
  }
  if (timeline_ && e.kind != RecoveryEvent::Kind::kFormed) {
    const auto now = Timeline::Clock::now();
    const auto took =
        std::chrono::duration_cast<Timeline::Clock::duration>(e.detect_to_group + e.state_transfer);
    timeline_->complete("live recovery", "live", now - took, now, Timeline::kTrainTrack,
                        cat("{\"generation\": ", e.generation, ", \"step\": ", e.step,
                            ", \"world_size\": ", e.world_size, ", \"lost\": ", e.lost.size(),
                            ", \"joined\": ", e.joined.size(), "}"));
  }
  if (tb_) {
    tb_->add_scalar("live/world_size", e.world_size, e.step);
    tb_->flush();
  }
}

void TrainObservers::finish() {
  if (tb_) tb_->flush();
  if (timeline_) timeline_->close();
}

}  // namespace dtrain::detail
