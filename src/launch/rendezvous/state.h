#pragma once
// Internals of the rendezvous protocol (see Note [Rendezvous protocol] in
// protocol.cpp): the key layout, the text encodings of the round state and
// of a node's record, and small helpers (polling backoff, the heartbeat
// thread). Nothing here blocks without a deadline.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launch/rendezvous/rendezvous.h"

namespace dtrain::detail {

using RdzvClock = std::chrono::steady_clock;

/// Every key of one run, under "dtrain/rdzv/<run_id>/". Round keys carry the
/// round number, so a new round never sees an old round's counters.
class RendezvousKeys {
 public:
  explicit RendezvousKeys(const std::string& run_id) : prefix_("dtrain/rdzv/" + run_id + "/") {}

  /// The CAS-protected round state (RoundState::encode()).
  std::string state() const { return prefix_ + "state"; }
  /// A node's liveness record (RendezvousBackend::heartbeat).
  std::string heartbeat(const std::string& node_id) const { return prefix_ + "hb/" + node_id; }
  /// add() counter handing out arrival slots 1, 2, ... of an open round.
  std::string arrived(int round) const { return round_key(round, "arrived"); }
  /// The NodeRecord of the node holding `slot`.
  std::string slot(int round, int64_t slot) const {
    return round_key(round, "slot/" + std::to_string(slot));
  }
  /// CAS-protected comma list of slots dropped from an open round.
  std::string dropped(int round) const { return round_key(round, "dropped"); }
  /// The participant table written by the completer holding `slot`.
  std::string table(int round, int64_t slot) const {
    return round_key(round, "table/" + std::to_string(slot));
  }
  /// "addr:port" of the store node rank 0 hosts for the round's workers.
  std::string master(int round) const { return round_key(round, "master"); }
  /// The prefix of the round's workers' keys when they share this store
  /// (RendezvousConfig::workers_share_store).
  std::string workers(int round) const { return round_key(round, "workers"); }
  /// add() counter of participants that left a complete round, and the
  /// exactly-once guard of each one (CAS absent -> marker's node id).
  std::string left(int round) const { return round_key(round, "left"); }
  std::string left(int round, int64_t slot) const {
    return round_key(round, "left/" + std::to_string(slot));
  }
  /// add() counter of nodes waiting for the round after `round`, and each
  /// waiter's node id ("-" once it withdrew).
  std::string waiting(int round) const { return round_key(round, "waiting"); }
  std::string waiter(int round, int64_t n) const {
    return round_key(round, "waiter/" + std::to_string(n));
  }
  /// Live recovery (RendezvousConfig::join_running_round): add() counter of
  /// nodes that arrived while `round` ran, and each one's entry: "w <id>"
  /// while it waits for room (fewer than max_nodes alive), "a <id>" once
  /// admitted into the running round, "-" once it withdrew.
  std::string late(int round) const { return round_key(round, "late"); }
  std::string late(int round, int64_t n) const {
    return round_key(round, "late/" + std::to_string(n));
  }
  /// Set once a participant of `round` was found dead (value: its node id).
  std::string lost(int round) const { return round_key(round, "lost"); }
  /// The first failure recorded in `round` (CAS absent -> text).
  std::string failure(int round) const { return round_key(round, "failure"); }
  /// add() counter of participants whose workers all succeeded (exit barrier).
  std::string done(int round) const { return round_key(round, "done"); }
  /// Set by a participant whose workers all succeeded: it may leave, and
  /// must not be taken for lost by the ring check.
  std::string done(int round, const std::string& node_id) const {
    return round_key(round, "done/" + node_id);
  }

 private:
  std::string round_key(int round, const std::string& name) const {
    return prefix_ + "r" + std::to_string(round) + "/" + name;
  }
  std::string prefix_;
};

/// The small value under RendezvousKeys::state(): "<round> open",
/// "<round> complete <participants> <table slot>" or "<round> closed".
/// An absent key reads as round 0, open.
struct RoundState {
  enum class Status { kOpen, kComplete, kClosed };
  int round = 0;
  Status status = Status::kOpen;
  /// kComplete: how many nodes took part and which slot's table lists them.
  int participants = 0;
  int64_t table_slot = 0;

  std::string encode() const;
  /// Throws StoreError naming `where` when the text is not a state.
  static RoundState decode(const std::string& text, const std::string& where);
};

/// What one node tells the others: written at its arrival slot and copied
/// into the round's table. Fields are tab-separated, so ids and addresses
/// must not contain tabs or newlines (checked at construction time).
struct NodeRecord {
  std::string node_id;
  std::string addr;
  int local_world_size = 1;
  /// "static" only: the rank from the node's config; -1 for dynamic.
  int fixed_rank = -1;
  /// RendezvousConfig::settings (a record of four fields has none).
  std::string settings;
  /// The arrival slot in the round (not encoded in the slot key's value).
  int64_t slot = 0;

  std::string encode() const;
  static NodeRecord decode(const std::string& text, const std::string& where);
};

/// The participant table: one record (with its slot) per line, in node-rank
/// order.
std::string encode_table(const std::vector<NodeRecord>& nodes);
std::vector<NodeRecord> decode_table(const std::string& text, const std::string& where);

/// "1,5,9" <-> {1, 5, 9}.
std::string encode_slots(const std::vector<int64_t>& slots);
std::vector<int64_t> decode_slots(const std::string& text, const std::string& where);

/// Sleeps between polls: 10 ms, growing by half each time up to 200 ms, never
/// past `deadline`. reset() after progress so the next wait is short again.
class PollBackoff {
 public:
  explicit PollBackoff(std::chrono::milliseconds first = std::chrono::milliseconds(10),
                       std::chrono::milliseconds max = std::chrono::milliseconds(200))
      : first_(first), max_(max), next_(first) {}
  void sleep(RdzvClock::time_point deadline);
  void reset() { next_ = first_; }

 private:
  std::chrono::milliseconds first_, max_, next_;
};

/// Calls `beat` now and then every `interval` on its own thread until
/// stop() or destruction. Exceptions from `beat` are swallowed (a store that
/// went away fails the agent's next blocking call, which reports it); the
/// last message is kept for diagnostics.
class HeartbeatThread {
 public:
  HeartbeatThread(std::chrono::milliseconds interval, std::function<void()> beat);
  ~HeartbeatThread() { stop(); }
  HeartbeatThread(const HeartbeatThread&) = delete;
  HeartbeatThread& operator=(const HeartbeatThread&) = delete;
  void stop();
  std::string last_error() const;

 private:
  void run();
  std::chrono::milliseconds interval_;
  std::function<void()> beat_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string last_error_;
  std::thread thread_;
};

}  // namespace dtrain::detail
