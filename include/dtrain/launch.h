#pragma once
// The elastic agent behind `dtrain run`, the C++ counterpart of torchrun. One
// agent runs on each node. It joins the job's rendezvous (static, an embedded
// c10d store, or etcd), starts this node's worker processes with torchrun's
// environment (see shared/CONTRACTS.md), relays their output line by line
// prefixed with the rank, and watches them:
//  * a worker fails → the others on this node are stopped (SIGTERM, then
//    SIGKILL after a grace period); while restarts remain, the agent joins the
//    next round and the whole group restarts (the other nodes notice the new
//    round and restart too); otherwise the run fails, naming the root cause;
//  * a node arrives (or comes back) → the running group stops and a new round
//    admits it, without spending a restart;
//  * a node is lost → its peers' workers fail, and the survivors continue as a
//    smaller group when at least min_nodes remain.
// That is LaunchOptions::Recovery::kRestart, the default. Under kLive the
// workers survive losses themselves (dtrain/live.h) and a failed worker is
// replaced alone; see LaunchOptions::recovery.
//
/// Example:
/// ```
/// int launch_two_workers() {
///   dtrain::LaunchOptions options;
///   options.nproc_per_node = 2;
///   options.command = {"dtrain", "train", "--model", "cnn"};
///   dtrain::LaunchResult result = dtrain::launch(options);
///   for (const auto& line : result.summary()) std::cerr << line << "\n";
///   return result.exit_code();
/// }
/// ```
//
// No worker outlives the launcher: each runs in its own process group, is
// killed (SIGKILL) if the thread that called launch() dies, and is stopped and
// reaped before launch() returns or throws. When a worker exits, whatever is
// left of its process group (stray background children) is killed too.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace dtrain {

struct LaunchOptions {
  /// Worker processes to start on this node (torchrun --nproc-per-node).
  /// REQUIRES: >= 1.
  int nproc_per_node = 1;

  /// Nodes in the job (torchrun --nnodes MIN:MAX). A round completes with
  /// max_nodes at once, or with min_nodes after the last-call window.
  /// REQUIRES: 1 <= min_nodes <= max_nodes; "static" needs min == max.
  int min_nodes = 1;
  int max_nodes = 1;

  /// "static" (fixed node ranks; node 0 hosts the store at master_addr:
  /// master_port), "c10d" (dynamic, over a TCP store hosted by the agent on
  /// the endpoint's host) or "etcd" (dynamic, over etcd's v3 API).
  std::string rdzv_backend = "static";
  /// host:port of the rendezvous ("static": defaults to master_addr:
  /// master_port; "c10d"/"etcd": required).
  std::string rdzv_endpoint;
  /// torchrun --rdzv-conf "k=v,...": join_timeout, last_call_timeout,
  /// heartbeat_interval, missed_heartbeats, timeout, is_host, local_addr,
  /// etcd_prefix (seconds may be fractional).
  std::string rdzv_conf;
  /// "static" only: this node's rank in [0, max_nodes).
  int node_rank = 0;

  /// Group restarts after a worker failure before the run fails
  /// (TORCHELASTIC_MAX_RESTARTS). Membership changes do not count.
  int max_restarts = 0;

  /// torchrun --standalone: host the store on 127.0.0.1 at a free port and,
  /// when run_id is empty, generate a run id. master_addr and master_port are
  /// ignored. Without it the defaults below already give a local store on a
  /// free port; standalone only matters when they were changed.
  bool standalone = false;

  /// "static": node 0's address, where its agent hosts the rendezvous store
  /// (listening on every interface). Workers are not sent here: every round's
  /// workers get MASTER_ADDR / MASTER_PORT of a fresh store that the agent of
  /// node rank 0 hosts on a free port (torchrun's agents also hand workers a
  /// port of their own), so no key of an earlier attempt is ever seen.
  std::string master_addr = "127.0.0.1";

  /// "static": the port of node 0's rendezvous store; 0 picks a free one
  /// (single node only). A port in use makes launch() throw StoreError
  /// naming host:port.
  int master_port = 0;

  /// The address the other nodes reach this node at (torchrun --local-addr):
  /// where they find the workers' store when this node hosts it. Empty: the
  /// local address of the route to the rendezvous endpoint (loopback for a
  /// local one). The same as --rdzv-conf local_addr=; giving both with
  /// different values is an error.
  std::string local_addr;

  /// The workers' role (torchrun --role): their ROLE_NAME. REQUIRES: not
  /// empty.
  std::string role = "default";

