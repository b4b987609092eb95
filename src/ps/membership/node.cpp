// The node runtime: Note [Node lifecycle], Note [Failure detection].
#include "ps/membership/node.h"

#include <algorithm>
#include <iostream>
#include <optional>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::ps {
namespace {

using Clock = std::chrono::steady_clock;

// How often the receive loop wakes when idle, to send heartbeats and check
// deadlines.
constexpr Millis kTick{50};
// How often a node waiting for the scheduler says so.
constexpr Millis kWaitLogPeriod{5000};
// The body prefix of a TERMINATE that reports a dead node.
constexpr std::string_view kLostPrefix = "dtrain-lost: ";
// The body prefix of a TERMINATE that reports a passed deadline (Note [Final
// barrier deadline]).
constexpr std::string_view kTimeoutPrefix = "dtrain-timeout: ";
// The body of a worker's HEARTBEAT that says it has finished (Note [Leaving
// early]); ps-lite's scheduler takes it for a plain heartbeat.
constexpr std::string_view kLeaveBody = "dtrain-leave";
// The body prefix of a worker's requested rank in ADD_NODE.
constexpr std::string_view kWorkerIdPrefix = "dtrain-worker-id=";

std::string host_port(const NodeInfo& n) { return cat(n.hostname, ":", n.port); }

// now + d, saturating (d may be Millis::max(): never).
Clock::time_point deadline_after(Clock::time_point now, Millis d) {
  const auto left = std::chrono::duration_cast<Millis>(Clock::time_point::max() - now);
  return d >= left ? Clock::time_point::max() : now + d;
}

}  // namespace

Node::Node(NodeOptions options) : options_(std::move(options)) {
  van_.set_send_buffer(options_.send_buffer_bytes);
}

Node::~Node() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> lock(queue_mu_);  // no lost wake-up
    queue_cv_.notify_all();
  }
  if (handler_thread_.joinable()) handler_thread_.join();
  if (!failure().empty()) van_.set_linger(200);  // Note [No hang at exit] (van.cpp)
}

void Node::log(const std::string& line) const {
  const std::string text = cat("[dtrain ps ", describe(), "] ", line);
  if (options_.log) {
    options_.log(text);
  } else {
    std::cerr << text << std::endl;
  }
}

std::string Node::describe() const {
  const int id = my_id_;
  if (options_.role == Role::kScheduler) {
    return cat("scheduler (", options_.scheduler_host, ":", options_.scheduler_port, ")");
  }
  const std::string rank = id == kEmpty ? std::string("?") : std::to_string(id_to_rank(id));
  return cat(role_name(options_.role), " ", rank, " (", options_.host, ":", bound_port_, ")");
}

std::string Node::describe(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return cat("node ", id);
  const NodeInfo& n = it->second;
  if (n.role == Role::kScheduler) return cat("scheduler (", host_port(n), ")");
  return cat(role_name(n.role), " ", id_to_rank(id), " (", host_port(n), ")");
}

bool Node::known(int id) const {
  if (id == kEmpty) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return nodes_.count(id) > 0;
}

int Node::group_size(int group) const {
  return ((group & kScheduler) ? 1 : 0) + ((group & kServerGroup) ? options_.num_servers : 0) +
         ((group & kWorkerGroup) ? options_.num_workers : 0);
}

std::vector<int> Node::group_ids(int group) const {
  std::vector<int> ids;
  if (group & kScheduler) ids.push_back(kScheduler);
  if (group & kServerGroup) {
    for (int r = 0; r < options_.num_servers; ++r) ids.push_back(server_rank_to_id(r));
  }
  if (group & kWorkerGroup) {
    for (int r = 0; r < options_.num_workers; ++r) ids.push_back(worker_rank_to_id(r));
  }
  return ids;
}

