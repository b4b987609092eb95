#pragma once
// TensorBoard event files written by dtrain's own encoder (no TensorFlow, no
// protobuf library): TFRecord framing with masked CRC-32C around Event
// messages, files named events.out.tfevents.<10-digit time>.<host>.<pid>.<n>,
// so TensorBoard, `wandb sync DIR` and any TFRecord reader open them. See
// docs/observability.md.
//
// On rank 0 only, as PyTorch's SummaryWriter is used:
/// Example:
/// ```
/// void log_step(torch::nn::Linear& fc, double loss, int64_t step, int64_t epoch) {
///   dtrain::SummaryWriter tb("runs/resnet18");
///   tb.add_text("config", "batch 64, lr 0.1", 0);
///   tb.add_scalar("train/loss", loss, step);
///   tb.add_histogram("weights/fc", fc->weight, epoch);
///   tb.flush();  // also done by the destructor
/// }
/// ```
//
// Thread safety: every member may be called from any thread; calls are
// serialised by an internal mutex. Blocking: add_* only append to a memory
// buffer, except when it has grown past options.max_buffered_bytes or
// options.flush_seconds have passed since the last write, when they write
// the file as flush() does.

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dtrain/options.h"

namespace dtrain {

namespace detail {
class Fd;
}

struct SummaryWriterOptions {
  /// Appended to the file name (PyTorch's filename_suffix), e.g. ".rank0".
  std::string filename_suffix;
  /// Buffered bytes that trigger a write to the file.
  size_t max_buffered_bytes = size_t{1} << 20;
  /// Seconds after which the next add_* writes the buffer out (TensorBoard
  /// reads files while they grow). PyTorch's default is 120.
  double flush_seconds = 10.0;

  DTRAIN_SETTER(SummaryWriterOptions, filename_suffix)
  DTRAIN_SETTER(SummaryWriterOptions, max_buffered_bytes)
  DTRAIN_SETTER(SummaryWriterOptions, flush_seconds)
};

/// Histogram statistics in TensorBoard's HistogramProto layout: bucket i
/// counts the values v with bucket_limit[i-1] <= v < bucket_limit[i] (the
/// first bucket has no lower edge), as TensorFlow's Histogram::Add does.
struct Histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit;
  std::vector<double> bucket;
};

/// TensorFlow's default histogram buckets (±1e-12 x 1.1^k up to 1e20, and 0),
/// as TensorBoard and PyTorch's SummaryWriter use them. Empty buckets before
/// the first and after the last value are dropped; num == values.size(). NaN
/// and infinite values are skipped (counted nowhere).
Histogram make_histogram(const std::vector<double>& values);

/// Writes one TensorBoard event file in `dir`.
///
/// Preconditions: `dir` can be created and written; steps of one tag
/// increase (TensorBoard plots them in step order).
class SummaryWriter {
 public:
  /// Creates `dir` (with parents) and a new event file in it, whose first
  /// record is the file_version "brain.Event:2" event. Throws
  /// InvalidArgument naming the directory and the reason (a file in the way,
  /// no permission) when either cannot be created — before any training.
  explicit SummaryWriter(const std::string& dir, SummaryWriterOptions options = {});
  /// Flushes; errors on this last write are swallowed (use flush() to see them).
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  /// A scalar (Summary.Value.simple_value, float32 as TensorBoard stores it).
  void add_scalar(const std::string& tag, double value, int64_t step);
  /// A histogram of every element of `values` (any dtype, any device; copied
  /// to float64 on the CPU).
  void add_histogram(const std::string& tag, const at::Tensor& values, int64_t step);
  void add_histogram(const std::string& tag, const std::vector<double>& values, int64_t step);
  /// Text for TensorBoard's Text tab (a string tensor with plugin "text";
  /// markdown is rendered).
  void add_text(const std::string& tag, const std::string& text, int64_t step);
  /// Writes the buffered events to the file. Throws Error naming the file
  /// when the write fails (full disk, removed directory).
  void flush();

  /// The event file's path.
  const std::string& path() const { return path_; }

 private:
  void append_event(const std::string& summary, int64_t step);
  void write_locked();

  SummaryWriterOptions options_;
  std::string path_;
  std::unique_ptr<detail::Fd> fd_;
  std::mutex mu_;
  std::string buffer_;
  std::chrono::steady_clock::time_point last_write_;
};

}  // namespace dtrain
