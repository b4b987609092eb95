#pragma once
// Several "hosts" on one machine for the elastic launcher tests: network
// namespaces joined through a bridge that lives in its own namespace, and
// processes started inside them with their output in files.
//
// Layout for a cluster made by process P (names are unique per test process):
//   namespace dt<P>sw       : bridge "dtbr", veth ends "p0".."pN-1"
//   namespace dt<P>n<i>     : veth "eth0" with 10.216.<P % 250>.<i+1>/24, lo up
// Only these addresses are used, and only inside these namespaces.
// Everything is removed (processes in the namespaces killed first) by the
// destructor. create() returns null, with the reason, where namespaces
// cannot be made (no root, no `ip`), so tests can skip.

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launch_test_util.h"

extern char** environ;

namespace dtrain::testing {

/// Runs a shell command quietly; true on exit status 0.
inline bool sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

class NetnsCluster {
 public:
  static std::unique_ptr<NetnsCluster> create(int nodes, std::string* why_not) {
    std::unique_ptr<NetnsCluster> c(new NetnsCluster(nodes));
    if (!c->build()) {
      *why_not = "cannot create network namespaces here (needs root and iproute2): " + c->failed_;
      return nullptr;
    }
    return c;
  }
  ~NetnsCluster() {
    for (const auto& ns : created_) {
      // Kill whatever still runs inside (only processes in our namespaces).
      sh("for p in $(ip netns pids " + ns + "); do kill -9 $p; done");
    }
    for (const auto& ns : created_) sh("ip netns del " + ns);
  }
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  int nodes() const { return nodes_; }
  std::string ns(int i) const { return prefix_ + "n" + std::to_string(i); }
  std::string addr(int i) const { return subnet_ + std::to_string(i + 1); }
  /// argv prefix that runs a command inside node i's namespace.
  std::vector<std::string> exec_in(int i) const { return {"ip", "netns", "exec", ns(i)}; }

 private:
  explicit NetnsCluster(int nodes) : nodes_(nodes) {
    int p = static_cast<int>(::getpid());
    prefix_ = "dt" + std::to_string(p);
    subnet_ = "10.216." + std::to_string(p % 250) + ".";
  }

  bool run(const std::string& command) {
    if (sh(command)) return true;
    if (failed_.empty()) failed_ = "'" + command + "' failed";
    return false;
  }

  bool build() {
    const std::string sw = prefix_ + "sw";
    if (!run("ip netns add " + sw)) return false;
    created_.push_back(sw);
    if (!run("ip -n " + sw + " link add dtbr type bridge") ||
        !run("ip -n " + sw + " link set dtbr up")) {
      return false;
    }
    for (int i = 0; i < nodes_; ++i) {
      const std::string n = ns(i), peer = "p" + std::to_string(i);
      if (!run("ip netns add " + n)) return false;
      created_.push_back(n);
      if (!run("ip -n " + n + " link add eth0 type veth peer name " + peer + " netns " + sw) ||
          !run("ip -n " + sw + " link set " + peer + " master dtbr") ||
          !run("ip -n " + sw + " link set " + peer + " up") ||
          !run("ip -n " + n + " addr add " + addr(i) + "/24 dev eth0") ||
          !run("ip -n " + n + " link set eth0 up") || !run("ip -n " + n + " link set lo up")) {
        return false;
      }
    }
    // The first packets across a fresh bridge can be lost while it learns.
    for (int i = 1; i < nodes_; ++i) sh("ip netns exec " + ns(0) + " ping -c1 -W1 " + addr(i));
    return true;
  }

  int nodes_;
  std::string prefix_;
  std::string subnet_;
  std::vector<std::string> created_;
  std::string failed_;
};

/// A process started with its stdout and stderr in one file and in its own
/// process group; killed (SIGKILL, the whole group) and reaped on destruction.
class Proc {
 public:
  Proc(const std::vector<std::string>& argv, const std::string& output_path,
       const std::vector<std::string>& extra_env = {})
      : output_path_(output_path) {
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> args, envp;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    if (posix_spawnp(&pid_, args[0], &actions, &attr, args.data(), envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  ~Proc() {
    if (pid_ > 0 && !status_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  int pid() const { return pid_; }
  void signal(int sig) const {
    if (pid_ > 0 && !status_) ::kill(pid_, sig);
  }
  /// Waits up to `timeout` for the process to exit; its wait status, or -1
  /// when it is still running.
  int wait(std::chrono::milliseconds timeout) {
    if (status_) return *status_;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = status;
        return status;
      }
      if (std::chrono::steady_clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  /// The exit code after wait(), or -1 (still running, or killed by a signal).
  int exit_code() const { return status_ && WIFEXITED(*status_) ? WEXITSTATUS(*status_) : -1; }
  std::string output() const { return read_file(output_path_); }

 private:
  std::string output_path_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

/// Direct children of `pid` (from /proc), e.g. an agent's workers.
inline std::vector<int> children_of(int pid) {
  std::vector<int> kids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = read_file("/proc/" + name + "/stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == pid && state != "Z") kids.push_back(std::stoi(name));
  }
  return kids;
}

}  // namespace dtrain::testing