void Node::start() {
  const bool scheduler = options_.role == Role::kScheduler;
  const std::string address = cat(options_.scheduler_host, ":", options_.scheduler_port);
  if (scheduler) {
    bound_port_ =
        van_.bind(options_.bind_any ? "0.0.0.0" : options_.scheduler_host, options_.scheduler_port);
    my_id_ = kScheduler;
    NodeInfo self{Role::kScheduler, kScheduler, options_.scheduler_host, bound_port_, false, 0};
    {
      std::lock_guard<std::mutex> lock(mu_);
      nodes_[kScheduler] = self;
    }
    van_.connect(kScheduler, options_.scheduler_host, options_.scheduler_port, kScheduler);
  } else {
    bound_port_ = van_.bind(options_.host, options_.port);
    van_.connect(kScheduler, options_.scheduler_host, options_.scheduler_port, kEmpty);
    Message add;
    add.meta.control.cmd = Command::kAddNode;
    add.meta.control.node.push_back(
        NodeInfo{options_.role, kEmpty, options_.host, bound_port_, false, 0});
    add.meta.timestamp = new_timestamp();
    if (options_.worker_id >= 0) add.meta.body = cat(kWorkerIdPrefix, options_.worker_id);
    van_.send(kScheduler, add);
  }
  last_ack_ = Clock::now();
  if (handler_ || tick_) handler_thread_ = std::thread([this] { handler_loop(); });
  thread_ = std::thread([this] { receive_loop(); });

  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = Clock::now() + options_.connect_timeout;
  auto next_log = Clock::now() + kWaitLogPeriod;
  while (!ready_ && failure_.empty()) {
    const auto now = Clock::now();
    if (now >= deadline) {
      const std::string why =
          scheduler ? cat("the scheduler on ", address, " saw ", registered_.load(), " of ",
                          options_.num_servers + options_.num_workers, " nodes register within ",
                          seconds(options_.connect_timeout),
                          " s; start DMLC_NUM_SERVER servers and DMLC_NUM_WORKER workers")
                    : cat(describe(), " got no node table from the scheduler at ", address,
                          " within ", seconds(options_.connect_timeout),
                          " s; is the scheduler running there (DMLC_PS_ROOT_URI, "
                          "DMLC_PS_ROOT_PORT) and are all nodes started?");
      failure_ = why;
      failure_timed_out_ = true;
      throw TimeoutError(why);
    }
    if (now >= next_log) {
      lock.unlock();
      const auto waited =
          std::chrono::duration_cast<Millis>(now - deadline) + options_.connect_timeout;
      log(scheduler
              ? cat("waiting for nodes to register (", registered_.load(), " of ",
                    options_.num_servers + options_.num_workers, " after ", seconds(waited), " s)")
              : cat("waiting for the scheduler at ", address, " (up to ",
                    seconds(options_.connect_timeout), " s)"));
      lock.lock();
      next_log = now + kWaitLogPeriod;
    }
    cv_.wait_until(lock, std::min(deadline, next_log));
  }
  if (!failure_.empty()) throw_failure();
}

void Node::barrier(int group, Millis timeout) {
  std::lock_guard<std::mutex> one_at_a_time(barrier_mu_);
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) throw_failure();
    generation = barrier_generation_;
  }
  Message req;
  req.meta.request = true;
  req.meta.app_id = 0;
  req.meta.customer_id = 0;
  req.meta.control.cmd = Command::kBarrier;
  req.meta.control.barrier_group = group;
  req.meta.timestamp = new_timestamp();
  van_.send(kScheduler, req);
  std::unique_lock<std::mutex> lock(mu_);
  auto done = [&] { return barrier_generation_ != generation || !failure_.empty(); };
  if (timeout == Millis::max()) {
    cv_.wait(lock, done);
  } else if (!cv_.wait_for(lock, timeout, done)) {
    throw TimeoutError(cat(describe(), ": barrier of group ", group, " did not complete within ",
                           seconds(timeout), " s; a node of the group has not reached it"));
  }
  if (!failure_.empty()) throw_failure();
  // Everyone joins exactly two barriers of all groups, at start and at the
  // end (ps-lite's Start and Finalize): after the second, silence is no
  // longer death (Note [Failure detection]).
  if (group == kAllGroups && ++my_all_barriers_ == 2) finished_ = true;
}

bool Node::send(int recver, const Message& msg) { return van_.send(recver, msg); }

void Node::leave_worker_group() {
  Message note;
  note.meta.control.cmd = Command::kHeartbeat;
  note.meta.control.node.push_back(
      NodeInfo{options_.role, my_id_, options_.host, bound_port_, false, 0});
  note.meta.body = std::string(kLeaveBody);
  note.meta.timestamp = new_timestamp();
  van_.send(kScheduler, note);
}

void Node::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
}

std::string Node::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void Node::check_failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.empty()) throw_failure();
}

void Node::throw_failure() const {
  if (failure_timed_out_) throw TimeoutError(failure_);
  throw PeerLostError(failure_);
}

void Node::fail(const std::string& why, bool timed_out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty() || finished_) return;
    failure_ = why;
    failure_timed_out_ = timed_out;
  }
  cv_.notify_all();
  log(why);
  if (on_failure_) on_failure_(why);
}

