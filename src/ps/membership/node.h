#pragma once
// One node of a parameter-server job: the scheduler handshake, barriers,
// heartbeats and failure detection over ps-lite's protocol (Van).
//
// Note [Node lifecycle]
// start(): the node binds its ROUTER, opens a DEALER to the scheduler and
// sends ADD_NODE (role, host, port). ZeroMQ queues the message until the
// scheduler is up, so a node started first simply waits for the node table,
// logging every few seconds, and fails after connect_timeout naming the
// address it tried. The scheduler collects num_servers + num_workers
// ADD_NODEs, sorts each role by (requested worker id, host, port), assigns
// ids (server r -> 2r+8, worker r -> 2r+9), opens a DEALER to each and sends
// everyone the table (plus itself, id 1); each node finds itself by
// host:port, reopens its scheduler DEALER with identity "ps<id>" and opens
// DEALERs to the nodes of the other role, as ps-lite does. Then every node
// joins the start barrier (group 7) and, at the end, the final barrier
// (group 7) after which it stops: the scheduler and servers end when every
// worker has finished.
//
// Note [Leaving early]
// A worker that finishes while others still train (an uneven last epoch)
// must not hang them. Its close() tells every server (command
// kWorkerLeaving, a dtrain extension ps-lite's and MXNet's servers just
// acknowledge), which from then on complete sync rounds with one push fewer,
// and the scheduler (a HEARTBEAT with body "dtrain-leave", which ps-lite's
// scheduler takes for a plain heartbeat), whose worker-group barriers then
// count one worker fewer. The worker then waits in the final barrier of all
// groups, heartbeating, until the last worker closes.
//
// Note [Failure detection]
// ps-lite sends no heartbeats by default and never notices a dead node.
// Here every non-scheduler node sends HEARTBEAT to the scheduler every
// heartbeat_interval and the scheduler acknowledges each one. The scheduler
// declares a node dead when it has heard nothing from it for
// heartbeat_timeout, and then sends every other node TERMINATE with a body
// naming the dead node's role, rank and host ("dtrain-lost: ..."): dtrain
// nodes fail with PeerLostError carrying that text. A node that hears no
// acknowledgement for heartbeat_timeout declares the scheduler dead. Nodes
// that never sent a heartbeat (ps-lite programs, whose heartbeats are off by
// default) are not monitored, so they interoperate. Monitoring stops once a
// node has entered the final barrier's release, so a normal end is never
// mistaken for a death. With a snapshot directory a dead *server* is
// waited for instead, bounded (Note [Node recovery], recovery.cpp).
// Heartbeats and their acknowledgements are independent of handler work
// (Note [Handlers off the receive thread]).
//
// Note [Handlers off the receive thread]
// The receive thread reads the ROUTER, handles the control messages (node
// table, barriers, heartbeats and their acknowledgements, TERMINATE), sends
// this node's heartbeats and checks the deadlines; it never runs the data
// handler. Data messages go through a queue (a mutex and a condition
// variable) to the handler thread, ps-lite's customer thread, which runs the
// data handler and the tick. So a node whose handler is busy for longer than
// heartbeat_timeout (a big key's sum, a snapshot write of a big shard, a
// starved CPU) still heartbeats and still hears the scheduler's
// acknowledgements; when both ran on one thread such a node was declared
// dead. A heartbeat thread alone, as ps-lite has, would not do here: the
// acknowledgements arrive on the ROUTER too, so a node whose receive thread
// sat in a handler would declare the scheduler dead instead. ZeroMQ sockets
// are not thread-safe: the ROUTER is used by the receive thread only, every
// DEALER only under the Van's mutex, held for a non-blocking zmq_send and
// never across a wait on the network; the handler thread reaches sockets
// only through Van::send, so the queue needs no ZeroMQ pipe. The messages of
// one sender are handled in the order received; a control message (a
// barrier's release) may overtake data received before it, which nothing
// relies on: every request is matched to its answer by timestamp and waited
// on through its handle. A handler that hangs for good keeps its node
// heartbeating: the workers' deadline on every push and pull
// (KVStoreOptions::timeout) bounds it, naming the key and the server.
//
// Note [Final barrier deadline]
// Servers and the scheduler wait in the final barrier for the whole job, so
// it cannot have a fixed deadline. Instead the scheduler starts one when the
// first worker reaches it (KVStore::close()): finalize_timeout later (default
// 600 s, PS_FINALIZE_TIMEOUT) it ends the job, telling every node (TERMINATE
// with a "dtrain-timeout:" body, so they fail with TimeoutError) which nodes
// have not arrived: a worker that is alive, heartbeating, but hung or never
// calling close() no longer holds everyone forever. The generous default
// covers workers that legitimately finish apart (an uneven last epoch, a
// slower dist_async worker). Workers also bound their own wait, by
// finalize_timeout + heartbeat_timeout (the scheduler's verdict arrives
// first), in case the scheduler is ps-lite's, which has no such deadline.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ps/wire/protocol.h"
#include "ps/wire/van.h"

