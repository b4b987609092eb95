#pragma once
// Rendezvous: how the agents of a job (one per node) agree on who takes part in
// a round, in which order, and where the round's workers meet. The elastic
// agent (src/launch/agent/agent.cpp) runs one round per attempt:
//
//   auto rdzv = make_rendezvous(config);          // joins nothing yet
//   RendezvousInfo round = rdzv->next_rendezvous(); // blocks, bounded
//   ... start workers with round.base_rank(), round.world_size(),
//       round.master_addr / master_port ...
//   while (running) if (rdzv->num_nodes_waiting() > 0) restart;  // new node
//   rdzv->set_closed();   // job finished: tell everyone
//
// Two layers:
//  * RendezvousBackend: a few key/value operations with compare-and-set, over
//    a c10d store (the embedded TCP store, "c10d" and "static") or etcd's v3
//    API ("etcd"). Every key the rendezvous uses goes through it.
//  * Rendezvous: the protocol (torchrun's dynamic rendezvous, see
//    shared/CONTRACTS.md): rounds, MIN/MAX nodes, last call, join timeout,
//    heartbeats and dead-node detection, node ranks.
//
// All calls are bounded by the timeouts in RendezvousConfig and throw
// dtrain::TimeoutError / StoreError / Error with messages that name the
// endpoint, the run id, the round, and the nodes that did or did not arrive.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/errors.h"
#include "dtrain/store.h"

namespace dtrain::detail {

/// Key/value operations the rendezvous needs. Implementations are
/// thread-safe; every call is bounded by the backend's own timeout and throws
/// StoreError (unreachable, I/O error) or TimeoutError naming describe().
class RendezvousBackend {
 public:
  virtual ~RendezvousBackend() = default;

  /// "c10d store at 10.0.0.1:29400" / "etcd at 127.0.0.1:2379", for messages.
  virtual std::string describe() const = 0;

  /// The value at `key`, or nullopt when absent. Never waits for the key.
  virtual std::optional<std::string> get(const std::string& key) = 0;

  /// Unconditional write.
  virtual void set(const std::string& key, const std::string& value) = 0;

  /// Atomically writes `desired` when the stored value equals `expected`
  /// (nullopt: the key must be absent). Returns true when written; otherwise
  /// `*current` (when not null) receives the value now stored (nullopt: absent).
  virtual bool compare_set(const std::string& key, const std::optional<std::string>& expected,
                           const std::string& desired, std::optional<std::string>* current) = 0;

  /// Atomically adds `delta` to the integer at `key` (absent: 0) and returns
  /// the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  /// Liveness of one node: heartbeat() says "`node_key` is alive for at least
  /// `ttl` from now"; alive() is false once a heartbeat has not been renewed
  /// within its ttl (or was never given). Store backends keep a timestamp;
  /// etcd attaches the key to a lease of `ttl` and keeps it alive.
  virtual void heartbeat(const std::string& node_key, std::chrono::milliseconds ttl) = 0;
  virtual bool alive(const std::string& node_key, std::chrono::milliseconds ttl) = 0;

  /// Removes `node_key`'s liveness record (a node leaving cleanly).
  virtual void forget(const std::string& node_key) = 0;
};

/// Settings of one job's rendezvous (torchrun's --rdzv-* flags).
struct RendezvousConfig {
  /// "static" (fixed node ranks, --node-rank), "c10d" (dynamic, over an
  /// embedded TCP store) or "etcd" (dynamic, over etcd v3).
  std::string backend = "c10d";
  /// host:port of the store / etcd ("static": the master's address and port).
  /// c10d: the agent on that host hosts the store when the port is free
  /// there (torchrun's is_host), the others connect.
  std::string endpoint;
  /// Every key is under "dtrain/rdzv/<run_id>/" (etcd: under key_prefix).
  std::string run_id = "none";
  int min_nodes = 1;
  int max_nodes = 1;
  /// "static" only: this node's rank in [0, max_nodes). Ignored otherwise.
  int node_rank = -1;
  /// Worker processes this node contributes (--nproc-per-node).
  int local_world_size = 1;
  /// What every node of a round must be started with, as the launcher
  /// writes it (`LaunchOptions::Recovery::kLive`); no tabs or newlines. A
  /// node whose value differs from another's fails next_rendezvous() with
  /// InvalidArgument naming both, on every node of the round (a late node
  /// too), instead of starting workers that could never meet. Empty on
  /// every node: nothing is checked.
  std::string settings;
  /// The address other nodes reach this node's hosted stores at. Empty: the
  /// local address of the route to the endpoint's host (loopback when the
  /// endpoint is local).
  std::string local_addr;
  /// Longest wait for a round to complete (rdzv-conf join_timeout, s).
  std::chrono::milliseconds join_timeout = std::chrono::seconds(600);
  /// Wait after MIN nodes joined for more to arrive (last_call_timeout).
  std::chrono::milliseconds last_call_timeout = std::chrono::seconds(30);
  /// Heartbeat period; a node missing `missed_heartbeats` beats is dead.
  std::chrono::milliseconds heartbeat_interval = std::chrono::seconds(5);
  int missed_heartbeats = 3;
  /// Deadline of every single backend call (connect, get, CAS).
  std::chrono::milliseconds backend_timeout = std::chrono::seconds(60);
  /// etcd only: key prefix (rdzv-conf etcd_prefix), default "/dtrain".
  std::string etcd_prefix = "/dtrain";