void Node::receive_loop() {
  while (!stop_) {
    auto got = van_.recv(kTick);
    if (got) {
      if (!got->error.empty()) {
        log(cat("dropped a malformed message from ",
                got->msg.meta.sender == kEmpty ? std::string("an unnamed peer")
                                               : describe(got->msg.meta.sender),
                ": ", got->error));
      } else if (!got->msg.meta.control.empty()) {
        handle_control(got->msg);
        replay_early_data();
      } else if (handler_ && known(got->msg.meta.sender)) {
        queue_data(std::move(got->msg));  // data only from nodes of the table
      } else {
        keep_early_data(std::move(got->msg));
      }
      // Only nodes of the table that send heartbeats are watched (Note
      // [Failure detection]); a stranger's messages change nothing.
      const int sender = got->msg.meta.sender;
      if (options_.role == Role::kScheduler && sender != kScheduler && known(sender) &&
          (last_seen_.count(sender) || got->msg.meta.control.cmd == Command::kHeartbeat)) {
        last_seen_[sender] = Clock::now();
      }
    }
    periodic(Clock::now());
  }
}

// Note [Handlers off the receive thread].
void Node::queue_data(Message&& msg) {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    queue_.push_back(std::move(msg));
  }
  queue_cv_.notify_one();
}

void Node::handler_loop() {
  while (!stop_) {
    std::optional<Message> msg;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait_for(lock, kTick, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      if (!queue_.empty()) {
        msg = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (msg && handler_) {
      if (options_.before_data) options_.before_data(*msg);
      handler_(*msg);
    }
    if (tick_) tick_();
  }
}

void Node::handle_control(Message& msg) {
  const Meta& m = msg.meta;
  switch (m.control.cmd) {
    case Command::kAddNode:
      handle_add_node(msg);
      break;
    case Command::kBarrier:
      handle_barrier(msg);
      break;
    case Command::kHeartbeat:
      handle_heartbeat(msg);
      break;
    case Command::kTerminate:
      if (m.sender == kScheduler && options_.role != Role::kScheduler) {
        const std::string_view body = m.body;
        if (body.substr(0, kTimeoutPrefix.size()) == kTimeoutPrefix) {
          fail(std::string(body.substr(kTimeoutPrefix.size())), /*timed_out=*/true);
          break;
        }
        fail(body.substr(0, kLostPrefix.size()) == kLostPrefix
                 ? std::string(body.substr(kLostPrefix.size()))
                 : cat("the scheduler ended the job: ",
                       m.body.empty() ? "no reason given" : m.body));
      }
      break;
    default:
      log(cat("dropped a control message with unknown command ", static_cast<int>(m.control.cmd)));
  }
}

void Node::handle_add_node(Message& msg) {
  auto& ctrl = msg.meta.control;
  if (options_.role != Role::kScheduler) {
    if (msg.meta.sender != kScheduler) return;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (ready_) {
        lock.unlock();
        return apply_recovery_update(msg);  // Note [Node recovery]
      }
    }
    int me = kEmpty;
    for (const auto& n : ctrl.node) {
      if (n.hostname == options_.host && n.port == bound_port_) {
        me = n.id;
        recovered_ = n.is_recovery;
      }
    }
    if (me == kEmpty)
      return fail(cat(describe(), ": the scheduler's node table does not list ", options_.host, ":",
                      bound_port_));
    my_id_ = me;
    for (const auto& n : ctrl.node) {
      if (n.role == options_.role && n.id != me) continue;  // same role: never talk
      if (n.id == me) continue;
      van_.connect(n.id, n.hostname, n.port, me);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& n : ctrl.node) nodes_[n.id] = n;
      ready_ = true;
    }
    last_ack_ = Clock::now();
    cv_.notify_all();
    return;
  }
  // Scheduler: collect registrations (Note [Node lifecycle]).
  if (ready_ && options_.recovery() && ctrl.node.size() == 1 && msg.meta.sender == kEmpty) {
    return handle_late_add_node(ctrl.node[0]);  // Note [Node recovery]
  }
  if (ready_ || ctrl.node.size() != 1 || msg.meta.sender != kEmpty) {
    log("dropped an ADD_NODE after the job started (a restarted server rejoins only when "
        "DMLC_PS_SNAPSHOT_DIR is set on every process: docs/ps.md)");
    return;
  }
  NodeInfo n = ctrl.node[0];
  if (n.role == Role::kScheduler) return log("dropped an ADD_NODE from a second scheduler");
  int wish = -1;
  if (std::string_view(msg.meta.body).substr(0, kWorkerIdPrefix.size()) == kWorkerIdPrefix) {
    long long v = 0;
    if (parse_int(msg.meta.body.substr(kWorkerIdPrefix.size()), &v)) wish = static_cast<int>(v);
  }
  pending_.emplace_back(n, wish);
  registered_ = static_cast<int>(pending_.size());
  if (static_cast<int>(pending_.size()) < options_.num_servers + options_.num_workers) return;

  int servers = 0, workers = 0;
  for (const auto& [node, w] : pending_) (node.role == Role::kServer ? servers : workers)++;
  if (servers != options_.num_servers || workers != options_.num_workers) {
    return fail(cat("the scheduler expected ", options_.num_servers, " servers and ",
                    options_.num_workers, " workers but ", servers, " servers and ", workers,
                    " workers registered; check DMLC_NUM_SERVER, DMLC_NUM_WORKER and DMLC_ROLE"));
  }
  std::stable_sort(pending_.begin(), pending_.end(), [](const auto& a, const auto& b) {
    const int wa = a.second < 0 ? INT_MAX : a.second, wb = b.second < 0 ? INT_MAX : b.second;
    if (wa != wb) return wa < wb;
    if (a.first.hostname != b.first.hostname) return a.first.hostname < b.first.hostname;
    return a.first.port < b.first.port;
  });
  Message table;
  table.meta.control.cmd = Command::kAddNode;
  int server_rank = 0, worker_rank = 0;
  for (auto& [node, wish_rank] : pending_) {
    if (node.role == Role::kServer) {
      node.id = server_rank_to_id(server_rank++);
    } else {
      if (wish_rank >= 0 && wish_rank != worker_rank) {
        return fail(
            cat("the scheduler cannot give worker ", host_port(node), " DMLC_WORKER_ID=", wish_rank,
                ": worker ids must be distinct and below DMLC_NUM_WORKER=", options_.num_workers));
      }
      node.id = worker_rank_to_id(worker_rank++);
    }
    van_.connect(node.id, node.hostname, node.port, kScheduler);
    table.meta.control.node.push_back(node);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    table.meta.control.node.push_back(nodes_[kScheduler]);
    for (const auto& n : table.meta.control.node) nodes_[n.id] = n;
  }
  for (const auto& n : table.meta.control.node) {
    if (n.id == kScheduler) continue;
    table.meta.timestamp = new_timestamp();
    van_.send(n.id, table);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = true;
  }
  cv_.notify_all();
}

