// TensorBoard's event files. Field numbers are those of TensorFlow's
// event.proto, summary.proto, tensor.proto and tensor_shape.proto.
#include "dtrain/summary.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <ATen/ATen.h>

#include "common/fd.h"
#include "common/strings.h"
#include "dtrain/errors.h"
#include "observe/proto.h"
#include "observe/tfrecord.h"

namespace dtrain {
namespace {

// Event
constexpr int kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
// Summary / Summary.Value
constexpr int kSummaryValue = 1;
constexpr int kValueTag = 1, kValueSimple = 2, kValueHisto = 5, kValueTensor = 8,
              kValueMetadata = 9;
// HistogramProto
constexpr int kHistoMin = 1, kHistoMax = 2, kHistoNum = 3, kHistoSum = 4, kHistoSumSquares = 5,
              kHistoBucketLimit = 6, kHistoBucket = 7;
// SummaryMetadata / PluginData
constexpr int kMetadataPluginData = 1, kPluginName = 1;
// TensorProto / TensorShapeProto / Dim
constexpr int kTensorDtype = 1, kTensorShape = 2, kTensorStringVal = 8;
constexpr int kShapeDim = 2, kDimSize = 1;
constexpr uint64_t kDtString = 7;

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

// TensorFlow's histogram.cc InitDefaultBuckets.
const std::vector<double>& default_buckets() {
  static const std::vector<double> limits = [] {
    std::vector<double> pos;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) pos.push_back(v);
    pos.push_back(DBL_MAX);
    std::vector<double> all;
    for (auto it = pos.rbegin(); it != pos.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), pos.begin(), pos.end());
    return all;
  }();
  return limits;
}

}  // namespace

Histogram make_histogram(const std::vector<double>& values) {
  const std::vector<double>& limits = default_buckets();
  std::vector<double> counts(limits.size(), 0.0);
  Histogram h;
  h.min = DBL_MAX;
  h.max = -DBL_MAX;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    // As TensorFlow's Histogram::Add: bucket i holds limits[i-1] <= v < limits[i].
    size_t i = std::upper_bound(limits.begin(), limits.end(), v) - limits.begin();
    if (i >= limits.size()) i = limits.size() - 1;
    counts[i] += 1;
    h.min = std::min(h.min, v);
    h.max = std::max(h.max, v);
    h.num += 1;
    h.sum += v;
    h.sum_squares += v * v;
  }
  if (h.num == 0) {
    h.min = h.max = 0;
    return h;
  }
  size_t first = 0, last = counts.size() - 1;
  while (counts[first] == 0) ++first;
  while (counts[last] == 0) --last;
  h.bucket_limit.assign(limits.begin() + first, limits.begin() + last + 1);
  h.bucket.assign(counts.begin() + first, counts.begin() + last + 1);
  return h;
}

SummaryWriter::SummaryWriter(const std::string& dir, SummaryWriterOptions options)
    : options_(std::move(options)), fd_(std::make_unique<detail::Fd>()) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    throw InvalidArgument(cat("TensorBoard directory '", dir, "' cannot be created (",
                              ec ? ec.message() : "a file of that name is in the way",
                              "); pass a writable directory"));
  }
  const long long now = static_cast<long long>(wall_time());
  // Note [Event file names]: TensorFlow appends a process-wide counter; a
  // file that already exists (two writers in one second) takes the next n.
  for (int n = 0; !fd_->valid(); ++n) {
    char stamp[32];
    std::snprintf(stamp, sizeof stamp, "%010lld", now);
    path_ = cat((std::filesystem::path(dir) / "events.out.tfevents.").string(), stamp, ".",
                host_name(), ".", ::getpid(), ".", n, options_.filename_suffix);
    fd_->reset(::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd_->valid() && (errno != EEXIST || n > 1000)) {
      throw InvalidArgument(cat("TensorBoard event file '", path_, "' cannot be created (",
                                std::strerror(errno), "); pass a writable directory"));
    }
  }
  detail::ProtoWriter event;
  event.double_field(kEventWallTime, wall_time());
  event.string_field(kEventFileVersion, "brain.Event:2");
  std::lock_guard<std::mutex> lock(mu_);
  detail::append_tfrecord(buffer_, event.bytes());
  write_locked();
}

