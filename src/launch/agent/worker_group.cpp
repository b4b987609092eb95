#include "launch/agent/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>

#include "common/error_file.h"
#include "common/fd.h"
#include "common/strings.h"
#include "launch/agent/worker_env.h"
#include "launch/process/signal_watch.h"

namespace dtrain::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// After the last worker ended, how long to wait for output still buffered in
/// pipes held open by stray descendants.
constexpr milliseconds kDrainTimeout{2000};
/// After SIGKILL, how long to wait for workers to become reapable.
constexpr milliseconds kKillTimeout{10000};
constexpr size_t kReadChunk = 64 * 1024;

}  // namespace

/// One of a worker's output pipes, relayed line by line. Outside the
/// anonymous namespace: WorkerGroup::Worker, declared in the header, holds
/// two (-Wsubobject-linkage).
struct WorkerStream {
  Fd fd;
  std::unique_ptr<LineRelay> relay;

  bool open() const { return fd.valid(); }
  void close() {
    relay->finish();
    fd.reset();
  }
};

namespace {

/// A pipe for the child's side of a stream, or -1 when the stream goes
/// straight to `dest` (no prefix and no log file). A relay to a terminal
/// passes redraws in place through (Note [Progress under dtrain run]).
int attach(WorkerStream& stream, Fd& child_end, const std::string& prefix, int dest,
           const std::string& log_path, bool tag, const std::shared_ptr<TerminalLine>& terminal) {
  if (!tag && log_path.empty()) return dest;
  Pipe pipe = make_pipe();
  ::fcntl(pipe.read.get(), F_SETFL, ::fcntl(pipe.read.get(), F_GETFL) | O_NONBLOCK);
  Fd log = log_path.empty() ? Fd() : open_log_file(log_path);
  stream.relay = std::make_unique<LineRelay>(tag ? prefix : "", dest, std::move(log),
                                             dest >= 0 && ::isatty(dest) == 1 ? terminal : nullptr);
  stream.fd = std::move(pipe.read);
  child_end = std::move(pipe.write);
  return child_end.get();
}

/// A restart of the process behind `stream`: a new pipe, the same relay.
/// Returns the child's descriptor.
int reattach(WorkerStream& stream, Fd& child_end) {
  Pipe pipe = make_pipe();
  ::fcntl(pipe.read.get(), F_SETFL, ::fcntl(pipe.read.get(), F_GETFL) | O_NONBLOCK);
  stream.fd = std::move(pipe.read);
  child_end = std::move(pipe.write);
  return child_end.get();
}

/// Relays what a dead process left in `stream`'s pipe (never blocks: the
/// pipe is non-blocking) and closes the pipe, keeping the relay.
void drain(WorkerStream& stream) {
  if (!stream.open()) return;
  char buf[kReadChunk];
  for (;;) {
    const ssize_t n = ::read(stream.fd.get(), buf, sizeof(buf));
    if (n > 0) {
      stream.relay->feed(std::string_view(buf, static_cast<size_t>(n)));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  stream.fd.reset();
}

}  // namespace

struct WorkerGroup::Worker {
  WorkerSpec spec;
  int restarts_left = 0;
  WorkerExit exit;
  std::unique_ptr<Process> process;
  WorkerStream out;
  WorkerStream err;
  bool ended = false;
  bool stop_sent = false;
  int replaced = 0;    // live replacements started
  std::string member;  // live recovery: the running process's member id
};

WorkerGroup::WorkerGroup(ProcessControl& control, WorkerGroupOptions options)
    : control_(control), options_(options) {}

WorkerGroup::~WorkerGroup() = default;

void WorkerGroup::start(std::vector<WorkerSpec> specs) {
  for (auto& spec : specs) {
    auto worker = std::make_unique<Worker>();
    worker->exit.role = spec.role;
    worker->exit.rank = spec.rank;
    worker->exit.local_rank = spec.local_rank;
    worker->restarts_left = spec.restarts_alone;
    worker->spec = std::move(spec);
    try {
      start_process(*worker);
    } catch (...) {
      workers_.clear();  // kills and reaps the ones already started
      throw;
    }
    workers_.push_back(std::move(worker));
  }
}

// Note [Progress under dtrain run]
// `dtrain train` redraws its progress line in place when its stdout is a
// terminal; under the launcher its stdout is a pipe to a LineRelay. So when
// the launcher's own stdout is a terminal it tells the workers so with
// DTRAIN_STDOUT_IS_TTY=1 (rank 0 then redraws in place, as it would on the
// terminal itself; otherwise it sets 0, so a value inherited from an outer
// launcher never makes a worker whose output is a file or pipe redraw), and
// its relays pass carriage returns through with the
// rank's tag (LineRelay's `terminal` argument, TerminalLine), as torchrun users see a tqdm bar.
constexpr const char* kStdoutIsTty = "DTRAIN_STDOUT_IS_TTY";

void WorkerGroup::start_process(Worker& w) {
  WorkerSpec spec = w.spec;
  const bool tty = options_.stdout_fd >= 0 && ::isatty(options_.stdout_fd) == 1;
  spec.process.env = set_variables(spec.process.env, {{kStdoutIsTty, tty ? "1" : "0"}});
  std::string prefix = spec.role == "worker"      ? cat("[rank", spec.rank, "]: ")
                       : spec.role == "scheduler" ? std::string("[scheduler]: ")
                                                  : cat("[", spec.role, spec.rank, "]: ");
  // On a restart a stream with a relay keeps it (tag, log file) on a new pipe.
  auto wire = [&](WorkerStream& stream, Fd& child_end, int dest, const std::string& log) {
    return stream.relay
               ? reattach(stream, child_end)
               : attach(stream, child_end, prefix, dest, log, options_.tag_output, terminal_);
  };
  Fd child_out, child_err;  // the child's ends, closed here once it has started
  spec.process.stdout_fd =
      wire(w.out, child_out, spec.relay_stdout ? options_.stdout_fd : -1, spec.stdout_log);
  spec.process.stderr_fd =
      wire(w.err, child_err, spec.relay_stderr ? options_.stderr_fd : -1, spec.stderr_log);
  w.process = control_.start(spec.process);
  w.exit.pid = w.process->pid();
}

// Note [Restarting a server]
// In a parameter-server job whose servers snapshot their shards
// (DMLC_PS_SNAPSHOT_DIR, docs/ps.md), a server that dies is restarted alone
// with the same command and environment: it registers with the scheduler as
// the dead server's replacement, reloads its snapshot, and the job goes on.
// Everyone else keeps running. Its output keeps its tag and log files. Once
// its restarts are used up, or while the group is stopping, a failure stops
// the group as any other does.
bool WorkerGroup::restart_alone(Worker& w, const ExitStatus& status) {
  if (w.restarts_left <= 0 || w.stop_sent || stop_deadline_) return false;
  --w.restarts_left;
  const std::string who = cat(w.spec.role, " ", w.spec.rank, " (pid ", w.exit.pid, ")");
  // What the dead process wrote is relayed before its pipes are replaced.
  drain(w.out);
  drain(w.err);
  try {
    start_process(w);
  } catch (const std::exception& e) {
    write_all(options_.stderr_fd,
              cat("dtrain run: ", who, " ", describe_exit(status.exit_code, status.signal),
                  "; restarting it failed: ", e.what(), "\n"));
    return false;
  }
  write_all(options_.stderr_fd,
            cat("dtrain run: ", who, " ", describe_exit(status.exit_code, status.signal),
                "; restarted it alone as pid ", w.exit.pid, " (DMLC_PS_SNAPSHOT_DIR is set: it ",
                "reloads its snapshot), ", w.restarts_left, " restart(s) of it left\n"));
  return true;
}

// Note [Live supervision]
// Under live recovery (LaunchOptions::Recovery::kLive) the workers survive a
// peer's loss themselves (dtrain/live.h): the group never stops the others
// because one failed. A failed worker is started again alone with the same
// RANK and DTRAIN_LIVE_JOIN=1 (WorkerSpec::restart_env): it joins the running
// job as a replacement and receives the state from a live peer. The budget
// (live_replacements, --max-restarts) is shared by the group. No replacement
// is started once a worker of the group exited 0 (the job is finishing), when
// the budget is spent, or when the dead worker's error record says the
// library ended the job (live_replaceable): the worker then stays dead and
// the others go on; the agent decides what the round's end means. Before
// any of that the agent is told (live_on_death) and marks the member dead in
// the workers' store (`<prefix>/dead/<member>`, which dtrain/live.h reads), so
// the survivors need not wait out the heartbeat timeout for a crash.
bool WorkerGroup::replace_live(Worker& w, const ExitStatus& status) {
  if (options_.live_replacements <= 0 || w.spec.role != "worker" || any_succeeded_ || w.stop_sent ||
      stop_deadline_) {
    return false;
  }
  std::string message, type;
  if (!w.spec.error_file.empty()) {
    if (auto record = read_error_file(w.spec.error_file)) {
      message = record->message;
      type = record->error_type;
    }
  }
  // The replacement must not be taken for the dead worker by its record.
  if (!w.spec.error_file.empty()) ::unlink(w.spec.error_file.c_str());
  if (options_.live_replaceable && !options_.live_replaceable(type, message)) return false;
  const std::string failed = cat("worker rank ", w.spec.rank, " (pid ", w.exit.pid,
                                 ") failed: ", describe_exit(status.exit_code, status.signal),
                                 message.empty() ? "" : ": " + first_line(message));
  drain(w.out);
  drain(w.err);
  w.spec.process.env = set_variables(w.spec.process.env, w.spec.restart_env);
  if (!w.spec.live_member.empty()) {
    w.member = cat(w.spec.live_member, "+", ++w.replaced);
    w.spec.process.env = set_variables(w.spec.process.env, {{"DTRAIN_LIVE_MEMBER", w.member}});
  }
  try {
    start_process(w);
  } catch (const std::exception& e) {
    write_all(options_.stderr_fd,
              cat("dtrain run: ", failed, "; starting its replacement failed: ", e.what(), "\n"));
    return false;
  }
  --options_.live_replacements;
  outcome_.replacements.push_back(cat(failed, "; replaced by pid ", w.exit.pid));
  write_all(options_.stderr_fd,
            cat("dtrain run: live recovery: ", failed,
                "; the other workers keep running; "
                "started a replacement as pid ",
                w.exit.pid, " (DTRAIN_LIVE_JOIN=1), ", options_.live_replacements,
                " replacement(s) left (--max-restarts)\n"));
  return true;
}

WorkerGroupOutcome WorkerGroup::wait(SignalWatch* signals,
                                     const std::function<bool()>& should_stop) {
  auto next_check = Clock::now() + options_.monitor_interval;
  std::vector<pollfd> fds;
  std::vector<int> owners;  // per entry of fds: 2*worker (+1 for stderr), -1 for signals
  while (true) {
    fds.clear();
    owners.clear();
    if (signals) {
      fds.push_back({signals->fd(), POLLIN, 0});
      owners.push_back(-1);
    }
    for (size_t i = 0; i < workers_.size(); ++i) {
      for (int which = 0; which < 2; ++which) {
        WorkerStream& s = which ? workers_[i]->err : workers_[i]->out;
        if (!s.open()) continue;
        fds.push_back({s.fd.get(), POLLIN, 0});
        owners.push_back(static_cast<int>(2 * i) + which);
      }
    }
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(poll_timeout().count()));
    if (rc < 0 && errno != EINTR) break;
    if (rc > 0) {
      if (signals && (fds[0].revents & POLLIN)) on_signals(*signals);
      read_ready(fds, owners);
    }
    reap();
    auto now = Clock::now();
    if (should_stop && !stop_deadline_ && !all_ended() && now >= next_check) {
      next_check = now + options_.monitor_interval;
      if (should_stop()) {
        outcome_.interrupted = true;
        stop(SIGTERM);
      }
    }
    if (stop_deadline_ && !kill_deadline_ && now >= *stop_deadline_) stop(SIGKILL);
    if (all_ended()) {
      if (all_streams_closed()) break;
      if (!drain_deadline_) drain_deadline_ = now + kDrainTimeout;
      if (now >= *drain_deadline_) break;
    } else if (kill_deadline_ && now >= *kill_deadline_) {
      break;  // unreapable after SIGKILL; the destructors try once more
    }
  }
  for (auto& w : workers_) {
    if (w->out.open()) w->out.close();
    if (w->err.open()) w->err.close();
    outcome_.exits.push_back(w->exit);
  }
  return outcome_;
}

void WorkerGroup::stop(int signal) {
  auto now = Clock::now();
  if (signal == SIGKILL) {
    kill_deadline_ = now + kKillTimeout;
  } else if (!stop_deadline_) {
    stop_deadline_ = now + options_.stop_grace_period;
  } else {
    return;  // already stopping
  }
  for (auto& w : workers_) {
    if (w->ended) continue;
    w->stop_sent = true;
    w->process->signal_group(signal);
  }
}

void WorkerGroup::on_signals(SignalWatch& signals) {
  for (int sig : signals.take()) {
    if (sig != SIGINT && sig != SIGTERM) continue;  // SIGCHLD: reap() looks
    if (outcome_.signal == 0) outcome_.signal = sig;
    if (!stop_deadline_) {
      stop(SIGTERM);
    } else if (!kill_deadline_) {
      stop(SIGKILL);  // a second signal while stopping: no more grace
    }
  }
}

void WorkerGroup::reap() {
  // Every worker that ended by now is reaped before stopping the others, so
  // that workers failing in the same tick are all failures, not "stopped"
  // (the agent picks the root cause among them by their error records).
  std::optional<size_t> first_failed;
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = *workers_[i];
    if (w.ended) continue;
    std::optional<ExitStatus> status = w.process->poll();
    if (!status) continue;
    // Right after the poll that saw it end, on the clock of error records'
    // timestamps (Note [Choosing the root cause] in round_decision.cpp).
    const double seen =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (!status->ok() && !w.stop_sent && options_.live_on_death && !w.spec.live_member.empty()) {
      options_.live_on_death(w.member.empty() ? w.spec.live_member : w.member,
                             describe_exit(status->exit_code, status->signal));
    }
    if (!status->ok() && (restart_alone(w, *status) || replace_live(w, *status))) continue;
    w.ended = true;
    w.exit.exit_code = status->exit_code;
    w.exit.signal = status->signal;
    w.exit.stopped = w.stop_sent;
    w.exit.ended_at = seen;
    if (status->ok()) any_succeeded_ = true;
    if (!status->ok() && !w.stop_sent && !first_failed) first_failed = i;
  }
  if (first_failed && !outcome_.root_cause) {
    outcome_.root_cause = first_failed;
    // Note [Live supervision]: the others keep running.
    if (options_.live_replacements < 0) stop(SIGTERM);
  }
}

