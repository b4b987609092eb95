#pragma once
// train_live()'s loop (dtrain/train.h; Note [Live training] in
// live_trainer.cpp): dtrain train's model, data, optimizer, schedule, loss
// scaler and observers, driven by a dtrain::LiveGroup instead of one fixed
// process group. One LiveTrainer per train_live() call; not thread-safe.

#include <memory>
#include <ostream>
#include <vector>

#include <torch/optim/optimizer.h>

#include "dtrain/amp.h"
#include "dtrain/live.h"
#include "dtrain/models.h"
#include "dtrain/train.h"
#include "train/observers.h"
#include "train/training_state.h"

namespace dtrain::detail {

class LiveTrainer {
 public:
  LiveTrainer(const TrainOptions& options, LiveOptions live, std::ostream* log);
  ~LiveTrainer();
  std::vector<EpochMetrics> run();

 private:
  void setup();
  Loader& loader_of(int logical_rank, int64_t epoch, int64_t batch);
  bool train_step(const LiveStep& s, int64_t epoch, int64_t batch, double* loss_sum,
                  double* samples);
  void optimizer_step(int64_t step);
  void drain_events(const LiveStep& s);
  EpochMetrics end_epoch(int64_t epoch, double loss_sum, double samples, double seconds,
                         const LiveStep& s);
  std::string save_position() const;
  void load_position(const std::string& bytes);

  const TrainOptions& o_;
  LiveOptions live_options_;
  std::ostream* log_;
  std::unique_ptr<LiveGroup> live_;
  std::vector<RecoveryEvent> pending_events_;
  int64_t steps_per_epoch_ = 0;
  LrSchedule schedule_;
  /// Logical rank r's training loader (DistributedSampler rank r of W0),
  /// opened when this member first runs r; where it stands.
  std::vector<DatasetSplits> data_;
  std::vector<std::pair<int64_t, int64_t>> at_;  // (epoch, next batch) per logical rank
  DatasetSplits shapes_;                         // logical rank 0's: model shape, test split
  TrainingState state_;  // device, model, optimizer, scaler (training_state.h)
  std::unique_ptr<TrainObservers> obs_;
  double lr_ = 0;
};

}  // namespace dtrain::detail