SummaryWriter::~SummaryWriter() {
  try {
    flush();
  } catch (const std::exception&) {
    // Destructors do not throw; flush() reports the same failure.
  }
}

void SummaryWriter::append_event(const std::string& summary, int64_t step) {
  detail::ProtoWriter event;
  event.double_field(kEventWallTime, wall_time());
  event.varint_field(kEventStep, static_cast<uint64_t>(step));
  event.bytes_field(kEventSummary, summary);
  std::lock_guard<std::mutex> lock(mu_);
  detail::append_tfrecord(buffer_, event.bytes());
  const double since =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - last_write_).count();
  if (buffer_.size() >= options_.max_buffered_bytes || since >= options_.flush_seconds)
    write_locked();
}

void SummaryWriter::write_locked() {
  last_write_ = std::chrono::steady_clock::now();
  if (buffer_.empty()) return;
  if (!detail::write_all(fd_->get(), buffer_)) {
    throw Error(cat("TensorBoard event file '", path_, "': write failed (", std::strerror(errno),
                    "); check the disk"));
  }
  buffer_.clear();
}

void SummaryWriter::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  write_locked();
}

void SummaryWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  detail::ProtoWriter v;
  v.string_field(kValueTag, tag);
  v.float_field(kValueSimple, static_cast<float>(value));
  detail::ProtoWriter summary;
  summary.message_field(kSummaryValue, v);
  append_event(summary.bytes(), step);
}

void SummaryWriter::add_histogram(const std::string& tag, const std::vector<double>& values,
                                  int64_t step) {
  const Histogram h = make_histogram(values);
  detail::ProtoWriter histo;
  histo.double_field(kHistoMin, h.min);
  histo.double_field(kHistoMax, h.max);
  histo.double_field(kHistoNum, h.num);
  histo.double_field(kHistoSum, h.sum);
  histo.double_field(kHistoSumSquares, h.sum_squares);
  histo.packed_doubles(kHistoBucketLimit, h.bucket_limit);
  histo.packed_doubles(kHistoBucket, h.bucket);
  detail::ProtoWriter v;
  v.string_field(kValueTag, tag);
  v.message_field(kValueHisto, histo);
  detail::ProtoWriter summary;
  summary.message_field(kSummaryValue, v);
  append_event(summary.bytes(), step);
}

void SummaryWriter::add_histogram(const std::string& tag, const at::Tensor& values, int64_t step) {
  at::Tensor flat = values.detach().to(at::kCPU, at::kDouble).contiguous().reshape({-1});
  const double* p = flat.data_ptr<double>();
  add_histogram(tag, std::vector<double>(p, p + flat.numel()), step);
}

void SummaryWriter::add_text(const std::string& tag, const std::string& text, int64_t step) {
  detail::ProtoWriter plugin;
  plugin.string_field(kPluginName, "text");
  detail::ProtoWriter metadata;
  metadata.message_field(kMetadataPluginData, plugin);
  detail::ProtoWriter dim;
  dim.varint_field(kDimSize, 1);
  detail::ProtoWriter shape;
  shape.message_field(kShapeDim, dim);
  detail::ProtoWriter tensor;
  tensor.varint_field(kTensorDtype, kDtString);
  tensor.message_field(kTensorShape, shape);
  tensor.bytes_field(kTensorStringVal, text);
  detail::ProtoWriter v;
  v.string_field(kValueTag, tag);
  // Ascending field order, as protobuf's own serialiser writes them.
  v.message_field(kValueTensor, tensor);
  v.message_field(kValueMetadata, metadata);
  detail::ProtoWriter summary;
  summary.message_field(kSummaryValue, v);
  append_event(summary.bytes(), step);
}

}  // namespace dtrain
