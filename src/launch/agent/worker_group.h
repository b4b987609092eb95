#pragma once
// A group of local worker processes watched as one: started together, their
// output relayed, and stopped together as soon as one fails. The agent
// (agent.cpp) runs one group per rendezvous round.

#include <poll.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/launch.h"
#include "launch/process/line_relay.h"
#include "launch/process/process.h"

namespace dtrain::detail {

class SignalWatch;

struct WorkerSpec {
  /// "worker", or "scheduler" / "server" (WorkerExit::role): names the
  /// output tag "[rank<N>]: ", "[scheduler]: " or "[server<N>]: ".
  std::string role = "worker";
  int rank = 0;
  int local_rank = 0;
  /// stdout_fd / stderr_fd are filled in by the group.
  ProcessSpec process;
  /// Files that also get the worker's output; empty: none.
  std::string stdout_log;
  std::string stderr_log;
  /// Relay the stream to the group's stdout_fd / stderr_fd. False (torchrun
  /// --redirects): it goes to its log file only.
  bool relay_stdout = true;
  bool relay_stderr = true;
  /// How many times the group restarts this process alone when it fails by
  /// itself, instead of stopping everyone (a parameter-server server with a
  /// snapshot directory: Note [Restarting a server] in worker_group.cpp).
  int restarts_alone = 0;
  /// Variables set (replacing the spec's) when the process is restarted alone:
  /// a live-recovery replacement's DTRAIN_LIVE_JOIN=1.
  std::map<std::string, std::string> restart_env;
  /// The process's TORCHELASTIC_ERROR_FILE, for the live-recovery note on a
  /// replacement (empty: none).
  std::string error_file;
  /// Live recovery: the worker's DTRAIN_LIVE_MEMBER; replacement n gets
  /// "<live_member>+<n>" (member ids are never reused). Empty: not live.
  std::string live_member;
};

struct WorkerGroupOptions {
  std::chrono::milliseconds stop_grace_period = std::chrono::seconds(5);
  std::chrono::milliseconds monitor_interval = std::chrono::milliseconds(100);
  /// Prefix relayed lines with "[rank<N>]: " (see WorkerSpec::role).
  bool tag_output = true;
  /// Destinations of the relayed output (borrowed).
  int stdout_fd = 1;
  int stderr_fd = 2;
  /// Live recovery (Note [Live supervision] in worker_group.cpp): how many
  /// replacements of failed workers ("worker" role) the group may start, in
  /// all; -1: not live (a failure stops the group).
  int live_replacements = -1;
  /// Live recovery: asked before a failed worker is replaced, with its error
  /// record's type and message (empty: none); false leaves it dead (the
  /// library ended the job as a whole). Empty: always replace.
  std::function<bool(const std::string& error_type, const std::string& message)> live_replaceable;
  /// Live recovery: told when a worker with a live_member failed by itself
  /// (its member id as the library knows it, and "exit code 3" / "killed by
  /// SIGKILL"), before any replacement starts. Must not block for long.
  std::function<void(const std::string& member, const std::string& how)> live_on_death;
};

struct WorkerGroupOutcome {
  /// In the order the workers were given to start().
  std::vector<WorkerExit> exits;
  /// Index into exits of the first worker that failed by itself.
  std::optional<size_t> root_cause;
  /// SIGINT/SIGTERM that made the group stop, else 0.
  int signal = 0;
  /// The group was stopped because `should_stop` returned true (a membership
  /// change), not because of a failure or a signal.
  bool interrupted = false;
  /// Live recovery: one line per worker replaced during the wait ("worker
  /// rank 1 (pid 4242) failed: killed by SIGKILL; replaced by pid 4250").
  std::vector<std::string> replacements;
};

/// Not thread-safe. Destroying the group kills (SIGKILL) and reaps workers
/// that are still running.
class WorkerGroup {
 public:
  /// `control` must outlive the group.
  WorkerGroup(ProcessControl& control, WorkerGroupOptions options);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  /// Starts every worker. Throws when one cannot be started; those already
  /// started are then killed and reaped.
  void start(std::vector<WorkerSpec> specs);

  /// Relays output and watches the workers until all have ended. The first
  /// failure, or SIGINT/SIGTERM seen on `signals` (may be null), stops the
  /// rest: SIGTERM to each worker's process group, SIGKILL after the grace
  /// period (at once on a second signal). Bounded: returns at most a few
  /// seconds after the SIGKILL even if a worker cannot be reaped.
  /// `should_stop` (may be empty) is asked at most once per monitor interval
  /// while every worker is still running; true stops the group the same way
  /// and marks the outcome `interrupted`. It must not block for long.
  WorkerGroupOutcome wait(SignalWatch* signals, const std::function<bool()>& should_stop = {});

 private:
  struct Worker;
  void start_process(Worker& w);
  bool restart_alone(Worker& w, const ExitStatus& status);
  bool replace_live(Worker& w, const ExitStatus& status);
  void stop(int signal);
  void on_signals(SignalWatch& signals);
  void reap();
  void read_ready(const std::vector<pollfd>& fds, const std::vector<int>& owners);
  bool all_ended() const;
  bool all_streams_closed() const;
  std::chrono::milliseconds poll_timeout() const;

  ProcessControl& control_;
  WorkerGroupOptions options_;
  /// Shared by the relays that write to a terminal (LineRelay).
  std::shared_ptr<TerminalLine> terminal_ = std::make_shared<TerminalLine>();
  std::vector<std::unique_ptr<Worker>> workers_;
  WorkerGroupOutcome outcome_;
  std::optional<std::chrono::steady_clock::time_point> stop_deadline_;
  std::optional<std::chrono::steady_clock::time_point> kill_deadline_;
  std::optional<std::chrono::steady_clock::time_point> drain_deadline_;
  /// Live recovery: a worker exited 0 (the job is finishing: no replacements).
  bool any_succeeded_ = false;
};

}  // namespace dtrain::detail
