// The elastic agent: the loop behind dtrain::launch() (contract in
// include/dtrain/launch.h).
//
// Note [Agent loop]
// One agent per node runs rounds. Agent::run() is the loop, one named step
// per line:
//
//   join_round()    the rendezvous fixes this node's rank and the global ranks
//   run_workers()   start the local workers against the round's fresh store,
//                   watch them until they end or the group changes
//   observe()       what happened: the facts decide_round() needs
//   decide_round()  restart (spending a restart or not), give up, finish or
//                   stop: a pure function (round_decision.h), tested alone
//   carry_out()     do it; true when the run is over
//
// A round ends in one of four ways:
//  * every local worker exited 0 → the node is done; it waits (bounded by
//    LaunchOptions::exit_barrier_timeout) at the exit barrier so the stores it
//    hosts outlive the other nodes' last steps;
//  * a worker failed → stop the others; with restarts left, join the next
//    round (the other agents see a node waiting and restart too), else close
//    the rendezvous so every node stops, and report the root cause (the
//    earliest failure by its error record's timestamp). When the failure is
//    the kind a lost peer causes (PeerLostError, a collective timeout) in a
//    multi-node round, observe() first waits, at most until a dead node would
//    be declared, for the rendezvous to report a lost participant: the
//    workers failed because a node died, and the restart is free;
//  * another node is waiting to join, or a participant stopped heartbeating →
//    stop the workers and join the next round; no restart is spent;
//  * SIGINT/SIGTERM → stop the workers, leave the rendezvous, report it.
// Workers are always stopped and reaped before the next round starts, so two
// rounds never overlap on a node. A node that hosts the rendezvous store
// lingers (LaunchOptions::linger_timeout) before it leaves, so the others
// can read the final state.

#include "launch/agent/agent.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <thread>

#include "common/error_file.h"
#include "common/fd.h"
#include "common/net.h"
#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/store.h"
#include "launch/agent/round_decision.h"
#include "launch/agent/round_plan.h"
#include "launch/agent/worker_env.h"
#include "launch/agent/worker_group.h"
#include "launch/launch_options.h"
#include "launch/process/signal_watch.h"
#include "launch/rendezvous/rendezvous.h"

namespace dtrain::detail {
namespace {

/// Runs `f`, ignoring errors: for bookkeeping on a store that may be gone
/// (its host finished or died), where the caller has a better error to report.
template <typename F>
void best_effort(F&& f) {
  try {
    f();
  } catch (const std::exception&) {
  }
}

void note(int fd, const std::string& line) { write_all(fd, cat("dtrain run: ", line, "\n")); }

/// resolve_launch_options, plus the log directory --redirects/--tee need.
LaunchOptions resolve_with_log_dir(const LaunchOptions& raw) {
  LaunchOptions o = resolve_launch_options(raw);
  o.log_dir = log_dir_for_streams(o);
  return o;
}

/// "worker rank 3" / "scheduler 0" / "server 1".
std::string process_name(const WorkerExit& w) {
  return cat(w.role == "worker" ? "worker rank " : w.role + " ", w.rank);
}

/// SIGINT/SIGTERM seen while no worker group is watching the signals.
class PendingSignal {
 public:
  explicit PendingSignal(SignalWatch* watch) : watch_(watch) {}
  /// Drains the watch; returns the first SIGINT/SIGTERM seen so far, else 0.
  int poll() {
    if (!watch_) return 0;
    for (int sig : watch_->take()) {
      if ((sig == SIGINT || sig == SIGTERM) && signal_ == 0) signal_ = sig;
    }
    return signal_;
  }

 private:
  SignalWatch* watch_;
  int signal_ = 0;
};

/// The agent's question to the rendezvous while workers run: did the group
/// change (a node waits, a participant died, the run was closed)? A backend
/// error is not a change by itself: an etcd leader election or a short
/// network blip must not kill training. Only errors that persist for the
/// backend timeout stop the workers (the next rendezvous then reports them).
class MembershipWatch {
 public:
  MembershipWatch(Rendezvous& rdzv, std::chrono::milliseconds patience)
      : rdzv_(rdzv), patience_(patience) {}
  bool changed() {
    try {
      bool changed =
          rdzv_.num_nodes_waiting() > 0 || rdzv_.lost_participants() || rdzv_.is_closed();
      failing_since_.reset();
      return changed;
    } catch (const std::exception&) {
      auto now = std::chrono::steady_clock::now();
      if (!failing_since_) failing_since_ = now;
      return now - *failing_since_ >= patience_;
    }
  }