void Node::handle_barrier(Message& msg) {
  const int group = msg.meta.control.barrier_group;
  if (!msg.meta.request) {
    if (msg.meta.sender != kScheduler) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++barrier_generation_;
    }
    cv_.notify_all();
    return;
  }
  if (options_.role != Role::kScheduler) return;
  if (!known(msg.meta.sender)) {
    return log(
        cat("dropped a barrier request from ",
            msg.meta.sender == kEmpty ? std::string("an unnamed peer") : identity(msg.meta.sender),
            ", which is not in the node table"));
  }
  const int sender = msg.meta.sender;
  const int own_group =
      sender == kScheduler ? kScheduler : (is_server_id(sender) ? kServerGroup : kWorkerGroup);
  if (group <= 0 || group > kAllGroups || !(group & own_group)) {
    return log(
        cat("dropped a barrier request for group ", group, " from ", describe(msg.meta.sender)));
  }
  ++barrier_count_[group];
  barrier_senders_[group].insert(sender);
  // Note [Final barrier deadline]: the first worker in the final barrier
  // (the start barrier is released once) starts the clock.
  if (group == kAllGroups && all_barriers_done_ == 1 && is_worker_id(sender) &&
      first_in_final_ == kEmpty) {
    first_in_final_ = sender;
    final_deadline_ = deadline_after(Clock::now(), options_.finalize_timeout);
  }
  try_release(group, msg.meta.app_id, msg.meta.customer_id);
}

void Node::try_release(int group, int app_id, int customer_id) {
  // Workers that left (Note [Leaving early]) no longer count in the worker
  // group's barriers; every node still joins the final barrier of all groups.
  const int departed = group == kWorkerGroup ? static_cast<int>(departed_.size()) : 0;
  if (barrier_count_[group] == 0 || barrier_count_[group] < group_size(group) - departed) return;
  barrier_count_[group] = 0;
  barrier_senders_[group].clear();
  if (group == kAllGroups && ++all_barriers_done_ == 2) {
    first_in_final_ = kEmpty;  // released: no deadline to watch
    // The final barrier: the job is ending, silence is no longer death.
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
  }
  Message res;
  res.meta.request = false;
  res.meta.app_id = app_id;
  res.meta.customer_id = customer_id;
  res.meta.control.cmd = Command::kBarrier;
  res.meta.control.barrier_group = group;
  for (int id : group_ids(group)) {
    if (group == kWorkerGroup && departed_.count(id)) continue;
    res.meta.timestamp = new_timestamp();
    van_.send(id, res);
  }
}

