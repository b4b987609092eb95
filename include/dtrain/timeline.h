#pragma once
// A per-rank timeline in Chrome's Trace Event Format (JSON), as Horovod's
// HOROVOD_TIMELINE writes: open it in Perfetto (ui.perfetto.dev) or
// chrome://tracing. `dtrain timeline merge` joins the ranks' files into one,
// a process per rank. See docs/observability.md.
//
// In the training loop (`tl` is null when no timeline was asked for, and
// then nothing is timed and nothing allocated):
/// Example:
/// ```
/// void timed_steps(const std::string& path, int rank, dtrain::DdpOptions& ddp_options,
///                  dtrain::Loader& loader) {
///   std::unique_ptr<dtrain::Timeline> tl;
///   if (!path.empty()) {
///     tl = std::make_unique<dtrain::Timeline>(path, dtrain::TimelineOptions().set_rank(rank));
///   }
///   ddp_options.bucket_observer = dtrain::timeline_bucket_observer(tl.get());
///   dtrain::Batch batch;
///   for (bool more = true; more;) {
///     dtrain::TimelineSpan s(tl.get(), "data wait");
///     more = loader.next(batch);
///   }
/// }
/// ```
//
// Events: complete events ("ph":"X", ts/dur in microseconds of wall-clock
// time, so files of ranks on one node line up) and begin/end pairs
// ("B"/"E"); pid is the rank. Track 0 ("train") carries the training loop's
// phases; bucket i's allreduce, from launch to completion, is on track
// kBucketTrack + i ("bucket i"), since buckets overlap each other.
//
// Thread safety: every member may be called from any thread (the training
// loop, communication callbacks); events are appended under a mutex.
// Blocking: events go to a memory buffer, written out when it reaches 64 KiB,
// on flush() and on close().

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/options.h"

namespace dtrain {

struct BucketTiming;  // dtrain/ddp.h

namespace detail {
class Fd;
}

struct TimelineOptions {
  /// The rank: the trace's pid.
  int rank = 0;
  /// The process's name in the viewer; empty: "rank <rank>".
  std::string process_name;

  DTRAIN_SETTER(TimelineOptions, rank)
  DTRAIN_SETTER(TimelineOptions, process_name)
};

/// One rank's Chrome trace (see the file comment for events and threads).
///
/// Preconditions: the file's folder exists and is writable; one Timeline per
/// file (ranks write files of their own, timeline_path_for_rank()).
class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  /// Track (tid) of the training loop's phases.
  static constexpr int kTrainTrack = 0;
  /// Bucket i's allreduce (or push-pull) is on track kBucketTrack + i.
  static constexpr int kBucketTrack = 100;

  /// Creates (truncates) `path`. Throws InvalidArgument naming it when it
  /// cannot be created.
  explicit Timeline(const std::string& path, TimelineOptions options = {});
  /// close(), swallowing write errors.
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  /// A complete event from `start` to `end`. `args_json`, when not empty, is
  /// a JSON object shown with the event ("{\"bytes\": 4096}").
  void complete(std::string_view name, std::string_view category, Clock::time_point start,
                Clock::time_point end, int track = kTrainTrack, std::string_view args_json = {});
  /// Begin and end of a span on `track`; pairs must nest per track.
  void begin(std::string_view name, std::string_view category, int track = kTrainTrack);
  void end(std::string_view name, std::string_view category, int track = kTrainTrack);
  /// A bucket's reduction from launch to completion, on its own track, named
  /// "<operation> bucket <index>" ("allreduce", or "pushpull" when the
  /// bucket goes through a parameter server).
  void bucket(int index, int64_t bytes, Clock::time_point launched, Clock::time_point completed,
              const std::string& operation = "allreduce");

  /// Writes buffered events. Throws Error naming the file on failure.
  void flush();
  /// Writes the closing bracket: the file is complete JSON. Later events are
  /// dropped. Idempotent.
  void close();

  const std::string& path() const { return path_; }
  int rank() const { return options_.rank; }

 private:
  double micros(Clock::time_point t) const;
  void append_locked(const std::string& event);
  void name_track_locked(int track, const std::string& name);
  void write_locked();

  TimelineOptions options_;
  std::string path_;
  std::unique_ptr<detail::Fd> fd_;
  Clock::time_point steady_origin_;
  double wall_origin_us_ = 0;
  std::mutex mu_;
  std::string buffer_;
  bool first_ = true;
  bool closed_ = false;
  std::vector<bool> named_tracks_;
};

/// A complete event covering this object's lifetime. With a null timeline
/// it does nothing at all (no clock read): the cost of a timeline that is off.
/// Preconditions: the timeline, when not null, outlives the span.
class TimelineSpan {
 public:
  TimelineSpan(Timeline* timeline, const char* name, const char* category = "train",
               int track = Timeline::kTrainTrack)
      : timeline_(timeline), name_(name), category_(category), track_(track) {
    if (timeline_ != nullptr) start_ = Timeline::Clock::now();
  }
  ~TimelineSpan() {
    if (timeline_ != nullptr) {
      timeline_->complete(name_, category_, start_, Timeline::Clock::now(), track_);
    }
  }
  TimelineSpan(const TimelineSpan&) = delete;
  TimelineSpan& operator=(const TimelineSpan&) = delete;

 private:
  Timeline* timeline_;
  const char* name_;
  const char* category_;
  int track_;
  Timeline::Clock::time_point start_;
};

/// A DdpOptions::bucket_observer that records each bucket's `operation` in
/// `timeline` (Timeline::bucket). Null timeline: returns an empty function,
/// so the reducer calls nothing. `timeline` must outlive the DDP module.
std::function<void(const BucketTiming&)> timeline_bucket_observer(
    Timeline* timeline, const std::string& operation = "allreduce");

/// The file of `rank` for a --timeline argument: "{rank}" in `pattern` is
/// replaced by the rank; without it, a world of several ranks gets
/// ".rank<r>" before the extension ("tl.json" -> "tl.rank1.json"), and a
/// single process uses `pattern` as it is.
std::string timeline_path_for_rank(const std::string& pattern, int rank, int world_size);

/// Joins per-rank timelines into one trace at `output`: every event keeps its
/// pid (the rank), so each rank is one process in the viewer. Inputs may
/// lack the closing bracket (a rank that crashed). Throws InvalidArgument
/// naming the file when an input is missing or not a trace, or when two
/// inputs hold the same rank; Error when `output` cannot be written.
/// Returns the number of events written.
size_t merge_timelines(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace dtrain
