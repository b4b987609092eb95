#pragma once
// Real processes for the parameter-server tests: a Job forks and execs
// nodes with their own environment, captures each one's output in a file,
// and kills and reaps whatever is left when it goes out of scope.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace dtrain::testing {

using Clock = std::chrono::steady_clock;
using Env = std::map<std::string, std::string>;

struct Child {
  pid_t pid = -1;
  std::string name;
  std::string log;  // its stderr
  int status = -1;  // waitpid status once reaped
  bool reaped = false;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Kills and reaps whatever is still running when a test ends.
class Job {
 public:
  ~Job() {
    for (auto& c : children_) {
      if (!c.reaped) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, &c.status, 0);
      }
      std::remove(c.log.c_str());
    }
  }
  /// Starts `program` (default: tests/ps/ps_node) with exactly `env` and
  /// the arguments `args`.
  Child& spawn(const std::string& name, const Env& env,
               const std::string& program = std::string(DTRAIN_BINARY_DIR) + "/tests/ps/ps_node",
               std::vector<std::string> args = {}) {
    Child c;
    c.name = name;
    static int serial = 0;
    c.log = ::testing::TempDir() + "ps_" + std::to_string(::getpid()) + "_" +
            std::to_string(serial++) + "_" + name + ".log";
    // Created here, not in the child, so the parent never reads a stale file.
    std::ofstream(c.log, std::ios::trunc).close();
    std::vector<std::string> vars;
    for (const auto& [k, v] : env) vars.push_back(k + "=" + v);
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(c.log.c_str(), O_WRONLY | O_APPEND);
      ::dup2(fd, 2);
      ::dup2(fd, 1);
      std::vector<char*> envp;
      for (auto& v : vars) envp.push_back(v.data());
      envp.push_back(nullptr);
      std::vector<char*> argv{const_cast<char*>(program.c_str())};
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execve(program.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    c.pid = pid;
    children_.push_back(c);
    return children_.back();
  }
  // Waits until `c`'s log contains `text`; false after `limit`.
  static bool wait_for_text(const Child& c, const std::string& text, std::chrono::seconds limit) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      if (read_file(c.log).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // Reaps every child within `limit`; true if all ended.
  bool wait_all(std::chrono::seconds limit) {
    const auto end = Clock::now() + limit;
    for (;;) {
      bool all = true;
      for (auto& c : children_) {
        if (c.reaped) continue;
        if (::waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
          c.reaped = true;
        } else {
          all = false;
        }
      }
      if (all) return true;
      if (Clock::now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  std::deque<Child>& children() { return children_; }

 private:
  std::deque<Child> children_;
};

// The heartbeat timeout of job_env's processes, in seconds.
constexpr int kJobHeartbeatTimeoutSeconds = 3;

inline Env job_env(const std::string& role, int port, int servers, int workers) {
  return {{"DMLC_ROLE", role},
          {"DMLC_PS_ROOT_URI", "127.0.0.1"},
          {"DMLC_PS_ROOT_PORT", std::to_string(port)},
          {"DMLC_NUM_SERVER", std::to_string(servers)},
          {"DMLC_NUM_WORKER", std::to_string(workers)},
          {"PS_HEARTBEAT_INTERVAL", "1"},
          {"PS_HEARTBEAT_TIMEOUT", std::to_string(kJobHeartbeatTimeoutSeconds)}};
}

}  // namespace dtrain::testing