void Node::handle_heartbeat(Message& msg) {
  if (options_.role != Role::kScheduler) {
    if (msg.meta.sender == kScheduler) last_ack_ = Clock::now();
    return;
  }
  if (!known(msg.meta.sender)) return;
  if (msg.meta.body == kLeaveBody && is_worker_id(msg.meta.sender)) {
    departed_.insert(msg.meta.sender);
    log(cat(describe(msg.meta.sender), " has finished; worker barriers go on without it"));
    try_release(kWorkerGroup, 0, 0);
  }
  Message ack;
  ack.meta.control.cmd = Command::kHeartbeat;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ack.meta.control.node.push_back(nodes_[kScheduler]);
  }
  ack.meta.timestamp = new_timestamp();
  van_.send(msg.meta.sender, ack);
}

void Node::periodic(Clock::time_point now) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ready_ || finished_ || !failure_.empty()) return;
  }
  if (options_.role == Role::kScheduler && final_barrier_expired(now)) return;
  if (options_.heartbeat_interval.count() <= 0) return;
  if (options_.role != Role::kScheduler) {
    if (now >= next_heartbeat_) {
      Message hb;
      hb.meta.control.cmd = Command::kHeartbeat;
      hb.meta.control.node.push_back(
          NodeInfo{options_.role, my_id_, options_.host, bound_port_, false, 0});
      hb.meta.timestamp = new_timestamp();
      van_.send(kScheduler, hb);
      next_heartbeat_ = now + options_.heartbeat_interval;
    }
    if (now - last_ack_ > options_.heartbeat_timeout) {
      fail(cat(describe(), ": the scheduler (", options_.scheduler_host, ":",
               options_.scheduler_port, ") has not answered heartbeats for ",
               seconds(options_.heartbeat_timeout), " s; it died or the network is down"));
    }
    return;
  }
  std::vector<int> lost;
  for (const auto& [id, seen] : last_seen_) {
    if (id == kScheduler || now - seen <= options_.heartbeat_timeout) continue;
    if (options_.recovery() && is_server_id(id)) {
      lost.push_back(id);  // Note [Node recovery]: wait for a replacement
      continue;
    }
    terminate_job(id,
                  cat(describe(id), " sent no heartbeat for ", seconds(options_.heartbeat_timeout),
                      " s: it died or hangs; ending the job"));
    return;
  }
  for (int id : lost) server_lost(id, now);
  if (options_.recovery()) check_recovery(now);
}

void Node::final_barrier() {
  const Millis bound = options_.finalize_timeout >= Millis::max() - options_.heartbeat_timeout
                           ? Millis::max()
                           : options_.finalize_timeout + options_.heartbeat_timeout;
  try {
    barrier(kAllGroups, bound);
  } catch (const TimeoutError&) {
    check_failure();  // the scheduler's verdict, naming the late nodes
    throw TimeoutError(cat(describe(), ": the job's final barrier did not complete within ",
                           seconds(bound),
                           " s: another node has not called close() and the scheduler did not "
                           "say which (PS_FINALIZE_TIMEOUT)"));
  }
}

// Note [Final barrier deadline].
bool Node::final_barrier_expired(Clock::time_point now) {
  if (first_in_final_ == kEmpty || now < final_deadline_) return false;
  std::vector<std::string> late;
  const std::set<int>& arrived = barrier_senders_[kAllGroups];
  for (int id : group_ids(kAllGroups)) {
    if (!arrived.count(id)) late.push_back(describe(id));
  }
  if (late.empty()) return false;  // defensive: a release resets first_in_final_
  terminate_job(
      kEmpty,
      cat("the job's end timed out: ", join(late, ", "), late.size() == 1 ? " has" : " have",
          " not reached the final barrier (", "KVStore::close()) within ",
          seconds(options_.finalize_timeout), " s after ", describe(first_in_final_),
          " did: alive but hung, or never calling close(); ending the job (raise "
          "PS_FINALIZE_TIMEOUT if workers finish that far apart)"),
      /*timed_out=*/true);
  return true;
}

void Node::terminate_job(int id, const std::string& why, bool timed_out) {
  Message term;
  term.meta.control.cmd = Command::kTerminate;
  term.meta.body = cat(timed_out ? kTimeoutPrefix : kLostPrefix, why);
  std::vector<int> others;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [other, ignored] : nodes_) others.push_back(other);
  }
  for (int other : others) {
    if (other == id || other == kScheduler) continue;
    term.meta.timestamp = new_timestamp();
    van_.send(other, term);
  }
  fail(why, timed_out);
}

}  // namespace dtrain::ps