 private:
  Rendezvous& rdzv_;
  std::chrono::milliseconds patience_;
  std::optional<std::chrono::steady_clock::time_point> failing_since_;
};

// Note [Registration check]
// Under live recovery a worker program must use dtrain/live.h: a program that
// never creates a LiveGroup would be supervised as if it could survive losses
// while it cannot. The agent names each worker's member (DTRAIN_LIVE_MEMBER,
// live_member_id()), and a LiveGroup's heartbeat thread keeps
// `<prefix>/hb/<member>` in the workers' store (the key_prefix: "live", or
// the round's DTRAIN_LIVE_KEY_PREFIX when the workers share the rendezvous
// store). Node 0's agent looks for the key of any of its own workers (a few
// check()s per second at most) until one appears, in the store it hosts or,
// shared, through a client of its own. None within live_register_timeout,
// or none when the workers ended, ends the run with a usage error. Other
// nodes do not check (node 0 closes the run, and they stop their workers when
// it is closed).

/// LiveOptions::key_prefix's default: the workers' keys when they have a
/// store of their own (no DTRAIN_LIVE_KEY_PREFIX).
constexpr const char* kDefaultLiveKeyPrefix = "live";

/// The library ended the job as a whole (dtrain::BelowMinWorkersError): no
/// replacement can join it.
bool is_live_job_end(const std::string& type, const std::string& message) {
  return type.find("BelowMinWorkersError") != std::string::npos ||
         message.find("BelowMinWorkersError") != std::string::npos;
}

/// Whether a worker registered with the live-recovery library (Note
/// [Registration check]). Without a store (not node 0) it says yes.
class RegistrationWatch {
 public:
  RegistrationWatch(StorePtr store, const std::string& prefix, const std::vector<WorkerSpec>& specs,
                    std::chrono::milliseconds timeout)
      : store_(std::move(store)),
        deadline_(std::chrono::steady_clock::now() + timeout),
        checked_(timeout.count() > 0 && store_ != nullptr) {
    for (const auto& spec : specs) {
      if (!spec.live_member.empty()) keys_.push_back(cat(prefix, "/hb/", spec.live_member));
    }
    checked_ = checked_ && !keys_.empty();
  }
  /// True once any worker registered (or nothing is checked). Reads the store
  /// at most once a second unless `now` is set.
  bool registered(bool now = true) {
    if (!checked_ || seen_) return true;
    const auto t = std::chrono::steady_clock::now();
    if (!now && t < next_) return false;
    next_ = t + std::chrono::seconds(1);
    // check() is true only when every key given is there: ask one by one.
    for (const auto& k : keys_) {
      best_effort([&] { seen_ = store_->check({k}); });
      if (seen_) break;
    }
    return seen_;
  }
  /// No registration by the deadline.
  bool overdue() {
    return checked_ && !registered(false) && std::chrono::steady_clock::now() >= deadline_;
  }

