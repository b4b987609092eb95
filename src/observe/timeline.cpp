// Chrome Trace Event Format writer. See dtrain/timeline.h.
#include "dtrain/timeline.h"

#include <fcntl.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "common/fd.h"
#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain {
namespace {

constexpr size_t kWriteThreshold = 64 * 1024;

// A JSON string literal (names are ours, but a user's tag may hold quotes).
std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

Timeline::Timeline(const std::string& path, TimelineOptions options)
    : options_(std::move(options)), path_(path), fd_(std::make_unique<detail::Fd>()) {
  fd_->reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd_->valid()) {
    throw InvalidArgument(cat("timeline file '", path, "' cannot be created (",
                              std::strerror(errno), "); pass a path in a writable directory"));
  }
  // Note [Timeline clock]: events are stamped with the steady clock (the
  // reducer's clock) and written as wall-clock microseconds, anchored once
  // here, so the files of several ranks on one node share a time axis.
  steady_origin_ = Clock::now();
  wall_origin_us_ =
      std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const std::string name =
      options_.process_name.empty() ? cat("rank ", options_.rank) : options_.process_name;
  std::lock_guard<std::mutex> lock(mu_);
  buffer_ = "[\n";
  append_locked(cat("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":", options_.rank,
                    ",\"tid\":0,\"args\":{\"name\":", quoted(name), "}}"));
  append_locked(cat("{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":", options_.rank,
                    ",\"tid\":0,\"args\":{\"sort_index\":", options_.rank, "}}"));
  name_track_locked(kTrainTrack, "train");
  write_locked();
}

Timeline::~Timeline() {
  try {
    close();
  } catch (const std::exception&) {
    // Destructors do not throw; close() reports the same failure.
  }
}

double Timeline::micros(Clock::time_point t) const {
  return wall_origin_us_ + std::chrono::duration<double, std::micro>(t - steady_origin_).count();
}

void Timeline::append_locked(const std::string& event) {
  if (closed_) return;
  if (!first_) buffer_ += ",\n";
  first_ = false;
  buffer_ += event;
  if (buffer_.size() >= kWriteThreshold) write_locked();
}

void Timeline::name_track_locked(int track, const std::string& name) {
  if (track < 0) return;
  if (static_cast<size_t>(track) >= named_tracks_.size()) named_tracks_.resize(track + 1, false);
  if (named_tracks_[track]) return;
  named_tracks_[track] = true;
  append_locked(cat("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":", options_.rank,
                    ",\"tid\":", track, ",\"args\":{\"name\":", quoted(name), "}}"));
  append_locked(cat("{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":", options_.rank,
                    ",\"tid\":", track, ",\"args\":{\"sort_index\":", track, "}}"));
}

void Timeline::complete(std::string_view name, std::string_view category, Clock::time_point start,
                        Clock::time_point end, int track, std::string_view args_json) {
  char times[96];
  const double ts = micros(start);
  const double dur = std::max(0.0, micros(end) - ts);
  std::snprintf(times, sizeof times, "\"ts\":%.3f,\"dur\":%.3f", ts, dur);
  std::string event = cat("{\"name\":", quoted(name), ",\"cat\":", quoted(category),
                          ",\"ph\":\"X\",", times, ",\"pid\":", options_.rank, ",\"tid\":", track);
  if (!args_json.empty()) event += cat(",\"args\":", args_json);
  event += "}";
  std::lock_guard<std::mutex> lock(mu_);
  append_locked(event);
}

void Timeline::begin(std::string_view name, std::string_view category, int track) {
  char ts[48];
  std::snprintf(ts, sizeof ts, "\"ts\":%.3f", micros(Clock::now()));
  std::string event =
      cat("{\"name\":", quoted(name), ",\"cat\":", quoted(category), ",\"ph\":\"B\",", ts,
          ",\"pid\":", options_.rank, ",\"tid\":", track, "}");
  std::lock_guard<std::mutex> lock(mu_);
  append_locked(event);
}

void Timeline::end(std::string_view name, std::string_view category, int track) {
  char ts[48];
  std::snprintf(ts, sizeof ts, "\"ts\":%.3f", micros(Clock::now()));
  std::string event =
      cat("{\"name\":", quoted(name), ",\"cat\":", quoted(category), ",\"ph\":\"E\",", ts,
          ",\"pid\":", options_.rank, ",\"tid\":", track, "}");
  std::lock_guard<std::mutex> lock(mu_);
  append_locked(event);
}

void Timeline::bucket(int index, int64_t bytes, Clock::time_point launched,
                      Clock::time_point completed, const std::string& operation) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    name_track_locked(kBucketTrack + index, cat("bucket ", index));
  }
  complete(cat(operation, " bucket ", index), "comm", launched, completed, kBucketTrack + index,
           cat("{\"bucket\":", index, ",\"bytes\":", bytes, "}"));
}

std::string timeline_path_for_rank(const std::string& pattern, int rank, int world_size) {
  const size_t at = pattern.find("{rank}");
  if (at != std::string::npos)
    return pattern.substr(0, at) + std::to_string(rank) + pattern.substr(at + 6);
  if (world_size <= 1) return pattern;
  const size_t slash = pattern.rfind('/');
  const size_t dot = pattern.rfind('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  const std::string tag = ".rank" + std::to_string(rank);
  return has_ext ? pattern.substr(0, dot) + tag + pattern.substr(dot) : pattern + tag;
}

void Timeline::write_locked() {
  if (buffer_.empty()) return;
  if (!detail::write_all(fd_->get(), buffer_)) {
    throw Error(cat("timeline file '", path_, "': write failed (", std::strerror(errno),
                    "); check the disk"));
  }
  buffer_.clear();
}

void Timeline::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  write_locked();
}

void Timeline::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  buffer_ += "\n]\n";
  closed_ = true;
  write_locked();
  if (fd_->close() != 0) {
    throw Error(cat("timeline file '", path_, "': close failed (", std::strerror(errno), ")"));
  }
}

}  // namespace dtrain