void WorkerGroup::read_ready(const std::vector<pollfd>& fds, const std::vector<int>& owners) {
  char buf[kReadChunk];
  for (size_t k = 0; k < fds.size(); ++k) {
    if (owners[k] < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    Worker& w = *workers_[static_cast<size_t>(owners[k] / 2)];
    WorkerStream& s = owners[k] % 2 ? w.err : w.out;
    ssize_t n = ::read(s.fd.get(), buf, sizeof(buf));
    if (n > 0) {
      s.relay->feed(std::string_view(buf, static_cast<size_t>(n)));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      s.close();
    }
  }
}

bool WorkerGroup::all_ended() const {
  return std::all_of(workers_.begin(), workers_.end(), [](const auto& w) { return w->ended; });
}

bool WorkerGroup::all_streams_closed() const {
  return std::none_of(workers_.begin(), workers_.end(),
                      [](const auto& w) { return w->out.open() || w->err.open(); });
}

milliseconds WorkerGroup::poll_timeout() const {
  milliseconds timeout = options_.monitor_interval;
  auto now = Clock::now();
  auto stop_deadline = kill_deadline_ ? std::nullopt : stop_deadline_;
  for (const auto& deadline : {stop_deadline, kill_deadline_, drain_deadline_}) {
    if (!deadline) continue;
    auto left = std::chrono::duration_cast<milliseconds>(*deadline - now) + milliseconds(1);
    timeout = std::clamp(left, milliseconds(0), timeout);
  }
  return std::max(timeout, milliseconds(1));
}

}  // namespace dtrain::detail
