// Note [Heartbeats]
// Each member's detector thread bumps <prefix>/hb/<member> every interval on
// a store connection of its own (the training thread's connection may be
// inside a long blocking call) and reads the counters of the members it
// watches. A counter that did not move for failure_timeout, measured on
// this member's steady clock (no clock agreement between hosts is needed),
// declares the member dead: that covers SIGKILL, SIGSTOP and a cut link
// alike. Two faster paths: a member whose <prefix>/dead/<member> key exists
// was declared dead by someone else (another watcher, the leader of a
// generation, or a launcher's agent that reaped the process); a member on
// this host whose process is gone (kill(pid, 0) fails with ESRCH) is dead at
// once (cause "peer lost"), and so is a member that left (its LiveGroup was
// destroyed: the process is ending; when that is the normal end of
// training nobody waits for it any more). The detector also fences its own member: a store
// that did not answer for failure_timeout, or its own dead key (it was
// declared dead while stopped, e.g. SIGSTOP then SIGCONT).
//
// A slow but alive member is declared dead only when its detector thread
// does not run for failure_timeout (10 missed beats at the defaults): a
// busy training thread does not delay it. Nor is a member blamed for the
// watcher's own stall: when the watcher's thread wakes for a tick more than
// an interval later than it was due (it was starved on a loaded machine),
// the lateness beyond that interval is added to every watched member's
// last-change time, so a counter is stale only for failure_timeout of the
// watcher's running time. Time spent in the watcher's own store calls is
// not credited: a slow store does not slow detection down. Members that all stall together (an
// overloaded host) are therefore not declared dead by the first watcher that runs again.
#include "live/detector.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "common/net.h"
#include "common/strings.h"

namespace dtrain::live {

Detector::Detector(StorePtr store, Keys keys, std::string me, std::chrono::milliseconds interval,
                   std::chrono::milliseconds failure_timeout)
    : store_(std::move(store)),
      keys_(std::move(keys)),
      me_(std::move(me)),
      my_host_(detail::host_name()),
      interval_(interval),
      failure_timeout_(failure_timeout),
      last_store_ok_(std::chrono::steady_clock::now()) {
  store_->set(keys_.process(me_), bytes_of(cat(my_host_, " ", ::getpid())));
  store_->add(keys_.heartbeat(me_), 1);
  thread_ = std::thread([this] { run(); });
}

Detector::~Detector() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Detector::watch(const std::vector<std::string>& members) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, Watched> next;
  const auto now = std::chrono::steady_clock::now();
  for (const std::string& m : members) {
    if (m == me_) continue;
    auto it = watched_.find(m);
    if (it != watched_.end()) {
      next[m] = it->second;
    } else {
      next[m].changed = now;
    }
  }
  watched_ = std::move(next);
}

void Detector::watch_also(const std::string& member) {
  std::lock_guard<std::mutex> lock(mu_);
  if (member == me_ || watched_.count(member)) return;
  watched_[member].changed = std::chrono::steady_clock::now();
}

std::map<std::string, Death> Detector::deaths() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deaths_;
}

bool Detector::any_dead(const std::vector<std::string>& members) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& m : members) {
    if (deaths_.count(m)) return true;
  }
  return false;
}

std::string Detector::fence_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fence_reason_;
}

void Detector::declare_dead(const std::string& member, DetectionCause cause) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (deaths_.count(member)) return;
    deaths_[member] = {cause, std::chrono::steady_clock::now()};
  }
  try {
    store_->set(keys_.dead(member), bytes_of(to_string(cause)));
  } catch (const std::exception&) {
    // The store is gone: this member fences itself soon anyway.
  }
}

void Detector::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    tick();
    lock.lock();
    due_ = std::chrono::steady_clock::now() + interval_;
    cv_.wait_for(lock, interval_, [this] { return stop_; });
  }
}

void Detector::tick() {
  const auto now = std::chrono::steady_clock::now();
  std::map<std::string, Watched> watched;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (due_) {
      const auto excess = (now - *due_) - interval_;
      if (excess > std::chrono::steady_clock::duration::zero()) {
        for (auto& [member, w] : watched_) w.changed += excess;
      }
    }
    watched = watched_;
  }
  try {
    store_->add(keys_.heartbeat(me_), 1);
    if (store_->check({keys_.dead(me_)})) {
      const std::vector<uint8_t> v = store_->get(keys_.dead(me_));
      const std::string cause(v.begin(), v.end());
      std::lock_guard<std::mutex> lock(mu_);
      if (fence_reason_.empty()) {
        fence_reason_ = cat("the other members declared it dead (", cause,
                            "); it was stopped or cut off and the group went on without it");
      }
    }
    for (auto& [member, w] : watched) {
      const int64_t counter = store_->add(keys_.heartbeat(member), 0);
      const bool reported = store_->check({keys_.dead(member)});
      DetectionCause reported_cause = DetectionCause::kPeerLost;
      if (reported) {
        const std::vector<uint8_t> v = store_->get(keys_.dead(member));
        reported_cause = detection_cause_from_string(std::string(v.begin(), v.end()));
      }
      const bool left = store_->check({keys_.left(member)});
      if (!w.pid_read) {
        w.pid_read = true;
        if (store_->check({keys_.process(member)})) {
          auto v = store_->get(keys_.process(member));
          auto parts = split(std::string(v.begin(), v.end()), ' ');
          long long pid = 0;
          if (parts.size() == 2 && parts[0] == my_host_ && parse_int(parts[1], &pid)) {
            w.pid = static_cast<int>(pid);
          }
        }
      }
      const bool gone = w.pid > 0 && ::kill(w.pid, 0) != 0 && errno == ESRCH;
      observe(member, counter, reported, reported_cause, gone || left, now);
    }
    std::lock_guard<std::mutex> lock(mu_);
    last_store_ok_ = std::chrono::steady_clock::now();
    for (auto& [member, w] : watched) {
      auto it = watched_.find(member);
      if (it != watched_.end()) it->second.pid_read = w.pid_read, it->second.pid = w.pid;
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (now - last_store_ok_ >= failure_timeout_ && fence_reason_.empty()) {
      fence_reason_ = cat("it could not reach the store for ",
                          std::chrono::duration<double>(now - last_store_ok_).count(),
                          " s (last error: ", first_line(e.what()), ")");
    }
  }
}

void Detector::observe(const std::string& member, int64_t counter, bool reported_dead,
                       DetectionCause reported_cause, bool process_gone,
                       std::chrono::steady_clock::time_point now) {
  DetectionCause cause;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (deaths_.count(member)) return;
    auto it = watched_.find(member);
    if (it == watched_.end()) return;  // no longer watched
    Watched& w = it->second;
    if (counter != w.counter) {
      w.counter = counter;
      w.changed = now;
    }
    if (reported_dead) {
      deaths_[member] = {reported_cause, now};
      return;  // already in the store
    }
    if (process_gone) {
      cause = DetectionCause::kPeerLost;
    } else if (now - w.changed >= failure_timeout_) {
      cause = DetectionCause::kMissedHeartbeats;
    } else {
      return;
    }
  }
  declare_dead(member, cause);
}

}  // namespace dtrain::live
