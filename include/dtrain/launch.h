#pragma once
// The single-node launcher behind `dtrain run`, the C++ counterpart of
// torchrun --standalone. It hosts the rendezvous store, starts N worker
// processes with torchrun's environment (see shared/CONTRACTS.md), relays
// their output line by line prefixed with the rank, and watches them: the
// first worker to fail makes the launcher stop the others (SIGTERM, then
// SIGKILL after a grace period), and that worker is reported as the root cause.
//
// Usage:
//   dtrain::LaunchOptions options;
//   options.nproc_per_node = 2;
//   options.command = {"dtrain", "train", "--model", "cnn"};
//   dtrain::LaunchResult result = dtrain::launch(options);
//   for (const auto& line : result.summary()) std::cerr << line << "\n";
//   return result.exit_code();
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

  /// torchrun --standalone: host the store on 127.0.0.1 at a free port and,
  /// when run_id is empty, generate a run id. master_addr and master_port are
  /// ignored. Without it the defaults below already give a local store on a
  /// free port; standalone only matters when they were changed.
  bool standalone = false;

  /// Address the workers are told to reach the store at (MASTER_ADDR). The
  /// store itself listens on every interface.
  std::string master_addr = "127.0.0.1";

  /// Port the launcher hosts the store on (MASTER_PORT); 0 picks a free one.
  /// A port in use makes launch() throw StoreError naming host:port.
  int master_port = 0;

  /// The worker program and its arguments, passed verbatim. A program name
  /// without '/' is looked up on the workers' PATH, like execvp.
  /// REQUIRES: not empty.
  std::vector<std::string> command;

  /// How long stopped workers get between SIGTERM and SIGKILL.
  std::chrono::milliseconds stop_grace_period = std::chrono::seconds(5);

  /// Longest time between two checks of the workers' state. Exits are
  /// normally noticed at once (SIGCHLD); this bounds the delay otherwise.
  std::chrono::milliseconds monitor_interval = std::chrono::milliseconds(100);

  /// Prefix every line a worker writes with "[rank<N>]: ". When false and
  /// log_dir is unset, workers write straight to stdout_fd / stderr_fd.
  bool tag_output = true;

  /// TORCHELASTIC_RUN_ID. Empty: a generated id with standalone, else "none"
  /// (torchrun's defaults).
  std::string run_id;

  /// When set, each worker's output is also written, unprefixed, to
  /// <log_dir>/<run_id>/attempt_0/<local_rank>/{stdout,stderr}.log (torchrun's
  /// layout). The directories are created; failing to create them throws.
  std::optional<std::string> log_dir;

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
};

/// How one worker ended.
struct WorkerExit {
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

  bool succeeded() const { return signal == 0 && exit_code == 0; }
  /// "exit code 3", "killed by SIGSEGV", or "did not exit" when it could not
  /// be reaped even after SIGKILL.
  std::string describe() const;
};

struct LaunchResult {
  /// One entry per worker, indexed by rank.
  std::vector<WorkerExit> workers;
  /// The first worker that failed by itself (not stopped by the launcher).
  std::optional<WorkerExit> root_cause;
  /// SIGINT or SIGTERM received by the launcher, which then stopped the
  /// workers; 0 when none.
  int launcher_signal = 0;
  /// The store the workers were given (MASTER_ADDR / MASTER_PORT) and the run.
  std::string master_addr;
  int master_port = 0;
  std::string run_id;

  /// Every worker exited 0 and the launcher was not signalled.
  bool succeeded() const;
  /// The process exit code `dtrain run` uses: 0 on success, 128+signal when
  /// the launcher was signalled, else 1.
  int exit_code() const;
  /// Human-readable lines, empty on success: one per worker that failed or was
  /// stopped ("worker rank 1 (pid 4242) failed: exit code 3"), then the root
  /// cause ("root cause: worker rank 1 (pid 4242) failed first: exit code 3")
  /// or the launcher's signal.
  std::vector<std::string> summary() const;
};

/// Hosts the store, runs the workers until all have exited, and reports how
/// they ended. Blocks; every internal wait is bounded, so it returns once the
/// workers end or have been stopped (at most the grace period plus a few
/// seconds after a failure or signal). Worker failures are results, not
/// exceptions. Throws InvalidArgument for bad options or a program that cannot
/// be found, StoreError when the store cannot be hosted (naming host:port), and
/// Error when a worker cannot be started (workers already started are stopped
/// first).
LaunchResult launch(const LaunchOptions& options);

}  // namespace dtrain
