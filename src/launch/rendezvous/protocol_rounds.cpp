// The rendezvous protocol, part two: a complete round (finishing it, the
// workers' store, leaving it), waiting for the next round, liveness, close
// and shutdown. See Note [Rendezvous protocol] in protocol.cpp.

#include <algorithm>
#include <tuple>

#include "common/net.h"
#include "common/strings.h"
#include "dtrain/errors.h"
#include "launch/rendezvous/protocol.h"

namespace dtrain::detail {
namespace {

constexpr const char* kWithdrawn = "-";

std::string node_name(const NodeRecord& r) { return cat(r.node_id, " at ", r.addr); }

}  // namespace

RendezvousInfo DynamicRendezvous::make_info(const std::vector<NodeRecord>& table, int rank) const {
  RendezvousInfo info;
  info.round = round_;
  info.node_rank = rank;
  info.num_nodes = static_cast<int>(table.size());
  for (const NodeRecord& r : table) {
    // RendezvousConfig::settings: every node of the round sees the same
    // table, so each one that differs from another fails here, this one too.
    if (r.settings != self_.settings) {
      throw InvalidArgument(
          cat(where(), ": node ", node_name(r), " was started with ",
              r.settings.empty() ? std::string("other settings") : r.settings, " and this node (",
              node_name(self_), ") with ",
              self_.settings.empty() ? std::string("other settings") : self_.settings,
              ": start every node with the same value"));
    }
    info.local_world_sizes.push_back(r.local_world_size);
    info.node_addrs.push_back(r.addr);
  }
  return info;
}

/// Live recovery over a c10d store: the workers share the rendezvous store
/// (under a per-round prefix), which outlives any node when it runs off the
/// workers' nodes. Fills in where they meet and returns true, or returns
/// false when node rank 0 hosts their store.
bool DynamicRendezvous::share_workers_store(RendezvousInfo& info, int round) const {
  if (!config_.workers_share_store || config_.backend != "c10d") return false;
  std::string host;
  std::tie(host, info.master_port) = parse_endpoint(config_.endpoint, kC10dDefaultPort);
  // On the store's own machine the endpoint's name may resolve to loopback
  // (Debian's 127.0.1.1), and the workers bind Gloo where the route to
  // MASTER_ADDR leaves: give them the address the other nodes reach this
  // one at instead (the server listens on every interface).
  info.master_addr = is_local_host(host) ? self_.addr : host;
  info.worker_key_prefix = keys_.workers(round);
  return true;
}

std::optional<RendezvousInfo> DynamicRendezvous::finish_round(const StateView& sv,
                                                              const std::vector<NodeRecord>& table,
                                                              RdzvClock::time_point deadline) {
  const int round = sv.state.round;
  int rank = 0;
  while (table[rank].slot != slot_) ++rank;
  position_ = Position::kParticipant;
  round_ = round;
  table_ = table;
  rank_ = rank;
  next_lost_check_ = RdzvClock::now() + config_.heartbeat_interval;

  if (config_.backend == "static") {
    for (size_t i = 0; i < table.size(); ++i) {
      if (table[i].fixed_rank != static_cast<int>(i)) {
        throw InvalidArgument(cat(where(), ": round ", round,
                                  " has nodes with duplicate or missing "
                                  "LaunchOptions::node_rank (",
                                  node_name(table[i]), " has node rank ", table[i].fixed_rank,
                                  ", expected ", i, " of 0..", table.size() - 1,
                                  "); give every node a distinct LaunchOptions::node_rank"));
      }
    }
  }
  RendezvousInfo info = make_info(table, rank);
  if (share_workers_store(info, round)) return info;
  // Node rank 0 hosts a fresh store for the round's workers (so they never
  // see keys of an earlier round) and publishes where it listens.
  if (rank == 0) {
    std::shared_ptr<TcpStoreServer> server =
        TcpStoreServer::start({self_.addr, 0, config_.backend_timeout});
    info.master_addr = self_.addr;
    info.master_port = server->port();
    info.hosted_store = std::move(server);
    backend_->set(keys_.master(round), cat(info.master_addr, ":", info.master_port));
    return info;
  }
  PollBackoff backoff;
  auto next_check = RdzvClock::now() + config_.heartbeat_interval;
  for (;;) {
    if (std::optional<std::string> master = backend_->get(keys_.master(round))) {
      std::tie(info.master_addr, info.master_port) = parse_endpoint(*master, 0);
      return info;
    }
    auto now = RdzvClock::now();
    if (now >= next_check) {
      next_check = now + config_.heartbeat_interval;
      StateView current = read_state();
      if (current.state.status == RoundState::Status::kClosed) throw closed_error();
      if (current.state.round != round) {
        position_ = Position::kNone;
        return std::nullopt;
      }
      if (!backend_->alive(keys_.heartbeat(table[0].node_id), ttl_)) {
        // Rank 0 died before publishing: this round cannot run. Leave it and
        // wait for the next one with the others.
        backend_->set(keys_.lost(round), table[0].node_id);
        leave_round(/*wait_for_next=*/true);
        return std::nullopt;
      }
    }
    if (now >= deadline) {
      try {
        withdraw();
      } catch (const std::exception&) {
        // The timeout is the error to report.
      }
      throw TimeoutError(
          cat(where(), ": round ", round, " completed but node rank 0 (", node_name(table[0]),
              ") did not publish the workers' store within "
              "join_timeout (",
              config_.join_timeout.count() / 1000.0, " s); check that node's agent log"));
    }
    backoff.sleep(deadline);
  }
}

// Note [Late nodes]
// A live job runs one round for good: its agents never restart the workers
// for a membership change (the library re-forms the group in-process), so
// a node that arrives while the round runs, or that came after MAX, would
// wait forever for a next round. With join_running_round it joins the
// running round instead, as a late node:
//  * it takes an entry n = add(r/late, 1), r/late/<n> = "w <id>", and waits
//    until fewer than max_nodes nodes ahead of it are alive: the round's
//    participants and the late entries before n that still heartbeat and
//    have not finished (r/done/<id>). Nodes that died thus make room, in
//    order of arrival; the scan reads every node's heartbeat, so it runs at
//    most once per heartbeat interval;
//  * admitted, it rewrites its entry to "a <id>" and gets the round's
//    RendezvousInfo with late = n (node rank num_nodes + n - 1) and the
//    workers' meeting point: the shared store and prefix, or node 0's
//    published store, which must still be alive (else the job is over);
//  * it is then counted like a participant at the exit barrier and by the
//    store host's linger, so the stores outlive its workers' last step.
// It never registers as a waiter: the running agents are not disturbed. The
// running job's own rule (dtrain/live.h) decides what its workers do: they
// join as replacements, taken in at a step boundary while the job runs
// below its W0 workers, else they wait as spares.

/// Heartbeating, unfinished nodes of `round` ahead of a late entry late_:
/// participants, then the entries before it.
int DynamicRendezvous::count_alive_ahead(int round, const std::vector<NodeRecord>& table) {
  auto running = [&](const std::string& id) {
    return backend_->alive(keys_.heartbeat(id), ttl_) && !backend_->get(keys_.done(round, id));
  };
  int alive = 0;
  for (const NodeRecord& r : table) alive += running(r.node_id) ? 1 : 0;
  for (int64_t n = 1; n < late_; ++n) {
    std::optional<std::string> entry = backend_->get(keys_.late(round, n));
    if (entry && entry->size() > 2 && running(entry->substr(2))) ++alive;
  }
  return alive;
}

std::optional<RendezvousInfo> DynamicRendezvous::step_late(const StateView& sv) {
  const int round = sv.state.round;
  auto now = RdzvClock::now();
  if (position_ != Position::kLateWaiting || round_ != round) {
    position_ = Position::kLateWaiting;
    round_ = round;
    late_ = backend_->add(keys_.late(round), 1);
    backend_->set(keys_.late(round, late_), "w " + self_.node_id);
    late_next_scan_ = now;
  }
  if (now < late_next_scan_) return std::nullopt;
  late_next_scan_ = now + config_.heartbeat_interval;
  std::vector<NodeRecord> table = read_table(sv.state);
  if (count_alive_ahead(round, table) >= config_.max_nodes) return std::nullopt;

  RendezvousInfo info = make_info(table, static_cast<int>(table.size() + late_ - 1));
  info.round = round;
  info.late = static_cast<int>(late_);
  info.late_base_rank = info.world_size() + static_cast<int>(late_ - 1) * self_.local_world_size;
  if (!share_workers_store(info, round)) {
    std::optional<std::string> master = backend_->get(keys_.master(round));
    if (!master) {
      late_next_scan_ = now;  // node 0 is publishing it: look again soon
      return std::nullopt;
    }
    if (!backend_->alive(keys_.heartbeat(table[0].node_id), ttl_)) {
      withdraw();
      throw Error(cat(where(), ": round ", round, " is running, but node rank 0 (",
                      node_name(table[0]),
                      ") hosted its workers' store and is gone: that job cannot be joined; "
                      "start a new job (a new run id), or run the store off the workers' nodes "
                      "(--rdzv-backend c10d with `dtrain store`) so that a lost node 0 leaves it "
                      "running"));
    }
    std::tie(info.master_addr, info.master_port) = parse_endpoint(*master, 0);
  }
  backend_->set(keys_.late(round, late_), "a " + self_.node_id);
  position_ = Position::kLate;
  table_ = std::move(table);
  rank_ = info.node_rank;
  return info;
}

/// The ids of the late nodes admitted into `round` (Note [Late nodes]).
std::vector<std::string> DynamicRendezvous::admitted_late(int round) {
  std::vector<std::string> ids;
  const int64_t entries = backend_->add(keys_.late(round), 0);
  for (int64_t n = 1; n <= entries; ++n) {
    std::optional<std::string> entry = backend_->get(keys_.late(round, n));
    if (entry && entry->rfind("a ", 0) == 0) ids.push_back(entry->substr(2));
  }
  return ids;
}

void DynamicRendezvous::register_waiter(const StateView& sv, bool leaver) {
  position_ = Position::kWaiter;
  round_ = sv.state.round;
  waiter_ = 0;
  wait_ = WaitWatch{};
  wait_.progress_at = RdzvClock::now();
  // A late node that the next round could not admit (the running one has MAX
  // nodes) waits without asking the running agents to restart.
  if (leaver || sv.state.participants < config_.max_nodes) {
    waiter_ = backend_->add(keys_.waiting(round_), 1);
    backend_->set(keys_.waiter(round_, waiter_), self_.node_id);
  }
}

void DynamicRendezvous::step_waiting(const StateView& sv) {
  const int round = round_;
  const int participants = sv.state.participants;
  int64_t left = backend_->add(keys_.left(round), 0);
  if (left >= participants) {
    advance_round(round);  // the last leaver died before moving the state on
    return;
  }
  auto now = RdzvClock::now();
  if (left != wait_.left) {
    wait_.left = left;
    wait_.progress_at = now;
    return;
  }
  if (now - wait_.progress_at < config_.heartbeat_interval || now < wait_.next_scan) return;
  // Stalled: participants that neither leave nor heartbeat are dead; leave
  // the round on their behalf so it can end.
  wait_.next_scan = now + config_.heartbeat_interval;
  if (wait_.table.empty()) wait_.table = read_table(sv.state);
  for (const NodeRecord& r : wait_.table) {
    if (backend_->get(keys_.left(round, r.slot))) continue;
    if (!backend_->alive(keys_.heartbeat(r.node_id), ttl_)) mark_left(round, r.slot, participants);
  }
}

void DynamicRendezvous::mark_left(int round, int64_t slot, int participants) {
  if (!backend_->compare_set(keys_.left(round, slot), std::nullopt, self_.node_id, nullptr)) return;
  if (backend_->add(keys_.left(round), 1) >= participants) advance_round(round);
}

void DynamicRendezvous::advance_round(int round) {
  StateView sv = read_state();
  if (sv.state.round != round || sv.state.status != RoundState::Status::kComplete) return;
  RoundState next;
  next.round = round + 1;
  next.status = RoundState::Status::kOpen;
  backend_->compare_set(keys_.state(), sv.raw, next.encode(), nullptr);
}

void DynamicRendezvous::leave_round(bool wait_for_next) {
  const int round = round_;
  mark_left(round, slot_, static_cast<int>(table_.size()));
  table_.clear();
  position_ = Position::kNone;
  if (!wait_for_next) return;
  StateView sv = read_state();
  if (sv.state.round == round && sv.state.status == RoundState::Status::kComplete) {
    register_waiter(sv, /*leaver=*/true);
  }
}

void DynamicRendezvous::withdraw() {
  Position was = position_;
  position_ = Position::kNone;
  if (was == Position::kWaiter) {
    if (waiter_ > 0) backend_->set(keys_.waiter(round_, waiter_), kWithdrawn);
    return;
  }
  if (was == Position::kLateWaiting) {
    backend_->set(keys_.late(round_, late_), kWithdrawn);
    return;
  }
  // An admitted late node stays listed: it counts at the exit barrier (as
  // done once there) and stops counting for linger when its heartbeat goes.
  if (was == Position::kNone || was == Position::kLate) return;
  StateView sv = read_state();
  if (sv.state.status == RoundState::Status::kClosed || sv.state.round != round_) return;
  if (was == Position::kSlot && sv.state.status == RoundState::Status::kOpen) {
    drop_slot(round_, slot_);
  } else if (was == Position::kParticipant) {
    position_ = Position::kParticipant;
    leave_round(/*wait_for_next=*/false);
  }
}

void DynamicRendezvous::record_failure(const std::string& text) {
  if (position_ != Position::kParticipant && position_ != Position::kLate) return;
  backend_->compare_set(keys_.failure(round_), std::nullopt, text, nullptr);
}

std::optional<std::string> DynamicRendezvous::first_failure(int round) {
  return backend_->get(keys_.failure(round));
}

bool DynamicRendezvous::exit_barrier(std::chrono::milliseconds timeout, bool skip_dead) {
  if (position_ != Position::kParticipant && position_ != Position::kLate) return true;
  const auto deadline = RdzvClock::now() + timeout;
  backend_->set(keys_.done(round_, self_.node_id), "1");
  // Everyone expected: the participants and the late nodes admitted so far
  // (only live recovery admits any; Note [Late nodes]).
  std::vector<std::string> ids;
  auto expected = [&] {
    ids.clear();
    for (const NodeRecord& r : table_) ids.push_back(r.node_id);
    for (std::string& id : admitted_late(round_)) ids.push_back(std::move(id));
    return static_cast<int64_t>(ids.size());
  };
  // A dead node (no heartbeat) that never said done counts as arrived.
  auto dead_not_done = [&] {
    int64_t n = 0;
    for (const std::string& id : ids) {
      if (id == self_.node_id) continue;
      if (!backend_->get(keys_.done(round_, id)) && !backend_->alive(keys_.heartbeat(id), ttl_)) {
        ++n;
      }
    }
    return n;
  };
  PollBackoff backoff;
  for (int64_t done = backend_->add(keys_.done(round_), 1);;
       done = backend_->add(keys_.done(round_), 0)) {
    const int64_t want = expected();
    if (done + (skip_dead ? dead_not_done() : 0) >= want) return true;
    if (RdzvClock::now() >= deadline) return false;
    if (config_.cancelled && config_.cancelled()) return false;  // SIGTERM: leave now
    backoff.sleep(deadline);
  }
}

void DynamicRendezvous::linger(std::chrono::milliseconds timeout) {
  if (!keep_alive_ || table_.empty()) return;
  const auto deadline = RdzvClock::now() + timeout;
  PollBackoff backoff;
  auto someone_left_behind = [&] {
    std::vector<std::string> ids = admitted_late(round_);
    for (const NodeRecord& r : table_) ids.push_back(r.node_id);
    return std::any_of(ids.begin(), ids.end(), [&](const std::string& id) {
      return id != self_.node_id && backend_->alive(keys_.heartbeat(id), ttl_);
    });
  };
  while (someone_left_behind() && RdzvClock::now() < deadline &&
         !(config_.cancelled && config_.cancelled())) {
    backoff.sleep(deadline);
  }
}

int DynamicRendezvous::num_nodes_waiting() {
  if (position_ != Position::kParticipant) return 0;
  StateView sv = read_state();
  if (sv.state.status == RoundState::Status::kClosed) return 0;
  // The job moved on without us (we were taken for dead): restart to rejoin.
  if (sv.state.round != round_) return 1;
  int64_t registered = backend_->add(keys_.waiting(round_), 0);
  int live = 0;
  for (int64_t i = 1; i <= registered; ++i) {
    std::optional<std::string> id = backend_->get(keys_.waiter(round_, i));
    if (!id) {
      ++live;  // registering right now
    } else if (*id != kWithdrawn && backend_->alive(keys_.heartbeat(*id), ttl_)) {
      ++live;
    }
  }
  return live;
}

bool DynamicRendezvous::lost_participants() {
  if (position_ != Position::kParticipant) return false;
  if (backend_->get(keys_.lost(round_))) return true;
  auto now = RdzvClock::now();
  if (now < next_lost_check_) return false;
  next_lost_check_ = now + config_.heartbeat_interval;
  StateView sv = read_state();
  if (sv.state.status == RoundState::Status::kClosed) return false;
  if (sv.state.round != round_) return true;
  if (table_.size() < 2) return false;
  // Ring check: each participant watches its successor in rank order. One
  // that left to restart still heartbeats; one that shut down forgot its
  // heartbeat and counts as lost, like a dead one.
  const NodeRecord& next = table_[(rank_ + 1) % table_.size()];
  if (backend_->alive(keys_.heartbeat(next.node_id), ttl_)) return false;
  if (backend_->get(keys_.done(round_, next.node_id))) return false;  // finished, not lost
  backend_->set(keys_.lost(round_), next.node_id);
  return true;
}

bool DynamicRendezvous::participant_lost() {
  if (position_ != Position::kParticipant) return false;
  lost_participants();  // the ring check records a dead successor
  return backend_->get(keys_.lost(round_)).has_value();
}

void DynamicRendezvous::set_closed() {
  auto deadline = RdzvClock::now() + config_.backend_timeout;
  PollBackoff backoff;
  for (;;) {
    StateView sv = read_state();
    if (sv.state.status == RoundState::Status::kClosed) return;
    RoundState closed;
    closed.round = sv.state.round;
    closed.status = RoundState::Status::kClosed;
    if (backend_->compare_set(keys_.state(), sv.raw, closed.encode(), nullptr)) return;
    if (RdzvClock::now() >= deadline) {
      throw TimeoutError(cat(where(), ": could not close within ",
                             config_.backend_timeout.count() / 1000.0,
                             " s (the state kept changing)"));
    }
    backoff.sleep(deadline);
  }
}

bool DynamicRendezvous::is_closed() {
  return read_state().state.status == RoundState::Status::kClosed;
}

void DynamicRendezvous::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (heartbeat_) heartbeat_->stop();
  // Best effort: a store that is gone cannot be told, and the others then
  // notice the missing heartbeats instead.
  try {
    withdraw();
  } catch (const std::exception&) {
  }
  if (heartbeat_) {
    try {
      backend_->forget(keys_.heartbeat(self_.node_id));
    } catch (const std::exception&) {
    }
    heartbeat_.reset();
  }
}