  /// Fills the fields above from torchrun's --rdzv-conf "k=v,k=v" text:
  /// join_timeout, last_call_timeout, close_timeout (accepted, unused),
  /// heartbeat_interval, missed_heartbeats, timeout (= backend_timeout),
  /// is_host (c10d: "true"/"false" forces hosting), local_addr, etcd_prefix.
  /// Seconds may be fractional. Throws InvalidArgument naming an unknown key
  /// or a malformed value.
  void apply_conf(const std::string& rdzv_conf);
  /// c10d: explicit is_host from --rdzv-conf; nullopt: decide by address.
  std::optional<bool> is_host;
  /// c10d only: the round's workers meet in the rendezvous store itself
  /// (MASTER_ADDR:MASTER_PORT = the endpoint) under
  /// RendezvousInfo::worker_key_prefix, instead of a fresh store hosted by
  /// node rank 0. Only for workers that keep every key under that prefix
  /// (live recovery: LiveOptions::key_prefix). The workers' store then lives
  /// wherever the endpoint is: off the workers' nodes when the user runs it
  /// there (`dtrain store`), so losing node 0 does not lose it.
  bool workers_share_store = false;
  /// Live recovery: a node that arrives while a round runs (or comes after
  /// MAX) joins that round as a late node (RendezvousInfo::late) instead of
  /// waiting for a next round that a live job never starts. It is admitted
  /// once fewer than max_nodes of the round's nodes are alive (participants
  /// and late nodes heartbeating and not finished), in order of arrival; the
  /// running agents are not asked to restart. Its workers must join the
  /// running job themselves (dtrain/live.h's LiveOptions::join).
  bool join_running_round = false;

  /// Polled (about every 100 ms) while next_rendezvous() waits; when it
  /// returns true the wait ends with CancelledRendezvous. exit_barrier() and
  /// linger() also poll it and return early. The agent uses it to
  /// answer SIGINT/SIGTERM promptly. Empty: never cancelled.
  std::function<bool()> cancelled;
};

/// Thrown by next_rendezvous() when RendezvousConfig::cancelled said so.
class CancelledRendezvous : public Error {
 public:
  using Error::Error;
};

/// The outcome of one completed round, identical on every node except for
/// node_rank and hosted_store.
struct RendezvousInfo {
  int round = 0;
  /// This node's rank in the round (GROUP_RANK) and how many nodes took part.
  int node_rank = 0;
  int num_nodes = 1;
  /// Each node's local world size, indexed by node rank.
  std::vector<int> local_world_sizes;
  /// Each node's address (local_addr), indexed by node rank, for messages.
  std::vector<std::string> node_addrs;
  /// Where the round's workers meet (MASTER_ADDR / MASTER_PORT): a fresh TCP
  /// store hosted by the node of rank 0, so no key of an earlier round is
  /// seen; with RendezvousConfig::workers_share_store, the endpoint's store.
  std::string master_addr;
  int master_port = 0;
  /// With workers_share_store: "dtrain/rdzv/<run_id>/r<round>/workers", the
  /// prefix under which this round's workers keep their keys. Else empty.
  std::string worker_key_prefix;
  /// join_running_round: k > 0 when this node is the k-th late node of the
  /// running round: not one of its num_nodes participants (node_rank is
  /// num_nodes + k - 1; local_world_sizes and node_addrs list only the
  /// participants), its workers join the job already running there.
  int late = 0;
  /// A late node's base_rank(): after the participants' ranks and the late
  /// nodes' before it (as if each had this node's local world size). Its
  /// workers' RANK is not a rank of the job's first group (the live
  /// library maps them to logical ranks); it only names them uniquely.
  int late_base_rank = 0;
  /// The store above when this node hosts it (node_rank 0), else null. Keep
  /// it alive until the round's workers have ended.
  std::shared_ptr<TcpStoreServer> hosted_store;

  /// Global rank of this node's local rank 0: sum of local_world_sizes
  /// before node_rank (a late node: late_base_rank).
  int base_rank() const;
  /// Sum of all local_world_sizes.
  int world_size() const;
};

/// One agent's handle on the job's rendezvous. Not thread-safe (one agent
/// thread calls it); heartbeats are sent from an internal thread that starts
/// at the first next_rendezvous() and stops in shutdown() / the destructor.
class Rendezvous {
 public:
  virtual ~Rendezvous() = default;

  /// Joins the next round and blocks until it completes: MAX nodes joined, or
  /// MIN joined and the last call expired. A node arriving while a round is
  /// complete waits for the next round (see num_nodes_waiting()), or, with
  /// join_running_round, joins the running one as a late node. Throws
  /// TimeoutError after join_timeout naming the endpoint, the round, the
  /// nodes that arrived and how many were needed; Error when the rendezvous
  /// was closed (the job finished or gave up).
  virtual RendezvousInfo next_rendezvous() = 0;