 private:
  StorePtr store_;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::steady_clock::time_point next_{};
  bool checked_;
  bool seen_ = false;
  std::vector<std::string> keys_;
};

/// After this node's workers failed the way a lost peer makes them fail:
/// was a node of the round lost? Waits, at most as long as the rendezvous
/// needs to declare a node dead (missed heartbeats, plus two intervals for
/// the last beat's age and the watcher's check), for the node watching it to
/// say so. Ends early with false when another node is already waiting for
/// the next round (the failure started elsewhere), the run was closed, or a
/// signal came.
bool node_was_lost(Rendezvous& rdzv, const RendezvousConfig& c, PendingSignal& pending) {
  const auto deadline =
      std::chrono::steady_clock::now() + c.heartbeat_interval * (c.missed_heartbeats + 2);
  for (;;) {
    bool lost = false, elsewhere = false;
    best_effort([&] { lost = rdzv.participant_lost(); });
    if (lost) return true;
    best_effort([&] { elsewhere = rdzv.num_nodes_waiting() > 0 || rdzv.is_closed(); });
    if (elsewhere || pending.poll() != 0 || std::chrono::steady_clock::now() >= deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

/// The rendezvous for `o`. A single-node static run on port 0 hosts its own
/// store on a free port (`server` keeps it); everything else goes through
/// make_rendezvous.
std::unique_ptr<Rendezvous> open_rendezvous(const LaunchOptions& o, RendezvousConfig config,
                                            std::unique_ptr<TcpStoreServer>* server) {
  if (o.rdzv_backend == "static" && o.max_nodes == 1 && o.master_port == 0) {
    *server = TcpStoreServer::start({o.master_addr, 0});
    config.endpoint = cat(o.master_addr, ":", (*server)->port());
    return make_dynamic_rendezvous(
        make_store_backend((*server)->store(), cat("store at ", config.endpoint)), config);
  }
  return make_rendezvous(config);
}

/// How this node's workers ended in one round.
struct RoundOutcome {
  /// The error records of the workers that did not succeed, by local rank.
  std::vector<std::optional<ErrorRecord>> records;
  /// Index of the root cause in LaunchResult::workers, when one failed.
  std::optional<size_t> root;
  /// SIGINT/SIGTERM stopped the group.
  bool signalled = false;
  /// A membership change stopped the group.
  bool interrupted = false;
};

/// One agent's run (Note [Agent loop]). Not copyable or movable: the pending
/// signal and the rendezvous's cancel callback point into it.
class Agent {
 public:
  Agent(const LaunchOptions& raw_options, ProcessControl& control);
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  LaunchResult run();

 private:
  std::optional<RendezvousInfo> join_round();
  RoundOutcome run_workers(const RendezvousInfo& info);
  RoundFacts observe(const RendezvousInfo& info, const RoundOutcome& outcome);
  bool carry_out(const RoundDecision& decision, const RoundFacts& facts,
                 const RendezvousInfo& info);

  bool live() const { return o_.recovery == LaunchOptions::Recovery::kLive; }
  std::string live_store_line() const;
  void mark_dead(const std::string& member, const std::string& how);
  void settle_live_round(RoundOutcome& outcome, const RendezvousInfo& info, bool registered);
  [[noreturn]] void never_registered(const RendezvousInfo& info);
  [[noreturn]] void ended_by_another_node();
  void record_root_cause(const RendezvousInfo& info);
  void note_restart(const RoundFacts& facts);
  void wait_at_exit_barrier();
  void leave(const RoundDecision& decision);

  const LaunchOptions o_;
  ProcessControl& control_;
  const std::vector<std::string> base_;
  const std::string program_;
  std::optional<SignalWatch> signals_;
  PendingSignal pending_;
  RendezvousConfig config_;
  std::unique_ptr<TcpStoreServer> own_server_;
  std::unique_ptr<Rendezvous> rdzv_;
  /// Live recovery: this round's workers' store (MASTER_ADDR:MASTER_PORT),
  /// connected on the first worker death; cleared each round. Their keys are
  /// under live_prefix_.
  std::string worker_store_addr_;
  int worker_store_port_ = 0;
  std::string live_prefix_ = kDefaultLiveKeyPrefix;
  StorePtr worker_store_;
  std::optional<TempDir> error_root_;
  WorkerGroupOptions group_options_;
  LaunchResult result_;
  int last_round_ = -1;
};

Agent::Agent(const LaunchOptions& raw_options, ProcessControl& control)
    : o_(resolve_with_log_dir(raw_options)),
      control_(control),
      base_(o_.environment ? *o_.environment : current_environment()),
      program_(find_program(o_.command[0], env_value(base_, "PATH").value_or(kDefaultPath))),
      signals_(o_.handle_signals ? std::make_optional<SignalWatch>() : std::nullopt),
      pending_(signals_ ? &*signals_ : nullptr),
      config_(rendezvous_config(o_)) {
  config_.cancelled = [this] { return pending_.poll() != 0; };
  // Note [Where the live store lives]: over a c10d rendezvous the workers
  // share its store, so the store lives where the user put the endpoint.
  config_.workers_share_store = live() && config_.backend == "c10d";
  // A live job runs one round: a node that comes later joins it (Note [Late
  // nodes] in src/launch/rendezvous/protocol_rounds.cpp).
  config_.join_running_round = live();
  rdzv_ = open_rendezvous(o_, config_, &own_server_);
  if (!o_.log_dir) error_root_.emplace();
  if (o_.log_dir && !raw_options.log_dir) {
    note(o_.stderr_fd, cat("workers' logs (--redirects/--tee) in ", *o_.log_dir));
  }
  if (sets_omp_num_threads(base_, o_.nproc_per_node)) {
    note(o_.stderr_fd, cat("setting OMP_NUM_THREADS=1 for each of the ", o_.nproc_per_node,
                           " workers to avoid overloading the machine; set it yourself to tune"));
  }
  group_options_.stop_grace_period = o_.stop_grace_period;
  group_options_.monitor_interval = o_.monitor_interval;
  group_options_.tag_output = o_.tag_output;
  group_options_.stdout_fd = o_.stdout_fd;
  group_options_.stderr_fd = o_.stderr_fd;
  if (live()) {
    group_options_.live_on_death = [this](const std::string& member, const std::string& how) {
      mark_dead(member, how);
    };
    group_options_.live_replacements = o_.max_restarts;
    group_options_.live_replaceable = [](const std::string& type, const std::string& message) {
      return !is_live_job_end(type, message);
    };
    note(o_.stderr_fd,
         cat("live recovery: a failed worker is replaced alone (DTRAIN_LIVE_JOIN=1, up to ",
             o_.max_restarts, " replacement(s), --max-restarts) while the others keep training; ",
             live_store_line()));
  }
  result_.run_id = o_.run_id;
}

LaunchResult Agent::run() {
  for (;;) {
    std::optional<RendezvousInfo> info = join_round();
    if (!info) return result_;  // a signal came while waiting for the round
    const RoundOutcome outcome = run_workers(*info);
    const RoundFacts facts = observe(*info, outcome);
    if (carry_out(decide_round(facts), facts, *info)) return result_;
  }
}

/// The next round, or nullopt when SIGINT/SIGTERM came while waiting for it.
/// Throws Error naming the first failure when another node closed the run.
std::optional<RendezvousInfo> Agent::join_round() {
  RendezvousInfo info;
  try {
    info = rdzv_->next_rendezvous();
  } catch (const CancelledRendezvous&) {
    result_.launcher_signal = pending_.poll();
    rdzv_->shutdown();
    return std::nullopt;
  } catch (const InvalidArgument&) {
    // A round every node refuses by itself (nodes started with different
    // settings: RendezvousConfig::settings; static node ranks): if the store
    // is ours, keep it up until the others have read the round and left, so
    // that each says why instead of losing the store.
    best_effort([&] { rdzv_->linger(o_.linger_timeout); });
    throw;
  } catch (const Error&) {
    bool closed = false;
    best_effort([&] { closed = rdzv_->is_closed(); });
    if (!closed) throw;
    ended_by_another_node();
  }
  const int attempt = result_.rounds++;
  last_round_ = info.round;
  if (info.late > 0) {
    note(o_.stderr_fd, cat("live recovery: round ", info.round, " is running with ", info.num_nodes,
                           " node(s) and ", info.world_size(), " workers; joining it as late node ",
                           info.late, " (node rank ", info.node_rank, "): its ", o_.nproc_per_node,
                           " worker(s) start as replacements (DTRAIN_LIVE_JOIN=1, RANK ",
                           info.base_rank(), "-", info.base_rank() + o_.nproc_per_node - 1,
                           "), taken in at a step boundary while the job runs below its ",
                           info.world_size(), " workers, else waiting as spares"));
  } else if (o_.max_nodes > 1 || attempt > 0) {
    note(o_.stderr_fd,
         cat("round ", info.round, ": node ", info.node_rank, " of ", info.num_nodes, ", ranks ",
             info.base_rank(), "-", info.base_rank() + o_.nproc_per_node - 1, " of ",
             info.world_size(), ", restarts ", result_.restarts, "/", o_.max_restarts));
  }
  result_.master_addr = info.master_addr;
  result_.master_port = info.master_port;
  return info;
}

void Agent::ended_by_another_node() {
  std::optional<std::string> first;
  best_effort([&] {
    if (last_round_ >= 0) first = rdzv_->first_failure(last_round_);
  });
  // The others may still be stopping their workers: keep the store up for
  // them if it is ours.
  best_effort([&] { rdzv_->linger(o_.linger_timeout); });
  throw Error(
      cat("the run ", o_.run_id, " was ended by another node (its restarts ran out",
          " or it stopped); ",
          first ? "first failure: " + *first : "see that node's output for the root cause"));
}

/// Starts this round's workers and watches them until they all ended, a
/// signal came, or the group's membership changed; fills in result_.workers
/// and the root cause.
RoundOutcome Agent::run_workers(const RendezvousInfo& info) {
  RoundPlan plan = plan_round(o_, program_, base_, info, result_.rounds - 1, result_.restarts,
                              error_root_ ? error_root_->path() : "");
  worker_store_addr_ = info.master_addr;
  worker_store_port_ = info.master_port;
  live_prefix_ = info.worker_key_prefix.empty() ? kDefaultLiveKeyPrefix : info.worker_key_prefix;
  worker_store_.reset();
  WorkerGroupOutcome group_outcome;
  std::optional<RegistrationWatch> registration;
  {
    WorkerGroup group(control_, group_options_);
    if (live()) {
      StorePtr store;
      if (info.hosted_store) {
        store = info.hosted_store->store();
      } else if (info.node_rank == 0 && !info.worker_key_prefix.empty() &&
                 o_.live_register_timeout.count() > 0) {
        // Bounded like mark_dead's: the workers start only after it, and a
        // store that does not answer at once only costs the check.
        best_effort([&] {
          store = connect_tcp_store(info.master_addr, info.master_port, std::chrono::seconds(5));
        });
      }
      registration.emplace(store, live_prefix_, plan.specs, o_.live_register_timeout);
    }
    group.start(std::move(plan.specs));
    MembershipWatch watch(*rdzv_, config_.backend_timeout);
    if (live()) {
      // Note [Live supervision] (worker_group.cpp): membership is the
      // library's; only a closed run or an unregistered program stops them.
      group_outcome = group.wait(signals_ ? &*signals_ : nullptr, [&] {
        bool closed = false;
        best_effort([&] { closed = rdzv_->is_closed(); });
        return closed || registration->overdue();
      });
    } else {
      group_outcome =
          group.wait(signals_ ? &*signals_ : nullptr, [&watch] { return watch.changed(); });
    }
  }
  RoundOutcome outcome;
  outcome.records = read_round_records(group_outcome.exits, plan, info);
  outcome.signalled = group_outcome.signal != 0;
  outcome.interrupted = group_outcome.interrupted;
  result_.workers = std::move(group_outcome.exits);
  result_.launcher_signal = group_outcome.signal;
  result_.root_cause.reset();
  if (group_outcome.root_cause) {
    const size_t root =
        choose_root_cause(result_.workers, outcome.records).value_or(*group_outcome.root_cause);
    outcome.root = root;
    result_.root_cause = result_.workers[root];
    result_.root_cause->error_message = outcome.records[root] ? outcome.records[root]->message : "";
  }
  if (live()) {
    const bool registered = !registration || registration->registered();
    if (!registered && !outcome.signalled) never_registered(info);
    for (auto& line : group_outcome.replacements) result_.recovered_failures.push_back(line);
    result_.restarts += static_cast<int>(group_outcome.replacements.size());
    settle_live_round(outcome, info, registered);
  }
  return outcome;
}

// Note [Where the live store lives]
// Live recovery's detection, commit agreement and generations all run
// through the workers' store, so losing it ends the job. Under a c10d
// rendezvous the workers use the rendezvous store itself, each round under
// its own prefix (RendezvousConfig::workers_share_store, passed on as
// DTRAIN_LIVE_KEY_PREFIX): the store lives where --rdzv-endpoint points,
// and a store run off the workers' nodes (`dtrain store`, or any c10d
// TCPStore) survives the loss of any of them, node 0 included. Under the
// static and etcd rendezvous node 0's agent hosts a fresh store per round, as
// for a restart job: losing node 0 ends the job. Each agent says which at
// start.
std::string Agent::live_store_line() const {
  if (!config_.workers_share_store) {
    return "the workers' store is hosted by node 0's agent: losing node 0 ends the job (no "
           "fallback to a restart), losing another node does not; to survive node 0, use "
           "--rdzv-backend c10d with the store on a host without workers (dtrain store)";
  }
  if (rdzv_->hosts_store()) {
    return cat("the workers share the rendezvous store at ", config_.endpoint,
               ", hosted by this node's agent: losing this node ends the job, losing another "
               "does not; run `dtrain store` on a host without workers and point "
               "--rdzv-endpoint at it so that no node is needed");
  }
  if (is_local_host(parse_endpoint(config_.endpoint, kC10dDefaultPort).first)) {
    return cat("the workers share the rendezvous store at ", config_.endpoint,
               ", which runs on this machine: losing this machine ends the job; run the store "
               "on a host without workers so that no node is needed");
  }
  return cat("the workers share the rendezvous store at ", config_.endpoint,
             ", not hosted on this node: losing this node (node 0 included) does not end the "
             "job, losing the store does");
}

/// Live recovery: a local worker died by itself; its member is marked dead
/// in the workers' store (`<prefix>/dead/<member>` = how it ended, Note [Live
/// supervision]), so the library declares it at once. Best effort and
/// bounded (2 s to connect): heartbeats still find it otherwise.
void Agent::mark_dead(const std::string& member, const std::string& how) {
  best_effort([&] {
    if (!worker_store_) {
      worker_store_ =
          connect_tcp_store(worker_store_addr_, worker_store_port_, std::chrono::seconds(2));
    }
    const std::string value = cat("process ended: ", how, " (reaped by its agent)");
    worker_store_->set(cat(live_prefix_, "/dead/", member),
                       std::vector<uint8_t>(value.begin(), value.end()));
  });
}

/// Live recovery: when a local worker finished (exit 0), the job went on
/// without the workers that failed unreplaced: they become lost_workers and
/// the node succeeded. Otherwise the root cause is the worker whose record
/// came first (the library's "ended below the minimum" names the lost ranks),
/// before a killed worker without a record.
void Agent::settle_live_round(RoundOutcome& outcome, const RendezvousInfo& info, bool registered) {
  (void)info;
  (void)registered;
  auto& workers = result_.workers;
  const bool finished = std::any_of(workers.begin(), workers.end(),
                                    [](const WorkerExit& w) { return w.succeeded(); });
  if (finished && result_.launcher_signal == 0) {
    std::vector<WorkerExit> kept;
    for (auto& w : workers) (w.succeeded() ? kept : result_.lost_workers).push_back(w);
    workers = std::move(kept);
    result_.root_cause.reset();
    outcome.root.reset();
    return;
  }
  std::optional<size_t> best;
  for (size_t i = 0; i < workers.size(); ++i) {
    if (workers[i].succeeded() || !outcome.records[i]) continue;
    if (!best || outcome.records[i]->timestamp < outcome.records[*best]->timestamp) best = i;
  }
  if (best && outcome.root) {
    outcome.root = best;
    result_.root_cause = workers[*best];
  }
}

/// Live recovery on node 0: no worker registered with the library (a
/// program that never calls the per-step API). Records it, closes the run
/// and throws InvalidArgument (`dtrain run` exits 2).
void Agent::never_registered(const RendezvousInfo& info) {
  const std::string line =
      cat("LaunchOptions::Recovery::kLive: the program '", o_.command[0],
          "' never registered with live ", "recovery (no worker created a dtrain::LiveGroup ",
          o_.live_register_timeout.count() > 0
              ? cat("within LaunchOptions::live_register_timeout ",
                    o_.live_register_timeout.count() / 1000.0, " s or ")
              : std::string(),
          "before its workers exited): call dtrain/live.h's per-step API (LiveGroup, "
          "should_commit()) in the training loop, or use LaunchOptions::Recovery::kRestart");
  best_effort([&] { rdzv_->record_failure(line); });
  if (info.num_nodes > 1) best_effort([&] { rdzv_->set_closed(); });
  best_effort([&] { rdzv_->linger(o_.linger_timeout); });
  rdzv_->shutdown();
  throw InvalidArgument(line);
}

RoundFacts Agent::observe(const RendezvousInfo& info, const RoundOutcome& outcome) {
  RoundFacts facts;
  facts.signalled = outcome.signalled;
  facts.worker_failed = outcome.root.has_value();
  facts.membership_changed = outcome.interrupted;
  facts.all_succeeded = result_.succeeded();
  facts.restarts = result_.restarts;
  // Live recovery restarts workers alone (Note [Live supervision]), never the group.
  facts.max_restarts = live() ? result_.restarts : o_.max_restarts;
  facts.num_nodes = info.num_nodes;
  if (!live() && outcome.root && !facts.signalled && info.num_nodes > 1 &&
      outcome.records[*outcome.root] && is_peer_failure(*outcome.records[*outcome.root])) {
    facts.node_lost = node_was_lost(*rdzv_, config_, pending_);
  }
  return facts;
}

bool Agent::carry_out(const RoundDecision& decision, const RoundFacts& facts,
                      const RendezvousInfo& info) {
  RoundDecision d = decision;
  // Live recovery: this node's workers are gone, the others' go on (the
  // library ends the job below the minimum); closing the run would stop them.
  if (live() && d.action == RoundAction::kGiveUp) d.close = false;
  if (d.record_failure) record_root_cause(info);
  switch (d.action) {
    case RoundAction::kRestart:
      if (!facts.worker_failed) {
        note(o_.stderr_fd, "the group's membership changed; stopping the workers for a new round");
        return false;
      }
      for (const auto& line : result_.summary()) result_.recovered_failures.push_back(line);
      if (d.counts_restart) ++result_.restarts;
      note_restart(facts);
      return false;
    case RoundAction::kGiveUp:
      if (info.num_nodes > 1) {
        best_effort([&] { result_.first_failure = rdzv_->first_failure(info.round).value_or(""); });
      }
      break;
    case RoundAction::kFinish:
      if (d.exit_barrier) wait_at_exit_barrier();
      break;
    case RoundAction::kStop:  // signalled: leave at once
    case RoundAction::kAbort:
      // kAbort: workers ended badly only because they were stopped, without
      // a signal, failure or membership change: cannot happen, but never loop.
      break;
  }
  leave(d);
  return true;
}

/// Records this node's root cause as the round's first failure (the first
/// writer wins), so every node can name it when the run ends.
void Agent::record_root_cause(const RendezvousInfo& info) {
  const WorkerExit& rc = *result_.root_cause;
  best_effort([&] {
    rdzv_->record_failure(cat(process_name(rc), " on node ", info.node_rank, " (",
                              rc.node_addr.empty() ? "local" : rc.node_addr, ", pid ", rc.pid,
                              ") failed: ", rc.describe(),
                              rc.error_message.empty() ? "" : ": " + first_line(rc.error_message)));
  });
}

void Agent::note_restart(const RoundFacts& facts) {
  const WorkerExit& rc = *result_.root_cause;
  note(o_.stderr_fd,
       cat(process_name(rc), " failed (", rc.describe(),
           facts.node_lost ? ") after a node of the round was lost; restarting the group "
                             "without spending a restart ("
                           : "); restarting the group (restart ",
           result_.restarts, " of ", o_.max_restarts, ")"));
}

/// Waits, at most exit_barrier_timeout, for every node of the round to
/// finish; then closes the run, so nodes that come later are told so instead
/// of waiting for a round.
void Agent::wait_at_exit_barrier() {
  bool all_done = false;
  best_effort([&] { all_done = rdzv_->exit_barrier(o_.exit_barrier_timeout, live()); });
  if (all_done) {
    best_effort([&] { rdzv_->set_closed(); });
  } else {
    note(o_.stderr_fd,
         cat("not every node finished within ", o_.exit_barrier_timeout.count() / 1000.0,
             " s of this one; leaving anyway"));
  }
}

/// Leaves the rendezvous as `d` says: closing the run for every node,
/// lingering while the others read the final state.
void Agent::leave(const RoundDecision& d) {
  if (d.close) best_effort([&] { rdzv_->set_closed(); });
  if (d.linger) best_effort([&] { rdzv_->linger(o_.linger_timeout); });
  rdzv_->shutdown();
}

}  // namespace

LaunchResult launch(const LaunchOptions& options, ProcessControl& control) {
  return Agent(options, control).run();
}

}  // namespace dtrain::detail

namespace dtrain {

LaunchResult launch(const LaunchOptions& options) {
  detail::PosixProcessControl control;
  return detail::launch(options, control);
}

}  // namespace dtrain
