// Server snapshots and node recovery with real processes (tests/ps/ps_node.cpp,
// docs/ps.md): kill -9 of a server in a job with a snapshot directory, a
// replacement of the same rank, and the job's final values against an
// uninterrupted run's. Every child is reaped; every directory removed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "ps/cluster.h"
#include "ps/processes.h"

namespace dtrain {
namespace {

using namespace dtrain::testing;  // NOLINT: Job, Child, Env, read_file

constexpr int kRecoveryServers = 2;
constexpr int kRecoveryWorkers = 2;
constexpr int kRecoverySteps = 40;

// A snapshot directory of its own, removed at the end of the test.
struct TempDir {
  TempDir() {
    static int serial = 0;
    path = ::testing::TempDir() + "ps_snap_" + std::to_string(::getpid()) + "_" +
           std::to_string(serial++);
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

Env recovery_env(const std::string& role, int port, int servers, const std::string& dir) {
  Env env = job_env(role, port, servers, kRecoveryWorkers);
  env["DMLC_PS_SNAPSHOT_DIR"] = dir;
  env["PS_RECOVERY_TIMEOUT"] = "20";
  // Longer than test_failure.cpp's 3 s: a node of this busier job starved
  // of CPU for 3 s on a loaded machine must not be taken for dead.
  env["PS_HEARTBEAT_TIMEOUT"] = "5";
  env["PS_NODE_STEPS"] = std::to_string(kRecoverySteps);
  env["PS_NODE_OPTIMIZER"] = "sgd lr=0.05 momentum=0.9 wd=0.01";
  env["PS_NODE_BIG"] = "3000";  // split over both servers
  env["MXNET_KVSTORE_BIGARRAY_BOUND"] = "1000";
  // Note [Partitions]: 12,000 bytes in 3 parts, two on one server, so the
  // re-sent requests include parts that share a server.
  env["DTRAIN_KVSTORE_PARTITION_BYTES"] = "4000";
  return env;
}

// The "final" line of each worker rank's log.
std::map<int, std::string> finals(Job& job) {
  std::map<int, std::string> out;
  for (const auto& c : job.children()) {
    const std::string log = read_file(c.log);
    for (int r = 0; r < kRecoveryWorkers; ++r) {
      const std::string tag = "ps_node: worker " + std::to_string(r) + " final";
      const auto at = log.find(tag);
      if (at != std::string::npos) out[r] = log.substr(at, log.find('\n', at) - at);
    }
  }
  return out;
}

void expect_all_exit_zero(Job& job) {
  for (const auto& c : job.children()) {
    if (c.name == "killed") continue;
    EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0)
        << c.name << ": " << read_file(c.log);
  }
}

// Runs the job; with `kill_server`, kills server 0's process with SIGKILL
// once a worker has done 10 steps and starts a replacement at once.
std::map<int, std::string> run(bool kill_server) {
  TempDir dir;
  const int port = testing::free_port();
  Job job;
  job.spawn("scheduler", recovery_env("scheduler", port, kRecoveryServers, dir.path));
  Child& first = job.spawn("server_a", recovery_env("server", port, kRecoveryServers, dir.path));
  job.spawn("server_b", recovery_env("server", port, kRecoveryServers, dir.path));
  Child& worker = job.spawn("worker_a", recovery_env("worker", port, kRecoveryServers, dir.path));
  job.spawn("worker_b", recovery_env("worker", port, kRecoveryServers, dir.path));
  if (kill_server) {
    EXPECT_TRUE(Job::wait_for_text(worker, " step 10", std::chrono::seconds(60)))
        << read_file(worker.log);
    EXPECT_EQ(read_file(worker.log).find(" final"), std::string::npos)
        << "the job ended before the kill";
    EXPECT_EQ(::kill(first.pid, SIGKILL), 0);
    ::waitpid(first.pid, &first.status, 0);
    first.reaped = true;
    first.name = "killed";
    job.spawn("replacement", recovery_env("server", port, kRecoveryServers, dir.path));
  }
  const bool ended = job.wait_all(std::chrono::seconds(90));
  EXPECT_TRUE(ended) << "the job did not end";
  expect_all_exit_zero(job);
  if (kill_server) {
    EXPECT_NE(read_file(job.children().front().log).find("has replaced the dead server"),
              std::string::npos)
        << read_file(job.children().front().log);
    EXPECT_NE(read_file(worker.log).find("unanswered requests to server"), std::string::npos)
        << read_file(worker.log);
  }
  return finals(job);
}

TEST(PsRecovery, ARestartedServerResumesFromItsSnapshotAndTheJobEndsAsAnUninterruptedRunDoes) {
  const auto t0 = Clock::now();
  const auto reference = run(false);
  const auto t1 = Clock::now();
  ASSERT_EQ(reference.size(), static_cast<size_t>(kRecoveryWorkers));
  EXPECT_EQ(reference.at(0).substr(reference.at(0).find("final")),
            reference.at(1).substr(reference.at(1).find("final")));
  const auto recovered = run(true);
  std::cout << "uninterrupted job " << std::chrono::duration<double>(t1 - t0).count()
            << " s, with kill -9 and restart of a server "
            << std::chrono::duration<double>(Clock::now() - t1).count()
            << " s (heartbeat timeout 5 s)" << std::endl;
  ASSERT_EQ(recovered.size(), static_cast<size_t>(kRecoveryWorkers));
  EXPECT_EQ(recovered, reference);
}

// Kills the only server of a 1-server job at step 5; `before_restart` runs
// with the snapshot directory, then (if `restart`) a replacement starts.
// Returns after every process ended (30 s at most).
void kill_the_server(Job& job, const std::string& dir, bool restart,
                     const std::function<void()>& before_restart) {
  const int port = testing::free_port();
  auto env = [&](const std::string& role) {
    Env e = recovery_env(role, port, 1, dir);
    e["PS_RECOVERY_TIMEOUT"] = "2";
    e["PS_NODE_STEPS"] = "100000";
    return e;
  };
  job.spawn("scheduler", env("scheduler"));
  Child& server = job.spawn("server", env("server"));
  Child& worker = job.spawn("worker_a", env("worker"));
  job.spawn("worker_b", env("worker"));
  ASSERT_TRUE(Job::wait_for_text(worker, " step 5", std::chrono::seconds(60)))
      << read_file(worker.log);
  ASSERT_EQ(::kill(server.pid, SIGKILL), 0);
  ::waitpid(server.pid, &server.status, 0);
  server.reaped = true;
  server.name = "killed";
  before_restart();
  if (restart) job.spawn("replacement", env("server"));
  const bool ended = job.wait_all(std::chrono::seconds(30));
  if (!ended) {
    for (const auto& c : job.children()) std::cerr << c.name << ":\n" << read_file(c.log);
  }
  ASSERT_TRUE(ended) << "a process outlived the recovery timeout";
}

TEST(PsRecovery, WithoutAReplacementTheJobEndsNamingTheServerAfterTheRecoveryTimeout) {
  TempDir dir;
  Job job;
  kill_the_server(job, dir.path, false, [] {});
  for (const auto& c : job.children()) {
    if (c.name == "killed") continue;
    const std::string log = read_file(c.log);
    EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 1) << c.name << ": " << log;
    EXPECT_NE(log.find("server 0 (127.0.0.1:"), std::string::npos) << c.name << ": " << log;
    EXPECT_NE(log.find("no replacement registered within 2 s"), std::string::npos)
        << c.name << ": " << log;
  }
}

TEST(PsRecovery, AReplacementWhoseSnapshotIsTruncatedFailsWithOneLineNamingTheFile) {
  TempDir dir;
  Job job;
  const std::string file = dir.path + "/server0/key1.bin";
  kill_the_server(job, dir.path, true, [&] {
    ASSERT_TRUE(std::filesystem::exists(file));
    std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
  });
  const Child& replacement = job.children().back();
  const std::string log = read_file(replacement.log);
  EXPECT_TRUE(WIFEXITED(replacement.status) && WEXITSTATUS(replacement.status) == 1) << log;
  const auto at = log.find("ps_node: error: ");
  ASSERT_NE(at, std::string::npos) << log;
  const std::string line = log.substr(at, log.find('\n', at) - at);
  EXPECT_NE(line.find("snapshot file " + file + " is corrupt"), std::string::npos) << line;
  // The others end as without a replacement: the job cannot go on.
  for (const auto& c : job.children()) {
    if (c.name == "killed" || &c == &replacement) continue;
    EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 1)
        << c.name << ": " << read_file(c.log);
  }
}

}  // namespace
}  // namespace dtrain