std::string DynamicRendezvous::describe_arrivals(int round) {
  constexpr int64_t kShown = 16;
  int64_t arrived = backend_->add(keys_.arrived(round), 0);
  std::optional<std::string> dropped_raw = backend_->get(keys_.dropped(round));
  std::vector<int64_t> dropped =
      dropped_raw ? decode_slots(*dropped_raw, keys_.dropped(round)) : std::vector<int64_t>{};
  std::vector<std::string> names;
  int64_t live = 0;
  for (int64_t s = 1; s <= arrived; ++s) {
    if (std::count(dropped.begin(), dropped.end(), s) > 0) continue;
    ++live;
    if (live > kShown) continue;
    std::optional<std::string> rec = backend_->get(keys_.slot(round, s));
    names.push_back(rec ? node_name(NodeRecord::decode(*rec, keys_.slot(round, s))) : "(arriving)");
  }
  std::string list = join(names, ", ");
  if (live > kShown) list += cat(" and ", live - kShown, " more");
  return cat(live, " node(s) arrived (", list, ")");
}

void DynamicRendezvous::throw_timeout(const StateView& sv) {
  std::string what;
  if (position_ == Position::kSlot) {
    std::string arrivals;
    try {
      arrivals = describe_arrivals(round_);
    } catch (const std::exception& e) {
      arrivals = cat("arrivals unknown: ", first_line(e.what()));
    }
    what = cat("round ", round_, " did not complete: ", arrivals, ", ", config_.min_nodes,
               " needed (min_nodes=", config_.min_nodes, ", max_nodes=", config_.max_nodes, ")");
  } else if (position_ == Position::kWaiter) {
    what =
        cat("waiting for round ", round_ + 1, ": round ", round_, " is still running with ",
            sv.state.participants, " node(s) that did not restart (min_nodes=", config_.min_nodes,
            ", max_nodes=", config_.max_nodes, ")");
  } else if (position_ == Position::kLateWaiting) {
    what = cat("round ", round_, " is running with ", config_.max_nodes,
               " node(s) alive, and a late node is admitted only while fewer run (max_nodes=",
               config_.max_nodes, ")");
  } else {
    what = cat("round ", sv.state.round, " could not be joined");
  }
  try {
    withdraw();
  } catch (const std::exception&) {
    // The timeout is the error to report.
  }
  throw TimeoutError(cat(where(), ": node ", self_.node_id, " at ", self_.addr, " timed out after ",
                         config_.join_timeout.count() / 1000.0, " s (join_timeout) — ", what,
                         "; check that every node uses the same LaunchOptions::rdzv_endpoint and "
                         "LaunchOptions::run_id and "
                         "that enough nodes were started"));
}

}  // namespace dtrain::detail
