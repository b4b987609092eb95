#include "dtrain/launch.h"

#include <filesystem>
#include <system_error>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/store.h"
#include "launch/launcher.h"
#include "launch/output.h"
#include "launch/signals.h"
#include "launch/worker_group.h"

namespace dtrain {
namespace {

std::string worker_name(const WorkerExit& w) {
  return cat("worker rank ", w.rank, " (pid ", w.pid, ")");
}

/// <log_dir>/<run_id>/attempt_<n>/<local_rank>, created.
std::string make_log_dir(const std::string& root, const std::string& run_id, int attempt,
                         int local_rank) {
  std::filesystem::path dir =
      std::filesystem::path(root) / run_id / cat("attempt_", attempt) / std::to_string(local_rank);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(cat("cannot create the log directory '", dir.string(), "': ", ec.message()));
  return dir.string();
}

void note(int fd, const std::string& line) {
  detail::write_all(fd, cat("dtrain run: ", line, "\n"));
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
  for (const auto& w : workers) {
    if (w.succeeded()) continue;
    if (w.stopped) {
      ++stopped;
      lines.push_back(cat(worker_name(w), " was stopped: ", w.describe()));
    } else {
      lines.push_back(cat(worker_name(w), " failed: ", w.describe()));
    }
  }
  if (root_cause) {
    lines.push_back(cat("root cause: ", worker_name(*root_cause), " failed first: ",
                        root_cause->describe(), "; ", stopped, " other worker(s) stopped"));
  } else if (launcher_signal != 0) {
    lines.push_back(cat("received ", detail::signal_name(launcher_signal), "; stopped ", stopped,
                        " worker(s)"));
  }
  return lines;
}

LaunchResult launch(const LaunchOptions& options) {
  detail::PosixProcessControl control;
  return detail::launch(options, control);
}

namespace detail {

LaunchResult launch(const LaunchOptions& raw_options, ProcessControl& control) {
  const LaunchOptions o = resolve_launch_options(raw_options);
  const std::vector<std::string> base = o.environment ? *o.environment : current_environment();
  const std::string path =
      find_program(o.command[0], env_value(base, "PATH").value_or(kDefaultPath));

  // Hosted for as long as any worker may use it: destroyed after the group.
  auto server = TcpStoreServer::start({o.master_addr, o.master_port});
  JobInfo job{o.master_addr, server->port(), o.run_id};
  if (sets_omp_num_threads(base, o.nproc_per_node)) {
    note(o.stderr_fd, cat("setting OMP_NUM_THREADS=1 for each of the ", o.nproc_per_node,
                          " workers to avoid overloading the machine; set it yourself to tune"));
  }

  std::vector<WorkerSpec> specs;
  for (int local_rank = 0; local_rank < o.nproc_per_node; ++local_rank) {
    WorkerIdentity who;
    who.rank = who.local_rank = local_rank;
    who.world_size = who.local_world_size = o.nproc_per_node;
    WorkerSpec spec;
    spec.rank = who.rank;
    spec.local_rank = who.local_rank;
    spec.process.path = path;
    spec.process.argv = o.command;
    spec.process.env = worker_environment(base, who, job);
    if (o.log_dir) {
      std::string dir = make_log_dir(*o.log_dir, o.run_id, 0, local_rank);
      spec.stdout_log = dir + "/stdout.log";
      spec.stderr_log = dir + "/stderr.log";
    }
    specs.push_back(std::move(spec));
  }

  std::optional<SignalWatch> signals;
  if (o.handle_signals) signals.emplace();
  WorkerGroupOptions group_options;
  group_options.stop_grace_period = o.stop_grace_period;
  group_options.monitor_interval = o.monitor_interval;
  group_options.tag_output = o.tag_output;
  group_options.stdout_fd = o.stdout_fd;
  group_options.stderr_fd = o.stderr_fd;
  WorkerGroup group(control, group_options);
  group.start(std::move(specs));
  WorkerGroupOutcome outcome = group.wait(signals ? &*signals : nullptr);

  LaunchResult result;
  result.workers = std::move(outcome.exits);
  if (outcome.root_cause) result.root_cause = result.workers[*outcome.root_cause];
  result.launcher_signal = outcome.signal;
  result.master_addr = job.master_addr;
  result.master_port = job.master_port;
  result.run_id = job.run_id;
  return result;
}

}  // namespace detail
}  // namespace dtrain
