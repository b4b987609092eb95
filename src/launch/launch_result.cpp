// How a run ended, in words: LaunchResult and WorkerExit (include/dtrain/launch.h).

#include "dtrain/launch.h"

#include "common/strings.h"
#include "launch/process/process.h"

namespace dtrain {
namespace {

/// "worker rank 3 (pid 4242)", with "on node 1 (10.0.0.2)" for multi-node runs;
/// "scheduler (pid 4242)", "server 1 (pid 4243)" in a parameter-server job.
std::string worker_name(const WorkerExit& w) {
  std::string name = w.role == "worker"      ? cat("worker rank ", w.rank, " (pid ", w.pid)
                     : w.role == "scheduler" ? cat("scheduler (pid ", w.pid)
                                             : cat(w.role, " ", w.rank, " (pid ", w.pid);
  if (w.node_rank > 0 || !w.node_addr.empty()) {
    name += cat(", node ", w.node_rank);
    if (!w.node_addr.empty()) name += cat(" at ", w.node_addr);
  }
  return name + ")";
}

/// ": <first line of the worker's error record>" or "".
std::string error_suffix(const WorkerExit& w) {
  return w.error_message.empty() ? "" : cat(": ", first_line(w.error_message));
}

}  // namespace

std::string WorkerExit::describe() const { return detail::describe_exit(exit_code, signal); }

bool LaunchResult::succeeded() const {
  if (launcher_signal != 0) return false;
  for (const auto& w : workers) {
    if (!w.succeeded()) return false;
  }
  return true;
}

int LaunchResult::exit_code() const {
  if (launcher_signal != 0) return 128 + launcher_signal;
  return succeeded() ? 0 : 1;
}

std::vector<std::string> LaunchResult::summary() const {
  std::vector<std::string> lines;
  if (succeeded()) return lines;
  int stopped = 0;
  bool ps_job = false;  // scheduler and servers are stopped too (LaunchOptions::ps_servers)
  for (const auto& w : workers) ps_job = ps_job || w.role != "worker";
  for (const auto& w : workers) {
    if (w.succeeded()) continue;
    if (w.stopped) {
      // A root cause stopped while it was still exiting is not an "other".
      const bool is_root = root_cause && root_cause->pid == w.pid && root_cause->role == w.role;
      if (!is_root) ++stopped;
      lines.push_back(cat(worker_name(w), " was stopped: ", w.describe()));
    } else {
      lines.push_back(cat(worker_name(w), " failed: ", w.describe(), error_suffix(w)));
    }
  }
  if (root_cause) {
    lines.push_back(cat("root cause: ", worker_name(*root_cause),
                        " failed first: ", root_cause->describe(), error_suffix(*root_cause), "; ",
                        stopped, ps_job ? " other process(es) stopped" : " other worker(s) stopped",
                        restarts > 0 ? cat(" (after ", restarts, " restart(s))") : std::string()));
    if (!first_failure.empty()) lines.push_back("first failure in the run: " + first_failure);
  } else if (launcher_signal != 0) {
    lines.push_back(cat("received ", detail::signal_name(launcher_signal), "; stopped ", stopped,
                        " worker(s)"));
  }
  return lines;
}

}  // namespace dtrain
