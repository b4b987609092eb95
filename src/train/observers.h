#pragma once
// What train() shows while it runs (TrainOptions' observability fields;
// docs/observability.md): TensorBoard scalars, text and histograms (rank 0),
// a Chrome-trace timeline per rank, a Prometheus endpoint per rank, and on
// GPU runs the mean GPU utilisation and peak memory of each epoch. The
// Trainer calls one TrainObservers at named points of its loop; everything
// observability-specific lives here, so trainer.cpp only marks the points.
//
// Cost when every sink is off: each call is an inline test of one flag (no
// clock read, no allocation); timeline() is null, so TimelineSpan does
// nothing. Not thread-safe: the training thread of one rank owns it.

#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include <c10/core/Device.h>

#include "dtrain/amp.h"
#include "dtrain/ddp.h"
#include "dtrain/live.h"
#include "dtrain/metrics.h"
#include "dtrain/models.h"
#include "dtrain/summary.h"
#include "dtrain/timeline.h"
#include "dtrain/train.h"

namespace dtrain::detail {

class GpuSampler;

/// RecoveryEvent as one log line: "live recovery: generation 3 at step 41:
/// lost rank1@node1 (missed heartbeats); 3 workers (was 4); training resumed
/// 0.41 s after detection". Also kFormed / kJoined / kFenced, and "step
/// redone (<member>: <why>)" for a step given up with nobody lost.
std::string recovery_line(const RecoveryEvent& event);

class TrainObservers {
 public:
  using Clock = std::chrono::steady_clock;

  /// Opens the sinks the options ask for, before any data is read or any
  /// collective runs: the TensorBoard directory (rank 0), this rank's
  /// timeline file, the metrics endpoint on metrics_port + local rank.
  /// Throws InvalidArgument naming the directory, file or host:port and the
  /// fix. `log` is this rank's (may be null): the endpoint's address is
  /// printed there, so a port picked by --metrics-port 0 can be found.
  TrainObservers(const TrainOptions& options, const ProcessGroup& pg, std::ostream* log);
  ~TrainObservers();
  TrainObservers(const TrainObservers&) = delete;
  TrainObservers& operator=(const TrainObservers&) = delete;

  /// Null when --timeline is off (TimelineSpan then costs nothing).
  Timeline* timeline() const { return timeline_.get(); }
  /// `base` with the timeline's bucket observer added (after the user's).
  DdpOptions ddp_options(DdpOptions base) const;
  /// The objects read at run time; all must outlive this object's use.
  /// `config` is written as TensorBoard text at step `step`.
  void attach(const DataParallel& ddp, const GradScaler& scaler, ImageClassifier& model,
              const std::string& config, int64_t step);

  /// The training loop's points, in order: epoch_start, then per batch
  /// wait_for_batch (before the loader's next()), batch_ready (after it),
  /// batch_done; gradients before the epoch's last optimizer step;
  /// epoch_end after evaluation (before the epoch line).
  void epoch_start(int64_t epoch);
  void wait_for_batch() {
    if (active_) wait_start_ = Clock::now();
  }
  void batch_ready() {
    if (active_) record_wait();
  }
  /// `samples` and `loss` of this rank's batch; at a synchronised step,
  /// `step` is the optimizer steps so far and `lr` the step's rate.
  void batch_done(int64_t samples, double loss, bool sync_step, int64_t step, double lr) {
    if (active_) record_batch(samples, loss, sync_step, step, lr);
  }
  /// Gradient histograms of the epoch (rank 0, --tensorboard-histograms).
  void gradients(int64_t step);
  void epoch_end(const EpochMetrics& m, int64_t step);
  /// Live recovery (Note [Recovery events] in observers.cpp): one
  /// RecoveryEvent as a log line to `log` (may be null; the caller passes
  /// it on one member per generation), dtrain_recoveries_total and
  /// dtrain_world_size, the TensorBoard scalar live/world_size at the
  /// event's step (rank 0's writer) and a "live recovery" timeline span from
  /// the detection to now. Called on the training thread when the event
  /// arrives (after the new generation formed and any state transfer).
  void recovery(const RecoveryEvent& event, std::ostream* log);
  /// "  gpu_util 93%  peak_mem 4.21 GiB" for the epoch line on GPU runs;
  /// empty otherwise.
  const std::string& epoch_line_suffix() const { return epoch_suffix_; }
  /// Flushes TensorBoard and closes the timeline; throws Error naming the
  /// file when a write fails.
  void finish();

 private:
  void record_wait();
  void record_batch(int64_t samples, double loss, bool sync_step, int64_t step, double lr);
  void write_scalars(int64_t step, double lr, double seconds);
  double exposed_comm_total() const;

  const TrainOptions& o_;
  int world_size_ = 1;
  bool active_ = false;
  std::unique_ptr<SummaryWriter> tb_;
  std::unique_ptr<Timeline> timeline_;
  std::unique_ptr<MetricsExporter> metrics_;
  std::unique_ptr<GpuSampler> gpu_;
  at::Device device_{at::kCPU};
  const DataParallel* ddp_ = nullptr;
  const GradScaler* scaler_ = nullptr;
  ImageClassifier* model_ = nullptr;
  std::string epoch_suffix_;
  // Since the last optimizer step (metrics) and the last TensorBoard write.
  Clock::time_point wait_start_, step_start_, window_start_;
  double step_wait_ = 0, step_loss_sum_ = 0, window_wait_ = 0, window_loss_sum_ = 0;
  double step_comm_base_ = 0, window_comm_base_ = 0;
  int64_t step_samples_ = 0, step_batches_ = 0, window_samples_ = 0, window_batches_ = 0;
};

}  // namespace dtrain::detail
