#include "train/progress.h"

#include <cmath>
#include <cstdio>

namespace dtrain::detail {

ProgressLine::ProgressLine(std::ostream* log, TrainOptions::Progress style, int64_t every_steps,
                           double every_seconds)
    : log_(style == TrainOptions::Progress::kNone ? nullptr : log),
      style_(style),
      every_steps_(every_steps),
      every_seconds_(every_seconds) {}

void ProgressLine::start(int64_t epoch, int64_t epochs, int64_t steps, int64_t first) {
  epoch_ = epoch;
  epochs_ = epochs;
  steps_ = steps;
  first_ = last_step_ = first;
  start_ = last_print_ = Clock::now();
  drawn_ = false;
}

std::string ProgressLine::format(int64_t epoch, int64_t epochs, int64_t step, int64_t steps,
                                 double images_per_sec, double loss, double eta_seconds) {
  const long long eta = std::llround(std::max(0.0, eta_seconds));
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "  epoch %lld/%lld step %lld/%lld  images/sec %.1f  loss %.4f  ETA %lld:%02lld",
                static_cast<long long>(epoch), static_cast<long long>(epochs),
                static_cast<long long>(step), static_cast<long long>(steps), images_per_sec, loss,
                eta / 60, eta % 60);
  return buf;
}

void ProgressLine::update(int64_t position, int64_t samples, int world_size, double mean_loss) {
  if (!log_) return;
  const auto now = Clock::now();
  const double since_print = std::chrono::duration<double>(now - last_print_).count();
  bool due;
  if (style_ == TrainOptions::Progress::kInPlace) {
    due = since_print >= 0.1 || position == steps_;
  } else {
    due = (every_steps_ > 0 && position - last_step_ >= every_steps_) ||
          (every_seconds_ > 0 && since_print >= every_seconds_);
    due = due && position < steps_;  // the epoch line follows the last step
  }
  if (!due) return;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(samples) * world_size / elapsed : 0;
  const int64_t done = position - first_;
  const double eta =
      done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(steps_ - position) : 0;
  const std::string line = format(epoch_, epochs_, position, steps_, rate, mean_loss, eta);
  if (style_ == TrainOptions::Progress::kInPlace) {
    *log_ << '\r' << line << "\x1b[K" << std::flush;
    drawn_ = true;
  } else {
    *log_ << line << std::endl;
  }
  last_print_ = now;
  last_step_ = position;
}

void ProgressLine::finish() {
  if (log_ && drawn_) *log_ << "\r\x1b[K" << std::flush;
  drawn_ = false;
}

}  // namespace dtrain::detail