  /// Nodes waiting for the next round because they arrived (or came back
  /// after a failure) while the current round was running. The agent restarts
  /// its workers to admit them. Also 1 when the job moved on to a later round
  /// without this node (it was taken for dead): restarting rejoins it. Cheap:
  /// two backend reads, plus one or two per registered waiter while any wait.
  virtual int num_nodes_waiting() = 0;

  /// True when a participant of the current round has stopped heartbeating
  /// (its agent died, or shut down without closing): the survivors should
  /// re-rendezvous. Reads one flag; at most once per heartbeat interval it
  /// also checks the next node in rank order (see Note [Rendezvous protocol]).
  virtual bool lost_participants() = 0;

  /// True only when a participant of the current round was found dead (it
  /// stopped heartbeating; recorded by the node watching it, or seen by this
  /// one now), not when the job merely moved on to a later round, which
  /// lost_participants() also reports. The agent asks it to tell a lost node
  /// from a failure elsewhere. Same cost as lost_participants().
  virtual bool participant_lost() = 0;

  /// Records `text` as the first failure of the current round, unless
  /// another node recorded one first. Best effort; call while this node is a
  /// participant (before next_rendezvous() or shutdown()).
  virtual void record_failure(const std::string& text) = 0;
  /// The first failure recorded in `round` (RendezvousInfo::round).
  virtual std::optional<std::string> first_failure(int round) = 0;

  /// Called by a node whose workers all succeeded: waits until every
  /// participant of the round (and every late node admitted into it) has
  /// called it, so the stores this node hosts outlive the others' last
  /// steps. False when `timeout` passed first. With `skip_dead` (live
  /// recovery, where the job goes on without a lost node) a node that
  /// stopped heartbeating counts as arrived.
  virtual bool exit_barrier(std::chrono::milliseconds timeout, bool skip_dead = false) = 0;

  /// When this node hosts the rendezvous store (c10d on the endpoint's host,
  /// static node 0), waits until every other participant (and admitted late
  /// node) of the last round has left (shutdown) or stopped heartbeating, at
  /// most `timeout`, so that
  /// they can still read the final state (closed, first failure). Returns at
  /// once on other nodes.
  virtual void linger(std::chrono::milliseconds timeout) = 0;

  /// Marks the job finished (or failed for good): nodes waiting or joining
  /// later get an Error instead of a new round.
  virtual void set_closed() = 0;
  virtual bool is_closed() = 0;

  /// Leaves: stops heartbeating and removes this node from any round it is
  /// waiting in. Idempotent; the destructor calls it.
  virtual void shutdown() = 0;

  /// "c10d store at host:port" etc., for messages.
  virtual std::string describe() const = 0;

  /// True when this node's agent hosts the rendezvous store (c10d on the
  /// endpoint's host, static node 0): losing this node loses the store.
  virtual bool hosts_store() const { return false; }
};

/// The rendezvous `config` asks for. Hosts or connects to the c10d store, or
/// connects to etcd; throws InvalidArgument for a bad config (unknown
/// backend, malformed endpoint, MIN > MAX, static without node_rank) and
/// StoreError / TimeoutError when the endpoint cannot be reached in
/// backend_timeout (the message names host:port and says what to check).
std::unique_ptr<Rendezvous> make_rendezvous(const RendezvousConfig& config);

/// The rendezvous protocol over any backend (used by make_rendezvous and by
/// tests with an in-memory backend). `node_id` must be unique in the job;
/// empty: "<hostname>_<pid>_<random>". Node ranks follow the order of arrival
/// in the round; with config.backend == "static" they are config.node_rank.
/// The round's node rank 0 starts the workers' TcpStoreServer (free port,
/// reported as local_addr) only once the round is complete. Validates
/// `config` like make_rendezvous (except the endpoint, which may be empty
/// here: local_addr then defaults to 127.0.0.1).
std::unique_ptr<Rendezvous> make_dynamic_rendezvous(std::shared_ptr<RendezvousBackend> backend,
                                                    const RendezvousConfig& config,
                                                    std::string node_id = "");

/// Backends.
/// Over a c10d store (TCP store client or server's client, memory store).
std::shared_ptr<RendezvousBackend> make_store_backend(StorePtr store, std::string description);
/// Over etcd's v3 JSON API (HTTP/1.1) at host:port; every request bounded by
/// `timeout`. Throws StoreError naming host:port when etcd does not answer.
std::shared_ptr<RendezvousBackend> make_etcd_backend(const std::string& host, int port,
                                                     std::string key_prefix,
                                                     std::chrono::milliseconds timeout);

/// torchrun's port of the c10d rendezvous store when the endpoint names none.
inline constexpr int kC10dDefaultPort = 29400;

/// "host:port" → {host, port}; a missing port gets `default_port`. Throws
/// InvalidArgument naming the text.
std::pair<std::string, int> parse_endpoint(const std::string& endpoint, int default_port);

}  // namespace dtrain::detail
