#pragma once
// train()'s loop as named steps (dtrain/train.h documents the behaviour):
//   setup()      checkpoint lookup (rank 0), metrics file, data, model,
//                optimizer, schedule, loss scaler, the checkpoint shared by
//                rank 0
//   resume()     model, optimizer, scaler, generator and position from it
//   wrap()       DistributedDataParallel around the (restored) model, its
//                buckets through a kvstore with --kvstore (kv_sync.h)
//   run_epoch()  one epoch's training steps, mid-epoch checkpoints
//   evaluate()   the test split, reduced across ranks, into the epoch's metrics
//   report()     epoch line, metrics file
//   checkpoint() rank 0 writes one
// TensorBoard, timeline and metrics are TrainObservers' (observers.h): the
// steps only mark its points. Data options, model, optimizer, loss scaler, a
// micro-batch's forward and backward and the evaluation are shared with the
// live trainer (training_state.h, Note [Two drivers, one step]).
// One Trainer per train() call; not thread-safe.

#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <vector>

#include <torch/optim/optimizer.h>

#include "dtrain/amp.h"
#include "dtrain/checkpoint.h"
#include "dtrain/ddp.h"
#include "dtrain/models.h"
#include "dtrain/train.h"
#include "train/kv_sync.h"
#include "train/observers.h"
#include "train/progress.h"
#include "train/training_state.h"

namespace dtrain::detail {

class Trainer {
 public:
  /// `log`: rank 0's lines go there; every rank's observers print their
  /// endpoint there (when not null).
  /// `kvstore`: the store DDP's buckets go through, required with
  /// options.kvstore (kv_sync.h), closed at the end.
  Trainer(const TrainOptions& options, const ProcessGroup& pg, std::ostream* log,
          std::shared_ptr<KVStore> kvstore = nullptr);
  std::vector<EpochMetrics> run();

 private:
  struct EpochTotals {
    double loss_sum = 0, samples = 0, seconds = 0;
    /// A step checkpoint fell on the epoch's last step: written after
    /// evaluation, with the epoch's end position.
    bool save_after_evaluation = false;
  };
  void setup();
  void resume();
  void check_data() const;  // Note [Refusing changed data]
  void wrap();
  EpochTotals run_epoch(int64_t epoch);
  void resume_epoch(Loader& loader) const;  // Note [Resuming mid-epoch]
  at::Tensor forward_backward(const Batch& batch, bool sync_step);
  void optimizer_step();
  EpochMetrics evaluate(int64_t epoch, const EpochTotals& totals);
  void report(const EpochMetrics& m);
  void checkpoint(int64_t epoch, int64_t samples_in_epoch);
  /// Note [Comm hook state]: every rank's share of the hook's state, on rank
  /// 0 (collective; empty for a stateless hook).
  NamedTensors gather_hook_state() const;
  void restore_hook_state(CommHook& hook) const;
  void log_start() const;

  const TrainOptions& o_;
  const ProcessGroup& pg_;
  std::ostream* log_;       // rank 0's with options.log_run, else null
  std::ostream* rank_log_;  // this rank's, may be null
  bool leader_;
  // Resolved in setup().
  int64_t every_steps_ = 0, every_epochs_ = 0, steps_per_epoch_ = 0;
  std::optional<LoadedCheckpoint> found_;  // rank 0's pick
  std::optional<Checkpoint> resume_;       // what every rank restores
  std::string origin_;
  std::ofstream metrics_;
  DatasetSplits splits_;
  DataFingerprint data_fingerprint_;  // the training split's, when checkpointing
  TrainingState state_;               // device, model, optimizer, scaler (training_state.h)
  LrSchedule schedule_;
  std::unique_ptr<DistributedDataParallel<ImageClassifier>> ddp_;
  std::shared_ptr<KVStore> kvstore_;  // as given, until wrap() hands it to kv_
  std::unique_ptr<KvSync> kv_;        // with options.kvstore (kv_sync.h)
  ProgressLine progress_;
  std::unique_ptr<TrainObservers> obs_;  // from setup()
  // Position.
  int64_t first_epoch_ = 0, global_step_ = 0;
  int64_t resume_sample_ = 0;  // the checkpoint's cursor into first_epoch_ (Note [Sample cursor])
  double lr_ = 0;              // of the last step taken
};

}  // namespace dtrain::detail
