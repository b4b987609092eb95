// Note [Node recovery]
// With a snapshot directory (NodeOptions::snapshot_dir, DMLC_PS_SNAPSHOT_DIR,
// set on every process of the job) a dead *server* no longer ends the job.
// As in ps-lite's is_recovery design:
// - The scheduler, when a server's heartbeats stop for heartbeat_timeout,
//   marks it dead and waits up to recovery_timeout for a replacement; if none
//   comes it ends the job as without recovery (Note [Failure detection]),
//   naming the server. A dead worker or scheduler still ends the job.
// - A replacement is a server started with the job's DMLC_* variables after
//   the job has begun: its ADD_NODE, dropped without recovery, is kept
//   (for heartbeat_timeout + recovery_timeout) until a server is dead, even if it arrives
//   before the death is noticed (a supervisor restarts at once). It gets the
//   dead server's id and rank: the scheduler reopens its DEALER to the new
//   host:port, sends the replacement the full node table with its own entry
//   marked is_recovery, and sends every other node an ADD_NODE naming only
//   the recovered node (is_recovery), so they reopen their DEALER to it,
//   discarding what was queued for the dead one.
// - The workers' re-sent requests may reach the replacement before the
//   scheduler's table does; it keeps them (up to kMaxEarlyData) and handles
//   them once the table has named their senders.
// - The replacement skips the start barrier (the others passed it long ago),
//   loads its rank's snapshot (Note [Server snapshots], snapshot.h) and
//   serves; it joins the final barrier like any server, and the dead one's
//   arrival there (servers wait in it all along) is forgotten.
// - Workers keep a copy of every request until each server concerned has
//   answered (only with recovery on) and, when told a server recovered,
//   re-send the copies it has not answered; the server recognises re-sent
//   pushes it had already merged (Note [Server snapshots]).
// Nothing here waits on the network: the receive thread only queues sends.
#include "common/strings.h"
#include "ps/membership/node.h"

namespace dtrain::ps {
namespace {

// How many data messages a replacement keeps until its node table arrives.
constexpr size_t kMaxEarlyData = 4096;
// How many replacements the scheduler keeps waiting for a dead server.
constexpr size_t kMaxReplacements = 64;

}  // namespace

void Node::handle_late_add_node(const NodeInfo& node) {
  if (node.role != Role::kServer) {
    return log(cat("dropped an ADD_NODE from a ", role_name(node.role), " at ", node.hostname, ":",
                   node.port,
                   " after the job started: only a dead server can be replaced (start the whole "
                   "job again)"));
  }
  if (replacements_.size() >= kMaxReplacements) {
    return log(cat("dropped an ADD_NODE from a server at ", node.hostname, ":", node.port, ": ",
                   kMaxReplacements, " replacements already wait for a dead server"));
  }
  log(cat("a replacement server registered from ", node.hostname, ":", node.port,
          dead_servers_.empty() ? "; it takes the place of the next server found dead" : ""));
  const auto now = std::chrono::steady_clock::now();
  replacements_.emplace_back(node, now);
  match_replacements(now);
}

void Node::server_lost(int id, std::chrono::steady_clock::time_point now) {
  last_seen_.erase(id);
  dead_servers_.emplace(id, now);
  log(cat(describe(id), " sent no heartbeat for ", seconds(options_.heartbeat_timeout),
          " s: it died or hangs; waiting up to ", seconds(options_.recovery_timeout),
          " s for a replacement (start a server with the job's DMLC_* variables and its "
          "snapshot directory)"));
  match_replacements(now);
}

void Node::match_replacements(std::chrono::steady_clock::time_point now) {
  while (!dead_servers_.empty() && !replacements_.empty()) {
    const int id = dead_servers_.begin()->first;
    dead_servers_.erase(dead_servers_.begin());
    NodeInfo node = replacements_.front().first;
    replacements_.erase(replacements_.begin());
    node.id = id;
    node.is_recovery = true;
    van_.connect(id, node.hostname, node.port, kScheduler, /*drop_queued=*/true);
    Message table, update;
    table.meta.control.cmd = update.meta.control.cmd = Command::kAddNode;
    update.meta.control.node.push_back(node);
    std::vector<int> others;
    {
      std::lock_guard<std::mutex> lock(mu_);
      nodes_[id] = node;
      for (const auto& [other, info] : nodes_) {
        table.meta.control.node.push_back(info);
        if (other != id && other != kScheduler) others.push_back(other);
      }
    }
    table.meta.timestamp = new_timestamp();
    van_.send(id, table);
    for (int other : others) {
      update.meta.timestamp = new_timestamp();
      van_.send(other, update);
    }
    last_seen_[id] = now;
    // The dead server waited in a barrier (servers wait in the final one
    // all along): its replacement joins it again, so that arrival goes.
    for (auto& [group, senders] : barrier_senders_) {
      if (senders.erase(id) > 0) --barrier_count_[group];
    }
    log(cat(describe(id), " has replaced the dead server; the job goes on"));
  }
}

void Node::check_recovery(std::chrono::steady_clock::time_point now) {
  // A replacement may register up to heartbeat_timeout before the death it
  // replaces is noticed; one that found no dead server for longer than that
  // plus recovery_timeout is forgotten (it gives up on its own as well).
  while (!replacements_.empty() && now - replacements_.front().second >
                                       options_.heartbeat_timeout + options_.recovery_timeout) {
    log(cat("the replacement server from ", replacements_.front().first.hostname, ":",
            replacements_.front().first.port, " found no dead server to replace; forgotten"));
    replacements_.erase(replacements_.begin());
  }
  for (const auto& [id, since] : dead_servers_) {
    if (now - since <= options_.recovery_timeout) continue;
    return terminate_job(
        id, cat(describe(id), " sent no heartbeat for ", seconds(options_.heartbeat_timeout),
                " s and no replacement registered within ", seconds(options_.recovery_timeout),
                " s (PS_RECOVERY_TIMEOUT); ending the job"));
  }
}

void Node::keep_early_data(Message msg) {
  // Only a replacement waiting for its table keeps data: the workers were
  // told of it at the same time and their re-sent requests may overtake the
  // table. Bounded, so a stranger cannot fill the memory.
  if (!options_.recovery() || options_.role != Role::kServer || my_id_ != kEmpty ||
      early_data_.size() >= kMaxEarlyData) {
    return;
  }
  early_data_.push_back(std::move(msg));
}

void Node::replay_early_data() {
  if (early_data_.empty() || my_id_ == kEmpty) return;
  std::vector<Message> early;
  early.swap(early_data_);
  for (Message& msg : early) {
    if (handler_ && known(msg.meta.sender)) queue_data(std::move(msg));
  }
}

void Node::apply_recovery_update(const Message& msg) {
  for (const NodeInfo& node : msg.meta.control.node) {
    if (!node.is_recovery || node.id == my_id_ || node.id == kScheduler || node.id == kEmpty) {
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!nodes_.count(node.id)) continue;  // not a node of this job
      nodes_[node.id] = node;
    }
    // Same role: never talk (Note [Node lifecycle]).
    if (node.role != options_.role) {
      van_.connect(node.id, node.hostname, node.port, my_id_, /*drop_queued=*/true);
    }
    log(cat(describe(node.id), " has replaced a dead one; reconnected"));
    if (on_recovery_) on_recovery_(node.id);
  }
}

}  // namespace dtrain::ps
