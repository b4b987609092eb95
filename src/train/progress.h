#pragma once
// Progress within an epoch (TrainOptions::progress): a line every N steps or
// T seconds, or one line redrawn in place on a terminal. Not thread-safe; the
// training thread of rank 0 owns it.

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

#include "dtrain/train.h"

namespace dtrain::detail {

class ProgressLine {
 public:
  /// Writes nothing when `log` is null or the style is kNone.
  ProgressLine(std::ostream* log, TrainOptions::Progress style, int64_t every_steps,
               double every_seconds);

  /// Starts epoch `epoch` (1-based) of `epochs`, `steps` batches long, at
  /// batch `first` (a resumed epoch).
  void start(int64_t epoch, int64_t epochs, int64_t steps, int64_t first);
  /// After batch `position` (1-based within the epoch) of `samples` images
  /// on this rank; `world_size` scales the rate to the group's;
  /// `mean_loss` is this rank's mean loss so far in the epoch.
  void update(int64_t position, int64_t samples, int world_size, double mean_loss);
  /// Erases an in-place line before the epoch line is printed.
  void finish();

  /// The text of one progress line (without "\r" or newline).
  static std::string format(int64_t epoch, int64_t epochs, int64_t step, int64_t steps,
                            double images_per_sec, double loss, double eta_seconds);

 private:
  using Clock = std::chrono::steady_clock;
  std::ostream* log_;
  TrainOptions::Progress style_;
  int64_t every_steps_;
  double every_seconds_;
  int64_t epoch_ = 0, epochs_ = 0, steps_ = 0, first_ = 0, last_step_ = 0;
  Clock::time_point start_, last_print_;
  bool drawn_ = false;
};

}  // namespace dtrain::detail
