#pragma once
// Process control for the launcher: the seam between "which workers run" and
// "how a process is started, signalled and reaped". PosixProcessControl is the
// real one (fork + execve); tests can substitute their own.

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::detail {

/// How a child ended: exit_code >= 0 when it exited, else signal > 0.
struct ExitStatus {
  int exit_code = -1;
  int signal = 0;

  bool ok() const { return signal == 0 && exit_code == 0; }
  static ExitStatus from_wait_status(int status);
};

/// "exit code 3", "killed by SIGSEGV"; "did not exit" for {-1, 0}.
std::string describe_exit(int exit_code, int signal);

/// "SIGTERM", "SIGSEGV", ... or "signal 42".
std::string signal_name(int signal);

/// What to start. `path` is the resolved program (see find_program).
struct ProcessSpec {
  std::string path;
  /// argv, including argv[0].
  std::vector<std::string> argv;
  /// The complete environment, "KEY=VALUE" entries.
  std::vector<std::string> env;
  /// Descriptors that become the child's stdout / stderr; -1 inherits.
  int stdout_fd = -1;
  int stderr_fd = -1;
};

/// A started child, leader of its own process group. Not thread-safe.
/// Destroying a Process whose exit was not observed kills its group with
/// SIGKILL and reaps it (waiting a bounded time).
class Process {
 public:
  virtual ~Process() = default;
  virtual int pid() const = 0;
  /// Never blocks. Once the child has exited: kills what is left of its
  /// process group (stray grandchildren) with SIGKILL, reaps the child and
  /// returns its status; the same status on every later call.
  virtual std::optional<ExitStatus> poll() = 0;
  /// Sends `signal` to the child's process group; a no-op once it has exited.
  virtual void signal_group(int signal) = 0;
};

/// Starts processes. Implementations must be usable from one thread at a time.
class ProcessControl {
 public:
  virtual ~ProcessControl() = default;
  /// Starts `spec`. Throws Error naming the program when it cannot be
  /// executed; the failure is detected before returning.
  virtual std::unique_ptr<Process> start(const ProcessSpec& spec) = 0;
};

/// fork + execve. The child gets its own process group, PR_SET_PDEATHSIG =
/// SIGKILL (so it dies with the thread that started it), default signal
/// dispositions, an empty signal mask, and no inherited descriptors beyond
/// 0, 1, 2.
class PosixProcessControl : public ProcessControl {
 public:
  std::unique_ptr<Process> start(const ProcessSpec& spec) override;
};

/// Resolves `program` like execvp: a name containing '/' is used as is, any
/// other is searched in the ':'-separated `path_list` (empty entries mean the
/// current directory). Throws InvalidArgument naming the program (and PATH)
/// when no executable file is found.
std::string find_program(const std::string& program, const std::string& path_list);

}  // namespace dtrain::detail