namespace dtrain::ps {

using Millis = std::chrono::milliseconds;

/// `d` in seconds, as log lines and errors print a timeout.
inline double seconds(Millis d) { return static_cast<double>(d.count()) / 1000.0; }

/// Options of one node; resolved from DMLC_* by options_from_env (env.cpp).
struct NodeOptions {
  Role role = Role::kWorker;
  /// Where the scheduler listens (DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT).
  std::string scheduler_host = "127.0.0.1";
  int scheduler_port = 9091;
  int num_servers = 1;
  int num_workers = 1;
  /// The host this node advertises to the others (DMLC_NODE_HOST, else the
  /// address of DMLC_INTERFACE, else the scheduler host's address family's
  /// loopback for a local job). Ignored by the scheduler.
  std::string host = "127.0.0.1";
  /// The port this node binds; 0 = an ephemeral one. Ignored by the scheduler.
  int port = 0;
  /// The scheduler binds 0.0.0.0 instead of scheduler_host (DMLC_USE_KUBERNETES=1).
  bool bind_any = false;
  /// A worker's requested rank (DMLC_WORKER_ID); -1: assigned by the scheduler.
  int worker_id = -1;
  /// Heartbeat period and the silence after which a node is declared dead.
  Millis heartbeat_interval{1000};
  Millis heartbeat_timeout{5000};
  /// How long start() waits for the scheduler's node table.
  Millis connect_timeout{60000};
  /// Note [Node recovery] (recovery.cpp): non-empty turns recovery on
  /// (DMLC_PS_SNAPSHOT_DIR): servers snapshot there, the scheduler waits
  /// recovery_timeout (PS_RECOVERY_TIMEOUT) for a dead server's replacement
  /// instead of ending the job, workers re-send what it had not answered.
  std::string snapshot_dir;
  Millis recovery_timeout{60000};
  bool recovery() const { return !snapshot_dir.empty(); }
  /// Note [Final barrier deadline]: how long the job's end waits, after the
  /// first worker reached the final barrier, for every other node
  /// (PS_FINALIZE_TIMEOUT). Millis::max(): no deadline.
  Millis finalize_timeout{600000};
  /// SO_SNDBUF of the connections to other nodes (KVStoreOptions::
  /// send_buffer_bytes); 0: the kernel's autotuning.
  int send_buffer_bytes = 0;
  /// Test hook: called on the handler thread before each data message is
  /// handled (tests stall a server's handler with it). Empty: none.
  std::function<void(const Message&)> before_data;
  /// Log prefix and destination; empty prefix: derived from role and rank.
  std::function<void(const std::string&)> log;
};

class Node {
 public:
  /// Handles a data message (no control) on the handler thread (Note
  /// [Handlers off the receive thread]). May take long (heartbeats go on),
  /// but must not wait on the network.
  using DataHandler = std::function<void(Message&)>;

  explicit Node(NodeOptions options);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// Must be set before start().
  void set_data_handler(DataHandler handler) { handler_ = std::move(handler); }
  /// Called on the handler thread, as the data handler, after each data
  /// message and at least every 50 ms (servers' SSP deadlines). Must not
  /// wait on the network. Set before start().
  void set_tick_handler(std::function<void()> tick) { tick_ = std::move(tick); }

  /// Registers with the scheduler and waits (connect_timeout) for the node
  /// table. Throws StoreError (port in use), TimeoutError naming the
  /// scheduler address, PeerLostError.
  void start();

  /// Blocks until every node of `group` (a sum of kScheduler, kServerGroup,
  /// kWorkerGroup) has called barrier(group). Throws TimeoutError after
  /// `timeout` (Millis::max(): no deadline of its own; failure detection and
  /// the scheduler's final-barrier deadline still end it), PeerLostError when
  /// a node dies, and TimeoutError naming the late nodes when the scheduler
  /// ends the job over its final-barrier deadline (Note [Final barrier
  /// deadline]). One barrier at a time per node.
  void barrier(int group, Millis timeout);

  /// Worker: the job's final barrier (ps-lite's Finalize), bounded by
  /// finalize_timeout + heartbeat_timeout even when the scheduler sets no
  /// deadline (ps-lite's); TimeoutError names the late nodes when the
  /// scheduler did, else says it did not.
  void final_barrier();

  /// Worker: tells the scheduler this worker has finished, so the remaining
  /// workers' barriers no longer wait for it (Note [Leaving early]). The
  /// worker must still join the final barrier of all groups.
  void leave_worker_group();

  /// Queues a message to node `recver`. False if there is no such peer.
  bool send(int recver, const Message& msg);

  /// Stops heartbeats and monitoring (after the final barrier). Idempotent.
  void finish();

  /// Writes "[dtrain ps <describe()>] <line>" to the options' log, or to
  /// stderr without one.
  void log(const std::string& line) const;

  /// The failure text ("" while healthy), and a wait for one.
  std::string failure() const;
  /// Throws the failure, if any: PeerLostError with its text, or
  /// TimeoutError when the scheduler ended the job over a deadline.
  void check_failure() const;
  /// Called once when a failure is first recorded: on the receive thread, or
  /// on the handler thread for a handler's abort().
  void set_failure_callback(std::function<void(const std::string&)> cb) {
    on_failure_ = std::move(cb);
  }

