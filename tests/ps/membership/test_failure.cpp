// Process death and bad launches, with real processes (tests/ps/ps_node.cpp):
// kill -9 of a server or a worker ends every other process non-zero, naming
// the dead node; bad DMLC_* is one line. Every child is reaped.
#include <gtest/gtest.h>

#include <algorithm>

#include "ps/cluster.h"
#include "ps/processes.h"

namespace dtrain {
namespace {

using namespace dtrain::testing;  // NOLINT: Job, Child, Env, read_file

// How much later than the heartbeat timeout every other process may end
// after a kill -9: detection is checked every 50 ms and the verdict is one
// message, but a loaded 2-core CI machine can starve processes for seconds;
// a regression to a much later detection (or to none) still fails.
constexpr double kDetectionMarginSeconds = 10.0;

// Starts scheduler, 1 server, 2 workers; kills `victim` ("server" or
// "worker1") with SIGKILL once the workers run; checks every other process
// exits non-zero naming `named`, within the heartbeat timeout plus
// kDetectionMarginSeconds.
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
  if (victim == "scheduler") target = &job.children().front();
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
            << " (heartbeat timeout " << kJobHeartbeatTimeoutSeconds << " s)" << std::endl;
  EXPECT_LT(took, kJobHeartbeatTimeoutSeconds + kDetectionMarginSeconds)
      << "the others outlived the heartbeat timeout (" << kJobHeartbeatTimeoutSeconds
      << " s) by more than the margin after kill -9 of " << victim;
  for (const auto& c : job.children()) {
    if (&c == target) continue;
    const std::string log = read_file(c.log);
    EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 1) << c.name << ": " << log;
    EXPECT_NE(log.find(named), std::string::npos)
        << c.name << " does not name " << named << ": " << log;
  }
}

TEST(PsFailure, KillingTheServerEndsEveryOtherProcessNonZeroNamingIt) {
  kill_and_check("server", "server 0 (127.0.0.1:");
}

TEST(PsFailure, KillingAWorkerEndsEveryOtherProcessNonZeroNamingIt) {
  kill_and_check("worker1", "worker 1 (127.0.0.1:");
}

TEST(PsFailure, KillingTheSchedulerEndsEveryOtherProcessNonZeroNamingIt) {
  kill_and_check("scheduler", "the scheduler (127.0.0.1:");
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
    EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0)
        << c.name << ": " << read_file(c.log);
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
  EXPECT_EQ(log,
            "ps_node: error: environment variable DMLC_PS_ROOT_URI is not set; set it as "
            "MXNet's launch.py or an MXJob does (docs/ps.md)\n");
  EXPECT_TRUE(WIFEXITED(c2.status) && WEXITSTATUS(c2.status) == 2) << log2;
  EXPECT_NE(log2.find("DMLC_NUM_SERVER=0"), std::string::npos) << log2;
  EXPECT_EQ(std::count(log2.begin(), log2.end(), '\n'), 1) << log2;
}

}  // namespace
}  // namespace dtrain
