#pragma once
// The heartbeat thread of one member: beats, watches, declares deaths.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/live.h"
#include "live/keys.h"

namespace dtrain::live {

/// A member found dead by this member's detector.
struct Death {
  DetectionCause cause = DetectionCause::kMissedHeartbeats;
  std::chrono::steady_clock::time_point at;  // when this member saw it
};

/// Runs the member's heartbeat on its own store connection (Note
/// [Heartbeats] in detector.cpp). Thread-safe: the training thread sets what
/// to watch and reads what was found; the thread itself never blocks longer
/// than one store call (bounded by the connection's timeout).
class Detector {
 public:
  Detector(StorePtr store, Keys keys, std::string me, std::chrono::milliseconds interval,
           std::chrono::milliseconds failure_timeout);
  /// Stops and joins the thread (at most one store call's timeout).
  ~Detector();
  Detector(const Detector&) = delete;
  Detector& operator=(const Detector&) = delete;

  /// Members to watch from now on (others are forgotten; a member newly
  /// watched gets a full failure_timeout from now).
  void watch(const std::vector<std::string>& members);
  /// Adds `member` to the watched ones (no-op when already watched).
  void watch_also(const std::string& member);
  /// Members declared dead so far, with cause and time (never forgotten).
  std::map<std::string, Death> deaths() const;
  /// True when one of `members` is dead (cheap; for the wait interrupt).
  bool any_dead(const std::vector<std::string>& members) const;
  /// Non-empty once this member must fence itself: the store was
  /// unreachable for failure_timeout, or another member declared it dead.
  std::string fence_reason() const;
  /// Declares `member` dead (e.g. it was left out of a generation).
  void declare_dead(const std::string& member, DetectionCause cause);

 private:
  void run();
  void tick();
  void observe(const std::string& member, int64_t counter, bool reported_dead,
               DetectionCause reported_cause, bool process_gone,
               std::chrono::steady_clock::time_point now);

  StorePtr store_;
  Keys keys_;
  std::string me_;
  std::string my_host_;
  std::chrono::milliseconds interval_, failure_timeout_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  struct Watched {
    int64_t counter = -1;
    std::chrono::steady_clock::time_point changed;
    int pid = 0;  // > 0: same host, probe it
    bool pid_read = false;
  };
  std::map<std::string, Watched> watched_;
  std::map<std::string, Death> deaths_;
  std::string fence_reason_;
  std::chrono::steady_clock::time_point last_store_ok_;
  // When the next tick is due (Note [Heartbeats]: lateness is credited).
  std::optional<std::chrono::steady_clock::time_point> due_;
  std::thread thread_;
};

}  // namespace dtrain::live
