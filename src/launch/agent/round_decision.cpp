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

std::optional<size_t> choose_root_cause(const std::vector<WorkerExit>& exits,
                                        const std::vector<std::optional<ErrorRecord>>& records) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::optional<size_t> best;
  double best_key = kInf;
  for (size_t i = 0; i < exits.size(); ++i) {
    const WorkerExit& w = exits[i];
    const bool has_record = i < records.size() && records[i].has_value();
    // A worker stopped by the agent may still have failed first: its record
    // can predate the stop (it was still exiting). A record it wrote because
    // of the stop is later than the failure that caused the stop.
    if (w.succeeded() || (w.stopped && !has_record)) continue;
    // Signal without a record: first; record: its time; exit without one: last.
    double key = has_record ? records[i]->timestamp : (w.signal != 0 ? -kInf : kInf);
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