  /// The worker program and its arguments, passed verbatim. A program name
  /// without '/' is looked up on the workers' PATH, like execvp.
  /// REQUIRES: not empty.
  std::vector<std::string> command;

  /// How workers run `command` (torchrun's --no-python, -m, --run-path):
  ///   kExec     command[0] is executed with the rest as its arguments:
  ///             torchrun's --no-python. torchrun's default, `python -u
  ///             SCRIPT ARGS`, is not dtrain's: a Python script needs
  ///             python3 in front of it, a shebang, or one of:
  ///   kModule   `python -u -m command...` (torchrun -m/--module);
  ///   kRunPath  command[0] is a Python file run by runpy.run_path as
  ///             __main__ with sys.argv = command (torchrun --run-path).
  enum class ProgramMode { kExec, kModule, kRunPath };
  ProgramMode program_mode = ProgramMode::kExec;
  /// The interpreter of kModule and kRunPath (torchrun: $PYTHON_EXEC, else
  /// its own; `dtrain run` passes $PYTHON_EXEC, else python3).
  std::string python = "python3";

  /// How long stopped workers get between SIGTERM and SIGKILL.
  std::chrono::milliseconds stop_grace_period = std::chrono::seconds(5);

  /// Longest time between two checks of the workers' state. Exits are
  /// normally noticed at once (SIGCHLD); this bounds the delay otherwise.
  std::chrono::milliseconds monitor_interval = std::chrono::milliseconds(100);

  /// Multi-node runs: how long a node whose workers all succeeded waits for
  /// the other nodes to finish before it leaves (and stops hosting any store
  /// their workers still use, e.g. while rank 0 writes the last checkpoint).
  /// torchrun's agent waits 300 s (LocalElasticAgent's exit_barrier_timeout,
  /// not a torchrun flag). REQUIRES: >= 0.
  std::chrono::milliseconds exit_barrier_timeout = std::chrono::seconds(300);

  /// Multi-node runs that end (finished, or restarts ran out): how long the
  /// node hosting the rendezvous store keeps it up for the other agents to
  /// read the final state (who failed first, that the run is closed); it
  /// leaves earlier once they all have. REQUIRES: >= 0.
  std::chrono::milliseconds linger_timeout = std::chrono::seconds(60);

  /// Prefix every line a worker writes with "[rank<N>]: ". When false and
  /// log_dir is unset, workers write straight to stdout_fd / stderr_fd.
  bool tag_output = true;

  /// TORCHELASTIC_RUN_ID. Empty: a generated id with standalone, else "none"
  /// (torchrun's defaults).
  std::string run_id;

  /// When set, each worker's output is also written, unprefixed, to
  /// <log_dir>/<run_id>/attempt_<n>/<local_rank>/{stdout,stderr}.log (torchrun's
  /// layout; n counts the rounds this agent ran), and its error record to
  /// error.json there (TORCHELASTIC_ERROR_FILE). Unset: error records go to a
  /// temporary directory removed when launch() returns. The directories are
  /// created; failing to create them throws.
  std::optional<std::string> log_dir;

  /// torchrun --redirects and --tee, in torchrun's syntax: one value for
  /// every local rank ("3") or local_rank:value pairs ("0:1,1:2"; ranks not
  /// listed get 0). A value is a set of streams: 0 none, 1 stdout, 2 stderr,
  /// 3 both. A redirected stream of a worker goes to its log file only (not
  /// to stdout_fd / stderr_fd); a teed one to both, which is what every
  /// stream does anyway when log_dir is set. Either one not "0" without
  /// log_dir: launch() creates a directory under $TMPDIR for the logs
  /// (dtrain-logs-XXXXXX, kept; its path is written to stderr_fd), as
  /// torchrun does. Malformed: launch() throws InvalidArgument naming the
  /// field ("LaunchOptions::redirects").
  std::string redirects = "0";
  std::string tee = "0";

  /// The environment workers inherit, as "KEY=VALUE" entries, before the
  /// torchrun variables are added. Unset: this process's environment.
  std::optional<std::vector<std::string>> environment;

  /// Where relayed worker output and the launcher's notes are written.
  int stdout_fd = 1;
  int stderr_fd = 2;

  /// Catch SIGINT and SIGTERM while launch() runs: the workers are stopped
  /// (SIGTERM, then SIGKILL after the grace period; a second signal kills at
  /// once) and the result reports the signal. At most one launch() with this
  /// set may run at a time in a process (the signal self-pipe is global).
  bool handle_signals = true;

