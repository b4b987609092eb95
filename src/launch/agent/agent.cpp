// The elastic agent: the loop behind dtrain::launch() (contract in
// include/dtrain/launch.h).
//
// Note [Agent loop]
// One agent per node runs rounds. A round is: join the rendezvous (which
// fixes this node's rank and the global ranks), start the local workers
// against the round's fresh store, and watch them. A round ends in one of
// four ways:
//  * every local worker exited 0 → the node is done; it waits (bounded) at the
//    exit barrier so the stores it hosts outlive the other nodes' last steps;
//  * a worker failed → stop the others; with restarts left, join the next
//    round (the other agents see a node waiting and restart too), else close
//    the rendezvous so every node stops, and report the root cause (the
//    earliest failure by its error record's timestamp). When the failure is
//    the kind a lost peer causes (PeerLostError, a collective timeout) in a
//    multi-node round, the agent first waits, at most until a dead node would
//    be declared, for the rendezvous to report a lost participant: the
//    workers failed because a node died, and the restart is free;
//  * another node is waiting to join, or a participant stopped heartbeating →
//    stop the workers and join the next round; no restart is spent;
//  * SIGINT/SIGTERM → stop the workers, leave the rendezvous, report it.
// Workers are always stopped and reaped before the next round starts, so two
// rounds never overlap on a node. Which of these happens is decide_round()
// (round_decision.h), a pure function of what the agent observed.

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <system_error>
#include <thread>

#include "common/error_file.h"
#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/store.h"
#include "launch/agent/worker_env.h"
#include "launch/rendezvous/rendezvous.h"
#include "launch/agent/round_decision.h"
#include "launch/process/signal_watch.h"
#include "launch/agent/worker_group.h"

