#include "launch/agent/round_decision.h"

#include <limits>
#include <string>

namespace dtrain::detail {

RoundDecision decide_round(const RoundFacts& f) {
  RoundDecision d;
  if (f.signalled) {
    d.action = RoundAction::kStop;
    return d;
  }
  const bool multi_node = f.num_nodes > 1;
  if (f.worker_failed) {
    if (f.node_lost) {
      // The workers failed because a node died: the smaller group goes on
      // without spending a restart (README, docs/architecture.md).
      d.action = RoundAction::kRestart;
      return d;
    }
    d.record_failure = true;
    if (f.restarts >= f.max_restarts) {
      d.action = RoundAction::kGiveUp;
      d.close = true;
      d.linger = true;
      return d;
    }
    d.action = RoundAction::kRestart;
    d.counts_restart = true;
    return d;
  }
  if (f.membership_changed) {
    d.action = RoundAction::kRestart;
    return d;
  }
  if (f.all_succeeded) {
    d.action = RoundAction::kFinish;
    d.exit_barrier = multi_node;
    d.linger = multi_node;
    return d;
  }
  d.action = RoundAction::kAbort;
  d.close = true;
  return d;
}

// Note [Choosing the root cause]
// The root cause is the failure that happened first. What the agent knows of
// when each happened:
// - an error record: when the worker recorded its error (its timestamp;
//   torchelastic's whole seconds made precise by read_round_records);
// - a death by a signal without a record: the worker had no chance to write
//   one, and died at or a little before the moment the agent reaped it
//   (WorkerExit::ended_at). Such a death is the cause of others' failures (a
//   crash) as often as their consequence: torch 2.x's Gloo ranks abort
//   ("terminate called without an active exception") once a failed peer tore
//   its process group down, and on a loaded machine the agent may reap that
//   abort before the failed peer, still exiting, whose record is earlier.
//   Putting the death at its reap time orders it after such a record;
// - an exit with a non-zero code and no record: no time at all; last.
// A record that says a peer failed (is_peer_failure: a lost connection, a
// collective timeout) is the consequence of another failure: it comes after
// every failure that is not one, whatever the times. A crash's peers fail
// that way, which keeps the crash first even when its reap came after their
// records. A worker the agent stopped is a candidate only with a record (it
// may have failed before the stop, while it was still exiting); a record it
// wrote because of the stop is later than the failure that caused the stop.
std::optional<size_t> choose_root_cause(const std::vector<WorkerExit>& exits,
                                        const std::vector<std::optional<ErrorRecord>>& records) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  struct Key {
    bool consequence = false;  // a record of a peer's failure
    double time = kInf;
    bool operator<(const Key& o) const {
      return consequence != o.consequence ? !consequence : time < o.time;
    }
  };
  std::optional<size_t> best;
  Key best_key;
  for (size_t i = 0; i < exits.size(); ++i) {
    const WorkerExit& w = exits[i];
    const bool has_record = i < records.size() && records[i].has_value();
    if (w.succeeded() || (w.stopped && !has_record)) continue;
    Key key;
    if (has_record) {
      key = {is_peer_failure(*records[i]), records[i]->timestamp};
    } else if (w.signal != 0) {
      key.time = w.ended_at > 0 ? w.ended_at : -kInf;  // not seen to end: first
    }
    if (!best || key < best_key) {
      best = i;
      best_key = key;
    }
  }
  return best;
}

bool is_peer_failure(const ErrorRecord& r) {
  for (const char* type : {"dtrain::PeerLostError", "dtrain::TimeoutError", "dtrain::DistError"}) {
    if (r.error_type == type) return true;
  }
  for (const char* text :
       {"Connection closed by peer", "Connection reset by peer", "DistNetworkError",
        "DistBackendError", "Socket Timeout", "Timed out waiting"}) {
    if (r.message.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace dtrain::detail
