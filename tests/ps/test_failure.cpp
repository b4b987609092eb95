// Process death and bad launches, with real processes (tests/ps/ps_node.cpp):
// kill -9 of a server or a worker ends every other process non-zero, naming
// the dead node; bad DMLC_* is one line. Every child is reaped.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <algorithm>
#include <deque>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "cluster.h"

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;
using Env = std::map<std::string, std::string>;

const std::string kNode = std::string(DTRAIN_BINARY_DIR) + "/tests/ps/ps_node";

struct Child {
  pid_t pid = -1;
  std::string name;
  std::string log;  // its stderr
  int status = -1;  // waitpid status once reaped
  bool reaped = false;
};

std::string read_file(const std::string& path) {
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
  Child& spawn(const std::string& name, const Env& env) {
    Child c;
    c.name = name;
    static int serial = 0;
    c.log = ::testing::TempDir() + "ps_" + std::to_string(::getpid()) + "_" + std::to_string(serial++) +
            "_" + name + ".log";
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
      char* argv[] = {const_cast<char*>(kNode.c_str()), nullptr};
      ::execve(kNode.c_str(), argv, envp.data());
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
  // Reaps every child except `skip` within `limit`; true if all ended.
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

Env job_env(const std::string& role, int port, int servers, int workers) {
  return {{"DMLC_ROLE", role},
          {"DMLC_PS_ROOT_URI", "127.0.0.1"},
          {"DMLC_PS_ROOT_PORT", std::to_string(port)},
          {"DMLC_NUM_SERVER", std::to_string(servers)},
          {"DMLC_NUM_WORKER", std::to_string(workers)},
          {"PS_HEARTBEAT_INTERVAL", "1"},
          {"PS_HEARTBEAT_TIMEOUT", "3"}};
}

// Starts scheduler, 1 server, 2 workers; kills `victim` ("server" or
// "worker1") with SIGKILL once the workers run; checks every other process
// exits non-zero naming `named`.
void kill_and_check(const std::string& victim, const std::string& named) {
  const int port = testing::free_port();
  Job job;
  job.spawn("scheduler", job_env("scheduler", port, 1, 2));
  Child& server = job.spawn("server", job_env("server", port, 1, 2));
  Child& w_a = job.spawn("worker_a", job_env("worker", port, 1, 2));
  Child& w_b = job.spawn("worker_b", job_env("worker", port, 1, 2));
  ASSERT_TRUE(Job::wait_for_text(w_a, "running", std::chrono::seconds(30))) << read_file(w_a.log);
  ASSERT_TRUE(Job::wait_for_text(w_b, "running", std::chrono::seconds(30))) << read_file(w_b.log);
  Child* target = &server;
  if (victim == "worker1") {
    target = read_file(w_a.log).find("worker 1 running") != std::string::npos ? &w_a : &w_b;
  }
  const auto killed_at = Clock::now();
  ASSERT_EQ(::kill(target->pid, SIGKILL), 0);
  const bool all_ended = job.wait_all(std::chrono::seconds(30));
  for (const auto& c : job.children()) {
    EXPECT_TRUE(c.reaped) << c.name << " outlived the dead node: " << read_file(c.log);
  }
  ASSERT_TRUE(all_ended);
  const double took = std::chrono::duration<double>(Clock::now() - killed_at).count();
  std::cout << "every process ended " << took << " s after kill -9 of " << victim
            << " (heartbeat timeout 3 s)" << std::endl;
  for (const auto& c : job.children()) {
    if (&c == target) continue;
    const std::string log = read_file(c.log);
    EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 1) << c.name << ": " << log;
    EXPECT_NE(log.find(named), std::string::npos) << c.name << " does not name " << named << ": " << log;
  }
}

TEST(PsFailure, KillingTheServerEndsEveryOtherProcessNonZeroNamingIt) {
  kill_and_check("server", "server 0 (127.0.0.1:");
}

TEST(PsFailure, KillingAWorkerEndsEveryOtherProcessNonZeroNamingIt) {
  kill_and_check("worker1", "worker 1 (127.0.0.1:");
}

TEST(PsFailure, AFinishedJobEndsEveryProcessWithZero) {
  const int port = testing::free_port();
  Job job;
  for (const char* role : {"scheduler", "server", "server", "worker", "worker"}) {
    Env env = job_env(role, port, 2, 2);
    env["PS_NODE_STEPS"] = "5";
    job.spawn(std::string(role) + std::to_string(job.children().size()), env);
  }
  ASSERT_TRUE(job.wait_all(std::chrono::seconds(60)));
  for (const auto& c : job.children()) {
    EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << c.name << ": " << read_file(c.log);
  }
}

TEST(PsFailure, BadDmlcVariablesAreOneLineAndExitTwo) {
  Job job;
  Env env = job_env("worker", 1, 1, 1);
  env.erase("DMLC_PS_ROOT_URI");
  Child& c = job.spawn("bad_env", env);
  Env env2 = job_env("server", 1, 0, 1);
  Child& c2 = job.spawn("no_servers", env2);
  ASSERT_TRUE(job.wait_all(std::chrono::seconds(20)));
  const std::string log = read_file(c.log), log2 = read_file(c2.log);
  EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 2) << log;
  EXPECT_EQ(log, "ps_node: error: environment variable DMLC_PS_ROOT_URI is not set; set it as "
                 "MXNet's launch.py or an MXJob does (docs/ps.md)\n");
  EXPECT_TRUE(WIFEXITED(c2.status) && WEXITSTATUS(c2.status) == 2) << log2;
  EXPECT_NE(log2.find("DMLC_NUM_SERVER=0"), std::string::npos) << log2;
  EXPECT_EQ(std::count(log2.begin(), log2.end(), '\n'), 1) << log2;
}

}  // namespace
}  // namespace dtrain