namespace dtrain::detail {
namespace {

namespace fs = std::filesystem;

/// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "dtrain-run-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) {
      throw Error(cat("cannot create a temporary directory for the workers' error files under ",
                      fs::temp_directory_path().string()));
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// <root>/<run_id>/attempt_<n>/<name>, created; name is the local rank, or
/// "scheduler" / "server<r>" in a parameter-server job.
std::string attempt_dir(const std::string& root, const std::string& run_id, int attempt,
                        const std::string& name) {
  fs::path dir = fs::path(root) / run_id / cat("attempt_", attempt) / name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(cat("cannot create the log directory '", dir.string(), "': ", ec.message()));
  return dir.string();
}

/// How long a finished node waits for the others before it stops hosting.
/// (torchrun's exit barrier waits 300 s: rank 0 may still be writing the
/// final checkpoint.)
constexpr std::chrono::milliseconds kExitBarrierTimeout = std::chrono::seconds(300);

/// How long the node hosting the rendezvous store waits for the others to
/// read the final state before it stops hosting.
constexpr std::chrono::milliseconds kLingerTimeout = std::chrono::seconds(60);

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

struct RoundPlan {
  std::vector<WorkerSpec> specs;
  std::vector<std::string> error_files;  // by local rank
};

/// Adds one process to `plan`: its log directory, error file and output logs.
void add_spec(RoundPlan& plan, WorkerSpec spec, const LaunchOptions& o, int attempt,
              const std::string& error_root, const std::string& dir_name) {
  const std::string dir =
      attempt_dir(o.log_dir.value_or(error_root), o.log_dir ? o.run_id : "", attempt, dir_name);
  const std::string error_file = dir + "/error.json";
  std::error_code ec;
  fs::remove(error_file, ec);  // a stale record must not be taken for this round's
  spec.process.env.push_back(cat("TORCHELASTIC_ERROR_FILE=", error_file));
  if (o.log_dir) {
    spec.stdout_log = dir + "/stdout.log";
    spec.stderr_log = dir + "/stderr.log";
  }
  plan.error_files.push_back(error_file);
  plan.specs.push_back(std::move(spec));
}

// Note [Parameter-server job]
// With ps_servers > 0 a round also runs MXNet's scheduler and servers, as
// `tools/launch.py --launcher local` does: the same command in every process,
// told its role by DMLC_ROLE. They join the worker group after the workers
// (so exits[i] is still local rank i for the workers) and are supervised
// exactly like them: one failure stops everyone and is the root cause; a
// restart restarts the whole job on a fresh scheduler port (the servers'
// state is not kept across rounds: workers init their keys again).
RoundPlan plan_round(const LaunchOptions& o, const std::string& program,
                     const std::vector<std::string>& base, const RendezvousInfo& info,
                     int attempt, int restarts, const std::string& error_root) {
  RoundPlan plan;
  JobInfo job{info.master_addr, info.master_port, o.run_id};
  PsJob ps{0, o.ps_servers, o.nproc_per_node};
  if (o.ps_servers > 0) ps.scheduler_port = pick_free_port();
  for (int local_rank = 0; local_rank < o.nproc_per_node; ++local_rank) {
    WorkerIdentity who;
    who.local_rank = local_rank;
    who.rank = info.base_rank() + local_rank;
    who.world_size = info.world_size();
    who.local_world_size = o.nproc_per_node;
    who.group_rank = info.node_rank;
    who.group_world_size = info.num_nodes;
    who.restart_count = restarts;
    who.max_restarts = o.max_restarts;
    WorkerSpec spec;
    spec.rank = who.rank;
    spec.local_rank = local_rank;
    spec.process.path = program;
    spec.process.argv = o.command;
    spec.process.env = worker_environment(base, who, job);
    if (o.ps_servers > 0) {
      spec.process.env = ps_environment(spec.process.env, ps, "worker", who.rank);
    }
    add_spec(plan, std::move(spec), o, attempt, error_root, std::to_string(local_rank));
  }
  for (int r = -1; r < o.ps_servers && o.ps_servers > 0; ++r) {
    WorkerSpec spec;
    spec.role = r < 0 ? "scheduler" : "server";
    spec.rank = std::max(r, 0);
    spec.local_rank = -1;
    spec.process.path = program;
    spec.process.argv = o.command;
    spec.process.env = ps_environment(base, ps, spec.role, spec.rank);
    const std::string name = r < 0 ? spec.role : cat(spec.role, r);
    add_spec(plan, std::move(spec), o, attempt, error_root, name);
  }
  return plan;
}

/// Fills in where each worker ran and the message of its error record;
/// returns the records of the workers that did not succeed, by local rank.
std::vector<std::optional<ErrorRecord>> annotate(std::vector<WorkerExit>& exits,
                                                 const RoundPlan& plan,
                                                 const RendezvousInfo& info) {
  std::vector<std::optional<ErrorRecord>> records(exits.size());
  for (size_t i = 0; i < exits.size(); ++i) {
    exits[i].node_rank = info.node_rank;
    if (info.num_nodes > 1 && static_cast<size_t>(info.node_rank) < info.node_addrs.size()) {
      exits[i].node_addr = info.node_addrs[static_cast<size_t>(info.node_rank)];
    }
    if (exits[i].succeeded()) continue;
    records[i] = read_error_file(plan.error_files[i]);
    if (records[i] && !exits[i].stopped) exits[i].error_message = records[i]->message;
  }
  return records;
}

/// After this node's workers failed the way a lost peer makes them fail:
/// was a node of the round lost? Waits, at most as long as the rendezvous
/// needs to declare a node dead (missed heartbeats, plus two intervals for
/// the last beat's age and the watcher's check), for
/// the node watching it to say so. Ends early with false when another node
/// is already waiting for the next round (the failure started elsewhere),
/// the run was closed, or a signal came.
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

}  // namespace

RendezvousConfig rendezvous_config(const LaunchOptions& o) {
  RendezvousConfig c;
  c.backend = o.rdzv_backend;
  c.endpoint = o.rdzv_endpoint.empty() ? cat(o.master_addr, ":", o.master_port) : o.rdzv_endpoint;
  c.run_id = o.run_id;
  c.min_nodes = o.min_nodes;
  c.max_nodes = o.max_nodes;
  c.node_rank = o.node_rank;
  c.local_world_size = o.nproc_per_node;
  if (o.rdzv_backend == "static") {
    // Every node of a static job is expected: no last call to wait out.
    c.last_call_timeout = std::chrono::milliseconds(0);
  }
  c.apply_conf(o.rdzv_conf);
  return c;
}

LaunchResult launch(const LaunchOptions& raw_options, ProcessControl& control) {
  const LaunchOptions o = resolve_launch_options(raw_options);
  const std::vector<std::string> base = o.environment ? *o.environment : current_environment();
  const std::string program =
      find_program(o.command[0], env_value(base, "PATH").value_or(kDefaultPath));

  std::optional<SignalWatch> signals;
  if (o.handle_signals) signals.emplace();
  PendingSignal pending(signals ? &*signals : nullptr);

  RendezvousConfig config = rendezvous_config(o);
  config.cancelled = [&pending] { return pending.poll() != 0; };
  std::unique_ptr<TcpStoreServer> own_server;
  std::unique_ptr<Rendezvous> rdzv = open_rendezvous(o, config, &own_server);

  std::optional<TempDir> error_root;
  if (!o.log_dir) error_root.emplace();
  if (sets_omp_num_threads(base, o.nproc_per_node)) {
    note(o.stderr_fd, cat("setting OMP_NUM_THREADS=1 for each of the ", o.nproc_per_node,
                          " workers to avoid overloading the machine; set it yourself to tune"));
  }

  WorkerGroupOptions group_options;
  group_options.stop_grace_period = o.stop_grace_period;
  group_options.monitor_interval = o.monitor_interval;
  group_options.tag_output = o.tag_output;
  group_options.stdout_fd = o.stdout_fd;
  group_options.stderr_fd = o.stderr_fd;

  LaunchResult result;
  result.run_id = o.run_id;
  int last_round = -1;
  while (true) {
    RendezvousInfo info;
    try {
      info = rdzv->next_rendezvous();
    } catch (const CancelledRendezvous&) {
      result.launcher_signal = pending.poll();
      rdzv->shutdown();
      return result;
    } catch (const Error& e) {
      bool closed = false;
      best_effort([&] { closed = rdzv->is_closed(); });
      if (!closed) throw;
      std::optional<std::string> first;
      best_effort([&] {
        if (last_round >= 0) first = rdzv->first_failure(last_round);
      });
      // The others may still be stopping their workers: keep the store up
      // for them if it is ours.
      best_effort([&] { rdzv->linger(kLingerTimeout); });
      throw Error(cat("the run ", o.run_id, " was ended by another node (its restarts ran out",
                      " or it stopped); ", first ? "first failure: " + *first
                                                 : "see that node's output for the root cause"));
    }
    const int attempt = result.rounds++;
    last_round = info.round;
    if (o.max_nodes > 1 || attempt > 0) {
      note(o.stderr_fd, cat("round ", info.round, ": node ", info.node_rank, " of ",
                            info.num_nodes, ", ranks ", info.base_rank(), "-",
                            info.base_rank() + o.nproc_per_node - 1, " of ", info.world_size(),
                            ", restarts ", result.restarts, "/", o.max_restarts));
    }
    RoundPlan plan = plan_round(o, program, base, info, attempt, result.restarts,
                                error_root ? error_root->path() : "");
    result.master_addr = info.master_addr;
    result.master_port = info.master_port;

    WorkerGroupOutcome outcome;
    {
      WorkerGroup group(control, group_options);
      group.start(std::move(plan.specs));
      MembershipWatch watch(*rdzv, config.backend_timeout);
      outcome = group.wait(signals ? &*signals : nullptr, [&watch] { return watch.changed(); });
    }
    std::vector<std::optional<ErrorRecord>> records = annotate(outcome.exits, plan, info);
    result.workers = std::move(outcome.exits);
    result.launcher_signal = outcome.signal;
    result.root_cause.reset();
    std::optional<size_t> root;
    if (outcome.root_cause) {
      root = choose_root_cause(result.workers, records).value_or(*outcome.root_cause);
      result.root_cause = result.workers[*root];
      result.root_cause->error_message = records[*root] ? records[*root]->message : "";
    }

    RoundFacts facts;
    facts.signalled = outcome.signal != 0;
    facts.worker_failed = root.has_value();
    facts.membership_changed = outcome.interrupted;
    facts.all_succeeded = result.succeeded();
    facts.restarts = result.restarts;
    facts.max_restarts = o.max_restarts;
    facts.num_nodes = info.num_nodes;
    if (root && !facts.signalled && info.num_nodes > 1 && records[*root] &&
        is_peer_failure(*records[*root])) {
      facts.node_lost = node_was_lost(*rdzv, config, pending);
    }
    const RoundDecision decision = decide_round(facts);

    if (decision.record_failure) {
      const WorkerExit& rc = *result.root_cause;
      best_effort([&] {
        const std::string who = rc.role == "worker" ? "worker rank " : rc.role + " ";
        rdzv->record_failure(cat(who, rc.rank, " on node ", info.node_rank, " (",
                                 rc.node_addr.empty() ? "local" : rc.node_addr, ", pid ", rc.pid,
                                 ") failed: ", rc.describe(),
                                 rc.error_message.empty() ? "" : ": " + first_line(rc.error_message)));
      });
    }
    switch (decision.action) {
      case RoundAction::kStop:
        rdzv->shutdown();
        return result;
      case RoundAction::kRestart:
        if (!facts.worker_failed) {
          note(o.stderr_fd, "the group's membership changed; stopping the workers for a new round");
          continue;
        }
        for (const auto& line : result.summary()) result.recovered_failures.push_back(line);
        if (decision.counts_restart) ++result.restarts;
        note(o.stderr_fd,
             cat(result.root_cause->role == "worker" ? "worker rank "
                                                     : result.root_cause->role + " ",
                 result.root_cause->rank, " failed (", result.root_cause->describe(),
                 facts.node_lost ? ") after a node of the round was lost; restarting the group "
                                   "without spending a restart ("
                                 : "); restarting the group (restart ",
                 result.restarts, " of ", o.max_restarts, ")"));
        continue;
      case RoundAction::kGiveUp:
        if (info.num_nodes > 1) {
          best_effort([&] { result.first_failure = rdzv->first_failure(info.round).value_or(""); });
        }
        best_effort([&] { rdzv->set_closed(); });
        best_effort([&] { rdzv->linger(kLingerTimeout); });
        rdzv->shutdown();
        return result;
      case RoundAction::kFinish:
        if (decision.exit_barrier) {
          bool all_done = false;
          best_effort([&] { all_done = rdzv->exit_barrier(kExitBarrierTimeout); });
          if (all_done) {
            // Nodes that come later get "closed" instead of waiting for a round.
            best_effort([&] { rdzv->set_closed(); });
          } else {
            note(o.stderr_fd, cat("not every node finished within ",
                                  kExitBarrierTimeout.count() / 1000, " s of this one; leaving anyway"));
          }
        }
        if (decision.linger) best_effort([&] { rdzv->linger(kLingerTimeout); });
        rdzv->shutdown();
        return result;
      case RoundAction::kAbort:
        // Workers ended badly only because they were stopped, without a
        // signal, failure or membership change: cannot happen, but never loop.
        rdzv->set_closed();
        rdzv->shutdown();
        return result;
    }
  }
}

}  // namespace dtrain::detail
