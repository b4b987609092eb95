#pragma once
// What the agent does when a round of workers ends, as pure functions of what
// it observed: the root cause among the workers that failed, and whether to
// restart (spending one of --max-restarts or not), give up, or finish. The
// agent loop (agent.cpp) gathers the facts and carries the decision out;
// tests/launch/agent/test_round_decision.cpp checks every case. Torch-free.

#include <cstddef>
#include <optional>
#include <vector>

#include "common/error_file.h"
#include "dtrain/launch.h"

namespace dtrain::detail {

/// How a round ended, as the agent saw it.
struct RoundFacts {
  /// SIGINT/SIGTERM reached the agent.
  bool signalled = false;
  /// A local worker failed by itself (not stopped by the agent).
  bool worker_failed = false;
  /// A participant of the round was found dead (stopped heartbeating) while
  /// or shortly after this node's workers failed: their failure is the
  /// consequence of a lost node.
  bool node_lost = false;
  /// The group was stopped for a membership change (a node waits to join, a
  /// participant was lost, the run was closed) without a local failure.
  bool membership_changed = false;
  /// Every local worker exited 0.
  bool all_succeeded = false;
  /// Restarts already spent, and --max-restarts.
  int restarts = 0;
  int max_restarts = 0;
  /// Nodes in the round.
  int num_nodes = 1;
};

enum class RoundAction {
  kStop,     ///< signalled: leave the rendezvous, report the signal
  kRestart,  ///< join the next round
  kGiveUp,   ///< restarts ran out: close the run everywhere, report the failure
  kFinish,   ///< the node's workers all succeeded
  kAbort,    ///< workers ended without a reason (cannot happen): close, report
};

struct RoundDecision {
  RoundAction action = RoundAction::kAbort;
  /// The restart spends one of --max-restarts (worker failures); restarts
  /// caused by a lost node or a membership change are free.
  bool counts_restart = false;
  /// Record this node's root cause as the round's failure in the rendezvous
  /// (first writer wins), so every node can name it when the run ends.
  bool record_failure = false;
  /// Close the rendezvous: every other node stops instead of re-joining.
  bool close = false;
  /// Wait for every node to finish (kFinish, multi-node) before leaving.
  bool exit_barrier = false;
  /// Keep hosting the rendezvous store until the other nodes have read the
  /// final state (multi-node kGiveUp / kFinish).
  bool linger = false;
};

/// The decision for `facts` (see RoundDecision's fields).
RoundDecision decide_round(const RoundFacts& facts);

/// The root cause among a round's workers: of the workers that failed (by
/// themselves, or after the agent's stop but with an error record), the one
/// that failed first, not the lowest rank the agent happened to reap first.
/// A record counts at its timestamp, a worker killed by a signal without a
/// record at its WorkerExit::ended_at (before everything when 0), one that
/// exited non-zero without a record after those; records of a peer's failure
/// (is_peer_failure) come after all of them; ties go to the lower local rank.
/// Note [Choosing the root cause] in round_decision.cpp says why.
/// `records` is indexed like `exits`. Meant for a round in which some worker
/// failed by itself; nullopt when no worker qualifies.
std::optional<size_t> choose_root_cause(const std::vector<WorkerExit>& exits,
                                        const std::vector<std::optional<ErrorRecord>>& records);

/// True when the record says the worker failed because a peer did: a lost
/// connection or a collective timeout (dtrain's PeerLostError, TimeoutError,
/// DistError; c10d's and Gloo's texts for other programs). Such a failure may
/// be the consequence of a lost node, which the agent then checks.
bool is_peer_failure(const ErrorRecord& record);

}  // namespace dtrain::detail