  /// What happens when a worker fails (`dtrain run --recovery`):
  ///   kRestart  torchrun's behaviour (the default): the node's workers are
  ///             stopped and the whole group restarts in a new rendezvous
  ///             round, from the last checkpoint;
  ///   kLive     live recovery (docs/live_recovery.md): the workers use
  ///             dtrain/live.h and survive losses in-process. The agent sets
  ///             DTRAIN_RECOVERY=live and DTRAIN_LIVE_MIN_WORKERS in every
  ///             worker's environment; a local worker that fails is restarted
  ///             alone as a replacement (DTRAIN_LIVE_JOIN=1, same RANK) while
  ///             max_restarts allows, the others keep running; membership
  ///             changes of the rendezvous (a node lost or waiting) never stop
  ///             the workers. The node succeeds when a local worker exits 0
  ///             (those that failed unreplaced are then listed in
  ///             LaunchResult::lost_workers). A program that never registers
  ///             with the library (no `<prefix>/hb/<member>` key in the
  ///             workers' store within live_register_timeout, or a worker
  ///             exiting before any registered) ends the run: launch() throws
  ///             InvalidArgument naming the program and the API to call.
  ///             Over a c10d rendezvous the workers share the rendezvous
  ///             store (DTRAIN_LIVE_KEY_PREFIX): losing a node does not end
  ///             the job unless the store runs there. Otherwise node 0's
  ///             agent hosts the workers' store, and losing node 0 ends the
  ///             job (the others' workers lose the store and fail).
  ///             A node that comes while the job runs joins its round as a
  ///             late node once fewer than max_nodes are alive: its workers
  ///             start as replacements (DTRAIN_LIVE_JOIN=1, RANKs past
  ///             WORLD_SIZE that only name them).
  /// REQUIRES (kLive): max_nodes * nproc_per_node > live_min_workers, and
  /// ps_servers == 0.
  enum class Recovery { kRestart, kLive };
  Recovery recovery = Recovery::kRestart;

  /// kLive: the fewest live workers the job trains with
  /// (DTRAIN_LIVE_MIN_WORKERS, `dtrain run --live-min-workers`); below it the
  /// library ends the job naming the lost ranks. REQUIRES: >= 1.
  int live_min_workers = 1;

  /// kLive: how long node 0's agent waits for the first worker to register
  /// with the library before it ends the run as a program that never calls
  /// the per-step API (`dtrain run --live-register-timeout`). 0: not checked.
  std::chrono::milliseconds live_register_timeout = std::chrono::seconds(300);

  /// A parameter-server job on this node (MXNet's `tools/launch.py
  /// --launcher local`): besides the nproc_per_node workers, start one
  /// scheduler and ps_servers servers, each running `command` (as in MXNet,
  /// the same program serves every role: KVStore::create serves the
  /// scheduler and server roles). Every process gets DMLC_PS_ROOT_URI=
  /// 127.0.0.1, DMLC_PS_ROOT_PORT (a free port, fresh each round),
  /// DMLC_NUM_SERVER=ps_servers, DMLC_NUM_WORKER (see ps_worker_per) and
  /// DMLC_ROLE; workers also get DMLC_WORKER_ID (see ps_worker_per) and the
  /// torchrun variables, unchanged. The scheduler and servers are watched
  /// like workers (output tagged "[scheduler]: " / "[server<r>]: ", a
  /// failure stops the group and is named as the root cause, restarts
  /// restart them too). With
  /// DMLC_PS_SNAPSHOT_DIR in the environment a dead server is first
  /// restarted alone (up to 3 times per server) and reloads its snapshot
  /// (docs/ps.md). 0: none.
  /// REQUIRES: >= 0; > 0 only on a single node (max_nodes == 1).
  int ps_servers = 0;

  /// What a parameter-server job's ps-lite worker is (`dtrain run
  /// --ps-worker-per process|node`), i.e. what DMLC_NUM_WORKER counts and
  /// DMLC_WORKER_ID numbers:
  ///   kProcess  every worker process (dist_sync, dist_async):
  ///             DMLC_NUM_WORKER = WORLD_SIZE, DMLC_WORKER_ID = RANK;
  ///   kNode     one per node (dist_device_sync, whose local rank 0 alone
  ///             joins the job for its node; MXNet's one worker per
  ///             machine): DMLC_NUM_WORKER = the number of nodes (1: the job
  ///             is on one node), DMLC_WORKER_ID = the node's rank
  ///             (GROUP_RANK) in every process of the node.
  /// The launcher cannot tell which the program needs (the scheduler is
  /// started before the program opens its store): a dist_device_sync worker
  /// given kProcess's counts, or a dist_sync/dist_async worker given kNode's,
  /// fails at once naming this option (docs/ps.md).
  /// REQUIRES: kNode only with ps_servers > 0.
  enum class PsWorkerPer { kProcess, kNode };
  PsWorkerPer ps_worker_per = PsWorkerPer::kProcess;
};