  /// Called on the receive thread after a dead server's replacement has
  /// joined (Note [Node recovery]) and this node has reconnected to it.
  void set_recovery_callback(std::function<void(int id)> cb) { on_recovery_ = std::move(cb); }
  /// True when this node replaced a dead one: it skips the start barrier.
  bool recovered() const { return recovered_; }
  /// Records a failure of this node's own work (as a lost peer would) and
  /// wakes every wait. Thread-safe.
  void abort(const std::string& why) { fail(why); }

  int my_id() const { return my_id_; }
  int rank() const { return id_to_rank(my_id_); }
  const NodeOptions& options() const { return options_; }
  /// "worker 1 (127.0.0.1:4312)": how this node names itself in messages.
  std::string describe() const;
  /// The node table entry of `id`, described as describe() does.
  std::string describe(int id) const;
  int new_timestamp() { return timestamp_.fetch_add(1); }
  uint64_t bytes_sent() const { return van_.bytes_sent(); }

 private:
  void receive_loop();
  void handler_loop();             // Note [Handlers off the receive thread]
  void queue_data(Message&& msg);  // to the handler thread
  void throw_failure() const;      // under mu_, failure_ not empty
  void handle_control(Message& msg);
  void handle_add_node(Message& msg);
  void handle_barrier(Message& msg);
  void handle_heartbeat(Message& msg);
  void periodic(std::chrono::steady_clock::time_point now);
  bool final_barrier_expired(std::chrono::steady_clock::time_point now);  // scheduler
  void fail(const std::string& why, bool timed_out = false);
  int group_size(int group) const;
  bool known(int id) const;                                  // in the node table
  void try_release(int group, int app_id, int customer_id);  // scheduler
  std::vector<int> group_ids(int group) const;
  // Scheduler: TERMINATE to every node but `dead_id` (kEmpty: to all);
  // `timed_out`: a deadline passed (TimeoutError), not a death.
  void terminate_job(int dead_id, const std::string& why, bool timed_out = false);
  // Note [Node recovery], recovery.cpp.
  void handle_late_add_node(const NodeInfo& node);  // scheduler
  void server_lost(int id, std::chrono::steady_clock::time_point now);
  void match_replacements(std::chrono::steady_clock::time_point now);
  void check_recovery(std::chrono::steady_clock::time_point now);
  void apply_recovery_update(const Message& msg);  // others
  void keep_early_data(Message msg);
  void replay_early_data();

  NodeOptions options_;
  Van van_;
  DataHandler handler_;
  std::function<void()> tick_;
  std::function<void(const std::string&)> on_failure_;
  std::function<void(int)> on_recovery_;
  std::atomic<bool> recovered_{false};
  std::atomic<int> my_id_{kEmpty};
  std::atomic<int> timestamp_{0};
  int bound_port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  // Note [Handlers off the receive thread]: data messages to the handler thread.
  std::thread handler_thread_;
  std::mutex queue_mu_;  // guards queue_
  std::condition_variable queue_cv_;
  std::deque<Message> queue_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool ready_ = false;
  bool finished_ = false;
  std::string failure_;
  bool failure_timed_out_ = false;  // failure_ is a deadline (TimeoutError)
  std::map<int, NodeInfo> nodes_;   // id -> node (after the table)
  uint64_t barrier_generation_ = 0;
  std::mutex barrier_mu_;  // one barrier at a time

  // Receive-thread state.
  std::vector<std::pair<NodeInfo, int>> pending_;  // scheduler: ADD_NODEs, requested rank
  std::map<int, int> barrier_count_;               // scheduler: group -> arrivals
  std::map<int, std::set<int>> barrier_senders_;   // scheduler: group -> who arrived
  std::set<int> departed_;                         // scheduler: workers that have finished
  std::atomic<int> registered_{0};                 // scheduler: pending_.size(), for messages
  std::map<int, std::chrono::steady_clock::time_point> last_seen_;  // scheduler: heartbeating nodes
  std::chrono::steady_clock::time_point last_ack_{};                // others
  std::chrono::steady_clock::time_point next_heartbeat_{};
  int all_barriers_done_ = 0;  // scheduler: released group-7 barriers; the 2nd is the final one
  int my_all_barriers_ = 0;    // this node's completed group-7 barriers (under barrier_mu_)
  // Scheduler, Note [Final barrier deadline]: the first worker in the final
  // barrier and when the others must have joined it (unset: none yet).
  int first_in_final_ = kEmpty;
  std::chrono::steady_clock::time_point final_deadline_{};
  // Scheduler, Note [Node recovery]: dead servers -> when declared dead;
  // replacements waiting for one -> when they registered.
  std::map<int, std::chrono::steady_clock::time_point> dead_servers_;
  std::vector<std::pair<NodeInfo, std::chrono::steady_clock::time_point>> replacements_;
  // A replacement: data that arrived before its node table (Note [Node recovery]).
  std::vector<Message> early_data_;
};

}  // namespace dtrain::ps
