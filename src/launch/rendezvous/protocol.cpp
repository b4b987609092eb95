// The rendezvous protocol (torchrun's dynamic rendezvous) over a
// RendezvousBackend. Configuration, endpoints and make_rendezvous live in
// config.cpp; encodings and keys in state.h.
//
// Note [Rendezvous protocol]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// torchrun keeps the whole rendezvous in one blob that every node
// compare-and-sets; with N nodes arriving together that is O(N^2) CAS
// retries, each moving an O(N) blob. Here the shared state is split so that
// forming a round of N nodes costs O(N) store operations:
//
//  * state (CAS): "<round> open" | "<round> complete <n> <table slot>" |
//    "<round> closed". Absent reads as "0 open". It changes only a few times
//    per round: open -> complete (the completer), complete -> next round open
//    (the last participant to leave), anything -> closed (set_closed).
//  * Joining an open round r: slot = add(r/arrived, 1), then the node's
//    record ("id, addr, local world size, fixed rank") goes to r/slot/<slot>.
//    Slots are arrival order; node ranks are the order of the included slots
//    (static: the configured node_rank).
//  * r/dropped (CAS, rarely written): slots of nodes found dead (or that
//    withdrew) before completion. The effective count is arrived - dropped;
//    the round includes the first min(count, MAX) live slots.
//  * Completion, when the count reaches MAX, or reached MIN and this node's
//    last-call timer (started when it first saw MIN) expired: the completer
//    reads the included records, writes them as one table to
//    r/table/<its slot> and CASes the state to "r complete n <its slot>". So
//    the N readers fetch one key, not N. Completers are the node whose own
//    arrival made MAX, and the lowest included slot; any other node tries
//    only after one more heartbeat interval (a completer may have died).
//    A node holding a slot that the table lacks (it came after MAX, or was
//    dropped) waits for the next round like a late arrival.
//  * Workers' store: node rank 0 starts a fresh TcpStoreServer on a free port
//    only once the round is complete and publishes "addr:port" at r/master;
//    the others poll for that key. No candidate servers for the losers.
//  * Waiting: a node that arrives while round r is complete, or a participant
//    of r that calls next_rendezvous again (its workers failed, or it is
//    admitting a new node), registers at r/waiter/<add(r/waiting, 1)>;
//    num_nodes_waiting() counts the live ones, which makes the running agents
//    restart. A late node is not registered when r already has MAX nodes
//    (restarting could not admit it), as in torchrun.
//  * Leaving a complete round: CAS r/left/<slot> absent -> own id (exactly
//    once per participant), then add(r/left, 1); whoever brings it to n moves
//    the state to "r+1 open". Waiters re-check that count, so a leaver dying
//    between the two writes cannot stall the job.
//  * Liveness: every node heartbeats hb/<id> from its own thread every
//    heartbeat_interval; ttl = interval * missed_heartbeats. Dead nodes are
//    searched only when progress stalls for one interval (no arrival in an
//    open round below MAX, no leaver in a complete round), at most once per
//    interval per node: an open round drops dead slots (and slots whose
//    record never appeared within ttl); waiters mark dead participants as
//    left. A running participant checks only its successor in rank order
//    (ring) once per interval and raises r/lost; lost_participants() reads
//    that flag, so detection is O(1) per node and still certain while any
//    live node has a dead successor.
//  * Late nodes (join_running_round, live recovery): see Note [Late nodes]
//    in protocol_rounds.cpp.
//  * Polling sleeps 10 ms growing to 200 ms (PollBackoff); every wait is
//    bounded by join_timeout, every backend call by backend_timeout.

#include <algorithm>
#include <optional>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "launch/rendezvous/protocol.h"