/// How one worker ended.
struct WorkerExit {
  /// "worker", or "scheduler" / "server" for the nodes of a
  /// parameter-server job (LaunchOptions::ps_servers); rank is then the
  /// server's rank (0 for the scheduler) and local_rank -1.
  std::string role = "worker";
  int rank = -1;
  int local_rank = -1;
  int pid = -1;
  /// The exit status when the worker exited normally, else -1.
  int exit_code = -1;
  /// The signal that killed the worker, else 0.
  int signal = 0;
  /// True when the launcher had told the worker to stop before it ended (a
  /// consequence of another failure or of a signal to the launcher).
  bool stopped = false;
  /// The node it ran on (GROUP_RANK) and that node's address.
  int node_rank = 0;
  std::string node_addr;
  /// The message of the error record the worker wrote to
  /// TORCHELASTIC_ERROR_FILE (its uncaught exception), else empty.
  std::string error_message;
  /// When the launcher saw the worker end, in seconds since the epoch (the
  /// clock of error records' timestamps); it ended then or a little before.
  /// 0 when it was not seen to end.
  double ended_at = 0;

  bool succeeded() const { return signal == 0 && exit_code == 0; }
  /// "exit code 3", "killed by SIGSEGV", or "did not exit" when it could not
  /// be reaped even after SIGKILL.
  std::string describe() const;
};

struct LaunchResult {
  /// This node's workers in the last round, by local rank.
  std::vector<WorkerExit> workers;
  /// The first worker that failed by itself (not stopped by the launcher).
  std::optional<WorkerExit> root_cause;
  /// SIGINT or SIGTERM received by the launcher, which then stopped the
  /// workers; 0 when none.
  int launcher_signal = 0;
  /// The store the workers were given (MASTER_ADDR / MASTER_PORT) in the
  /// last round, and the run.
  std::string master_addr;
  int master_port = 0;
  std::string run_id;
  /// Rounds this agent took part in, and the restarts spent after failures.
  int rounds = 0;
  int restarts = 0;
  /// Multi-node runs whose restarts ran out: the first failure recorded in
  /// the last round by any node ("worker rank 3 on node 1 (10.0.0.2, pid
  /// 77) failed: exit code 1: <message>"), which may be another node's.
  std::string first_failure;
  /// Failures of earlier rounds that were recovered by a restart, as
  /// summary-style lines (oldest first).
  std::vector<std::string> recovered_failures;
  /// LaunchOptions::Recovery::kLive: workers of this node that failed and
  /// were not replaced (max_restarts used up) while the job finished without
  /// them. Not in `workers`; each replacement is a line of
  /// recovered_failures.
  std::vector<WorkerExit> lost_workers;

  /// Every worker exited 0 and the launcher was not signalled.
  bool succeeded() const;
  /// The process exit code `dtrain run` uses: 0 on success, 128+signal when
  /// the launcher was signalled, else 1.
  int exit_code() const;
  /// Human-readable lines, empty on success: one per worker that failed or was
  /// stopped ("worker rank 1 (pid 4242) failed: exit code 3"), then the root
  /// cause ("root cause: worker rank 1 (pid 4242) failed first: exit code 3";
  /// in a parameter-server job "scheduler (pid …)" / "server 1 (pid …)" name
  /// those roles and the others are counted as "other process(es) stopped")
  /// or the launcher's signal.
  std::vector<std::string> summary() const;
};

/// Runs this node's agent until the job ends: joins the rendezvous, runs the
/// workers, restarts them as described above, and reports how the last round
/// ended. Blocks; every internal wait is bounded (rendezvous by its join
/// timeout, workers by the grace period after a failure or signal). Worker
/// failures are results, not exceptions. Throws InvalidArgument for bad
/// options (naming the field: "LaunchOptions::max_restarts must not be
/// negative, got -1") or a program that cannot be found, StoreError when
/// the store cannot be hosted or reached (naming host:port), TimeoutError
/// when a round cannot complete (naming the endpoint and the nodes that
/// arrived), and Error when a worker cannot be started (workers already
/// started are stopped first) or the rendezvous was closed by another node.
/// `dtrain run` reports the same errors with its flags for the fields.
LaunchResult launch(const LaunchOptions& options);

}  // namespace dtrain
