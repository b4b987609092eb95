#include "launch/process/process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "launch/process/line_relay.h"

namespace dtrain::detail {
namespace {

/// How long start() waits for the child to reach execve.
constexpr int kExecReportTimeoutMs = 30000;
/// How long a destructor waits for a SIGKILLed child to be reapable.
constexpr auto kReapTimeout = std::chrono::seconds(5);

/// NUL-terminated pointer arrays into `strings`, built before fork() so that
/// the child does not allocate.
std::vector<char*> c_array(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

/// Reports `err` to the parent through `report_fd` and exits the child.
[[noreturn]] void fail_child(int report_fd, int err) {
  ssize_t unused = ::write(report_fd, &err, sizeof(err));
  (void)unused;
  ::_exit(127);
}

/// Runs in the child between fork() and execve(): async-signal-safe calls
/// only. Never returns.
[[noreturn]] void exec_child(pid_t parent, const char* path, char* const argv[], char* const envp[],
                             int stdout_fd, int stderr_fd, int report_fd) {
  ::setpgid(0, 0);
  // Die with the launcher; if it is already gone, the signal will never come.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail_child(report_fd, errno);
  if (::getppid() != parent) ::_exit(128 + SIGKILL);
  // Handlers inherited from the launcher must not run here, and SIGPIPE may
  // have been ignored by it.
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    bool custom = (old.sa_flags & SA_SIGINFO)
                      ? old.sa_sigaction != nullptr
                      : old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN;
    if (custom || sig == SIGPIPE) {
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      ::sigaction(sig, &dfl, nullptr);
    }
  }
  if (stdout_fd >= 0 && ::dup2(stdout_fd, STDOUT_FILENO) < 0) fail_child(report_fd, errno);
  if (stderr_fd >= 0 && ::dup2(stderr_fd, STDERR_FILENO) < 0) fail_child(report_fd, errno);
#ifdef SYS_close_range
  // Descriptors the launcher holds (its store socket, other workers' pipes)
  // close at exec; report_fd is already close-on-exec. Old kernels: best effort.
  ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
#endif
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(path, argv, envp);
  fail_child(report_fd, errno);
}

class PosixProcess : public Process {
 public:
  explicit PosixProcess(pid_t pid) : pid_(pid) {}
  ~PosixProcess() override {
    if (status_) return;
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    auto deadline = std::chrono::steady_clock::now() + kReapTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  int pid() const override { return pid_; }

  std::optional<ExitStatus> poll() override {
    if (status_) return status_;
    // Look without reaping: while the exited leader is a zombie its pid (and
    // so its process group id) cannot be reused, so the group kill below can
    // only reach the worker's own descendants.
    siginfo_t info{};
    if (::waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      if (errno == ECHILD) status_ = ExitStatus{};  // reaped elsewhere; status unknown
      return status_;
    }
    if (info.si_pid == 0) return std::nullopt;
    ::kill(-pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0) {
      if (errno != EINTR) return status_ = ExitStatus{};
    }
    status_ = ExitStatus::from_wait_status(status);
    return status_;
  }

  void signal_group(int signal) override {
    if (status_) return;
    if (::kill(-pid_, signal) != 0) ::kill(pid_, signal);
  }

 private:
  pid_t pid_;
  std::optional<ExitStatus> status_;
};

/// Waits (bounded) for the child's exec report: an errno, or EOF on success.
/// Returns 0 when the exec succeeded (or the report did not come in time).
int read_exec_report(int fd) {
  pollfd p{fd, POLLIN, 0};
  int rc;
  do rc = ::poll(&p, 1, kExecReportTimeoutMs);
  while (rc < 0 && errno == EINTR);
  if (rc <= 0) return 0;
  int err = 0;
  ssize_t n;
  do n = ::read(fd, &err, sizeof(err));
  while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof(err)) ? err : 0;
}

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

ExitStatus ExitStatus::from_wait_status(int status) {
  if (WIFEXITED(status)) return ExitStatus{WEXITSTATUS(status), 0};
  if (WIFSIGNALED(status)) return ExitStatus{-1, WTERMSIG(status)};
  return ExitStatus{};
}

std::string signal_name(int signal) {
  switch (signal) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    case SIGXCPU:
      return "SIGXCPU";
    case SIGXFSZ:
      return "SIGXFSZ";
    case SIGSYS:
      return "SIGSYS";
    default:
      return cat("signal ", signal);
  }
}

std::string describe_exit(int exit_code, int signal) {
  if (signal > 0) return cat("killed by ", signal_name(signal));
  if (exit_code >= 0) return cat("exit code ", exit_code);
  return "did not exit";
}

std::unique_ptr<Process> PosixProcessControl::start(const ProcessSpec& spec) {
  if (spec.argv.empty()) throw InvalidArgument("cannot start a process without argv");
  std::vector<char*> argv = c_array(spec.argv);
  std::vector<char*> envp = c_array(spec.env);
  Pipe report = make_pipe();

  // Block every signal across fork() so that no launcher handler runs in the
  // child before it has reset them.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    exec_child(parent, spec.path.c_str(), argv.data(), envp.data(), spec.stdout_fd, spec.stderr_fd,
               report.write.get());
  }
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    throw Error(cat("cannot start '", spec.path, "': fork failed: ", std::strerror(fork_errno)));
  }
  ::setpgid(pid, pid);  // also in the child: whichever runs first wins the race
  auto process = std::make_unique<PosixProcess>(pid);
  report.write.reset();
  if (int err = read_exec_report(report.read.get())) {
    process->poll();
    throw Error(cat("cannot start '", spec.path, "': ", std::strerror(err)));
  }
  return process;
}

std::string find_program(const std::string& program, const std::string& path_list) {
  if (program.empty()) throw InvalidArgument("the program to run is empty");
  if (program.find('/') != std::string::npos) {
    errno = 0;
    if (is_executable_file(program)) return program;
    int err = errno;
    throw InvalidArgument(
        cat("cannot run '", program, "': ", err ? std::strerror(err) : "not an executable file"));
  }
  for (const auto& dir : split(path_list, ':')) {
    std::string candidate = dir.empty() ? program : cat(dir, "/", program);
    if (is_executable_file(candidate)) return candidate;
  }
  throw InvalidArgument(cat("program '", program, "' not found on PATH (", path_list, ")"));
}

}  // namespace dtrain::detail