namespace dtrain::detail {

DynamicRendezvous::DynamicRendezvous(std::shared_ptr<RendezvousBackend> backend,
                                     RendezvousConfig config, std::string node_id,
                                     std::shared_ptr<void> keep_alive)
    : keep_alive_(std::move(keep_alive)),
      backend_(std::move(backend)),
      config_(std::move(config)),
      keys_(config_.run_id),
      ttl_(config_.heartbeat_interval * config_.missed_heartbeats) {
  self_.node_id = std::move(node_id);
  self_.addr = config_.local_addr;
  self_.local_world_size = config_.local_world_size;
  self_.settings = config_.settings;
  self_.fixed_rank = config_.backend == "static" ? config_.node_rank : -1;
}

DynamicRendezvous::~DynamicRendezvous() {
  try {
    shutdown();
  } catch (...) {
    // A destructor must not throw; shutdown() already swallows store errors.
  }
}

std::string DynamicRendezvous::describe() const { return backend_->describe(); }

std::string DynamicRendezvous::where() const {
  return cat("rendezvous '", config_.run_id, "' at ", backend_->describe());
}

DynamicRendezvous::StateView DynamicRendezvous::read_state() {
  StateView v;
  v.raw = backend_->get(keys_.state());
  if (v.raw) v.state = RoundState::decode(*v.raw, keys_.state());
  return v;
}

Error DynamicRendezvous::closed_error() const {
  return Error(cat(where(),
                   " is closed: the job finished or gave up; start a new job (or use a "
                   "new LaunchOptions::run_id) to train again"));
}

RendezvousInfo DynamicRendezvous::next_rendezvous() {
  if (shut_down_)
    throw Error(cat(where(), ": next_rendezvous() after shutdown() on node ", self_.node_id));
  if (!heartbeat_) {
    auto beat = [b = backend_, key = keys_.heartbeat(self_.node_id), ttl = ttl_] {
      b->heartbeat(key, ttl);
    };
    beat();  // alive before anyone can see our slot
    heartbeat_ = std::make_unique<HeartbeatThread>(config_.heartbeat_interval, beat);
  }
  auto deadline = RdzvClock::now() + config_.join_timeout;
  if (position_ == Position::kParticipant) leave_round(/*wait_for_next=*/true);
  if (position_ == Position::kLate) position_ = Position::kNone;

  PollBackoff backoff;
  Position last_position = position_;
  for (;;) {
    StateView sv = read_state();
    if (sv.state.status == RoundState::Status::kClosed) {
      position_ = Position::kNone;
      throw closed_error();
    }
    bool rejoin = position_ != Position::kNone && sv.state.round > round_;
    if (rejoin && position_ == Position::kLateWaiting) withdraw();
    if (rejoin) position_ = Position::kNone;

    if (position_ == Position::kLateWaiting && sv.state.status == RoundState::Status::kComplete) {
      std::optional<RendezvousInfo> info = step_late(sv);
      if (info) return std::move(*info);
    } else if (position_ == Position::kNone || position_ == Position::kLateWaiting) {
      if (position_ == Position::kLateWaiting) withdraw();
      if (sv.state.status == RoundState::Status::kOpen) {
        take_slot(sv.state.round);
      } else if (config_.join_running_round) {
        std::optional<RendezvousInfo> info = step_late(sv);  // Note [Late nodes]
        if (info) return std::move(*info);
      } else {
        register_waiter(sv, /*leaver=*/false);
      }
    } else if (position_ == Position::kSlot) {
      if (sv.state.status == RoundState::Status::kComplete) {
        std::vector<NodeRecord> table = read_table(sv.state);
        auto me = std::find_if(table.begin(), table.end(),
                               [&](const NodeRecord& r) { return r.slot == slot_; });
        if (me != table.end()) {
          std::optional<RendezvousInfo> info = finish_round(sv, table, deadline);
          if (info) return std::move(*info);
        } else if (config_.join_running_round) {
          position_ = Position::kNone;  // came after MAX, or was dropped: join it late
        } else {
          register_waiter(sv, /*leaver=*/false);  // came after MAX, or was dropped
        }
      } else {
        step_open_round(sv);
      }
    } else if (position_ == Position::kWaiter) {
      step_waiting(sv);
    }

    if (position_ != last_position) {
      last_position = position_;
      backoff.reset();
      continue;  // act on the new position at once
    }
    if (RdzvClock::now() >= deadline) throw_timeout(sv);
    if (config_.cancelled && config_.cancelled()) {
      try {
        withdraw();
      } catch (const std::exception&) {
        // Cancelling is what the caller asked for; a failed goodbye is not news.
      }
      throw CancelledRendezvous(cat(where(), ": joining round ", sv.state.round, " was cancelled"));
    }
    backoff.sleep(deadline);
  }
}

void DynamicRendezvous::take_slot(int round) {
  slot_ = backend_->add(keys_.arrived(round), 1);
  backend_->set(keys_.slot(round, slot_), self_.encode());
  position_ = Position::kSlot;
  round_ = round;
  open_ = OpenRoundWatch{};
  open_.progress_at = RdzvClock::now();
}

void DynamicRendezvous::step_open_round(const StateView& sv) {
  const int round = round_;
  const int64_t arrived = backend_->add(keys_.arrived(round), 0);
  std::optional<std::string> dropped_raw = backend_->get(keys_.dropped(round));
  std::vector<int64_t> dropped =
      dropped_raw ? decode_slots(*dropped_raw, keys_.dropped(round)) : std::vector<int64_t>{};
  if (std::count(dropped.begin(), dropped.end(), slot_) > 0) {
    position_ = Position::kNone;  // we were taken for dead: arrive again
    return;
  }
  std::vector<int64_t> included;
  int64_t live = 0;
  for (int64_t s = 1; s <= arrived; ++s) {
    if (std::count(dropped.begin(), dropped.end(), s) > 0) continue;
    ++live;
    if (static_cast<int>(included.size()) < config_.max_nodes) included.push_back(s);
  }
  auto now = RdzvClock::now();
  if (arrived != open_.arrived || dropped.size() != open_.dropped) {
    open_.arrived = arrived;
    open_.dropped = dropped.size();
    open_.progress_at = now;
  }
  // The last call runs on this node's clock from when it first saw MIN.
  if (live >= config_.min_nodes) {
    if (!open_.min_since) open_.min_since = now;
  } else {
    open_.min_since.reset();
  }
  bool can_complete = live >= config_.max_nodes ||
                      (open_.min_since && now - *open_.min_since >= config_.last_call_timeout);
  if (can_complete) {
    if (!open_.complete_since) open_.complete_since = now;
    bool designated =
        slot_ == included.front() || (live >= config_.max_nodes && slot_ == included.back());
    if (designated || now - *open_.complete_since >= config_.heartbeat_interval) {
      try_complete(sv, included);
    }
    return;
  }
  open_.complete_since.reset();
  if (now - open_.progress_at >= config_.heartbeat_interval && now >= open_.next_scan) {
    open_.next_scan = now + config_.heartbeat_interval;
    for (int64_t s = 1; s <= arrived; ++s) {
      if (s == slot_ || std::count(dropped.begin(), dropped.end(), s) > 0) continue;
      if (!slot_alive(round, s)) drop_slot(round, s);
    }
  }
}

bool DynamicRendezvous::slot_alive(int round, int64_t slot) {
  std::optional<std::string> rec = backend_->get(keys_.slot(round, slot));
  auto now = RdzvClock::now();
  if (!rec) {
    // Slot taken but no record yet: normally microseconds; a node that died
    // in between is given up after one ttl.
    auto [it, fresh] = open_.missing_since.emplace(slot, now);
    return fresh || now - it->second < ttl_;
  }
  NodeRecord r = NodeRecord::decode(*rec, keys_.slot(round, slot));
  return backend_->alive(keys_.heartbeat(r.node_id), ttl_);
}

void DynamicRendezvous::drop_slot(int round, int64_t slot) {
  std::optional<std::string> current = backend_->get(keys_.dropped(round));
  auto deadline = RdzvClock::now() + config_.backend_timeout;
  for (;;) {
    std::vector<int64_t> slots =
        current ? decode_slots(*current, keys_.dropped(round)) : std::vector<int64_t>{};
    if (std::count(slots.begin(), slots.end(), slot) > 0) return;
    slots.push_back(slot);
    if (backend_->compare_set(keys_.dropped(round), current, encode_slots(slots), &current)) return;
    if (RdzvClock::now() >= deadline) {
      throw TimeoutError(cat(where(), ": could not drop slot ", slot, " of round ", round,
                             " within ", config_.backend_timeout.count() / 1000.0, " s"));
    }
  }
}

void DynamicRendezvous::try_complete(const StateView& sv, const std::vector<int64_t>& included) {
  const int round = round_;
  std::vector<NodeRecord> nodes;
  nodes.reserve(included.size());
  for (int64_t s : included) {
    std::optional<std::string> rec = backend_->get(keys_.slot(round, s));
    if (!rec) {
      if (!slot_alive(round, s)) drop_slot(round, s);
      return;  // try again at the next poll
    }
    NodeRecord r = NodeRecord::decode(*rec, keys_.slot(round, s));
    r.slot = s;
    nodes.push_back(std::move(r));
  }
  if (config_.backend == "static") {
    std::stable_sort(nodes.begin(), nodes.end(), [](const NodeRecord& a, const NodeRecord& b) {
      return a.fixed_rank < b.fixed_rank;
    });
  }
  RoundState done;
  done.round = round;
  done.status = RoundState::Status::kComplete;
  done.participants = static_cast<int>(nodes.size());
  done.table_slot = slot_;
  backend_->set(keys_.table(round, slot_), encode_table(nodes));
  // Losing the CAS is fine: someone else completed (or closed) the round and
  // the next poll reads their table.
  backend_->compare_set(keys_.state(), sv.raw, done.encode(), nullptr);
}

std::vector<NodeRecord> DynamicRendezvous::read_table(const RoundState& s) {
  std::string key = keys_.table(s.round, s.table_slot);
  std::optional<std::string> text = backend_->get(key);
  if (!text)
    throw StoreError(
        cat(where(), ": round ", s.round, " is complete but its table ", key, " is missing"));
  std::vector<NodeRecord> table = decode_table(*text, key);
  if (static_cast<int>(table.size()) != s.participants) {
    throw StoreError(cat(where(), ": round ", s.round, " table ", key, " lists ", table.size(),
                         " nodes, the state says ", s.participants));
  }
  return table;
}

}  // namespace dtrain::detail
