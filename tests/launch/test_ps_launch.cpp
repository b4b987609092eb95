// dtrain::launch() with ps_servers: a parameter-server job
// (scheduler, servers, workers) on one node, with tests/ps/ps_node as the
// program every role runs (it checks each pulled sum against the number of
// workers itself).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <sstream>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/launch.h"
#include "launch/launch_test_util.h"

namespace dtrain {
namespace {

using ::testing::HasSubstr;
using testing::process_alive;
using testing::TempDir;
using testing::WorkerRun;

/// `env VAR=... ps_node`: the launcher runs this same command for every role.
std::vector<std::string> ps_node_command(std::vector<std::string> vars) {
  std::vector<std::string> command = {"env"};
  command.insert(command.end(), vars.begin(), vars.end());
  command.push_back(PS_NODE);
  return command;
}

/// Every process of the job has been reaped and its process group is empty.
void expect_nothing_left(const LaunchResult& result) {
  for (const auto& w : result.workers) {
    EXPECT_FALSE(process_alive(w.pid)) << w.role << " " << w.rank << " pid " << w.pid;
    EXPECT_NE(::kill(-w.pid, 0), 0) << "process group of " << w.role << " " << w.rank;
  }
}

TEST(PsLaunch, TwoServersAndTwoWorkersSumExactlyAndEveryRoleExitsZero) {
  TempDir dir;
  WorkerRun run(dir, 2, {});
  run.options.ps_servers = 2;
  run.options.command = ps_node_command({"PS_NODE_STEPS=20"});
  LaunchResult result = launch(run.options);
  EXPECT_TRUE(result.succeeded()) << ::testing::PrintToString(result.summary()) << run.err();
  // Workers first (by local rank), then the scheduler and the servers.
  ASSERT_EQ(result.workers.size(), 5u);
  EXPECT_EQ(result.workers[0].role, "worker");
  EXPECT_EQ(result.workers[1].rank, 1);
  EXPECT_EQ(result.workers[2].role, "scheduler");
  EXPECT_EQ(result.workers[3].role, "server");
  EXPECT_EQ(result.workers[4].rank, 1);
  EXPECT_THAT(run.err(), HasSubstr("[rank1]: ps_node: worker 1 running"));
  expect_nothing_left(result);
}

TEST(PsLaunch, ACrashingWorkerIsTheRootCauseAndStopsTheSchedulerAndServers) {
  TempDir dir;
  WorkerRun run(dir, 2, {});
  run.options.ps_servers = 2;
  run.options.command = ps_node_command({"PS_NODE_STEPS=0", "PS_NODE_FAIL_RANK=1"});
  LaunchResult result = launch(run.options);
  EXPECT_EQ(result.exit_code(), 1);
  ASSERT_TRUE(result.root_cause.has_value()) << run.err();
  EXPECT_EQ(result.root_cause->role, "worker");
  EXPECT_EQ(result.root_cause->rank, 1);
  EXPECT_EQ(result.root_cause->exit_code, 3);
  ASSERT_EQ(result.workers.size(), 5u);
  for (size_t i : {0u, 2u, 3u, 4u}) EXPECT_TRUE(result.workers[i].stopped) << i;
  const std::string pid1 = std::to_string(result.workers[1].pid);
  EXPECT_EQ(result.summary().back(),
            "root cause: worker rank 1 (pid " + pid1 +
                ") failed first: exit code 3; 4 other process(es) stopped");
  EXPECT_THAT(::testing::PrintToString(result.summary()), HasSubstr("server 1 (pid "));
  expect_nothing_left(result);
}

TEST(PsLaunch, WithASnapshotDirADeadServerIsRestartedAloneAndTheJobFinishes) {
  TempDir dir;
  WorkerRun run(dir, 2, {});
  run.options.ps_servers = 2;
  std::vector<std::string> env = {"DMLC_PS_SNAPSHOT_DIR=" + dir.file("snapshots")};
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  run.options.environment = env;
  run.options.command = ps_node_command(
      {"PS_NODE_STEPS=150", "PS_NODE_OPTIMIZER=sgd lr=0.05 momentum=0.9", "PS_NODE_BIG=3000",
       "MXNET_KVSTORE_BIGARRAY_BOUND=1000", "PS_HEARTBEAT_TIMEOUT=5",
       "PS_NODE_KILL_ONE_SERVER=" + dir.file("killed"), "PS_NODE_KILL_AFTER_MS=1000"});
  LaunchResult result = launch(run.options);
  const std::string err = run.err();
  EXPECT_TRUE(result.succeeded()) << ::testing::PrintToString(result.summary()) << err;
  ASSERT_TRUE(std::filesystem::exists(dir.file("killed"))) << err;
  const auto restarted = err.find("killed by SIGKILL; restarted it alone as pid");
  ASSERT_NE(restarted, std::string::npos) << err;
  // Mid-job: no worker had finished when the server died.
  EXPECT_LT(restarted, err.find("final")) << err;
  // Both workers end with the same weights.
  auto final_values = [&](int rank) {
    const std::string tag = cat("ps_node: worker ", rank, " final");
    const auto at = err.find(tag);
    if (at == std::string::npos) return std::string("none");
    return err.substr(at + tag.size(), err.find('\n', at) - at - tag.size());
  };
  EXPECT_NE(final_values(0), "none") << err;
  EXPECT_EQ(final_values(0), final_values(1));
  expect_nothing_left(result);
}

/// A --ps-servers job of 2 processes in which every role prints the
/// variables below (LAUNCH_TEST_WORKER's `env` step); returns the output.
std::string ps_variables(LaunchOptions::PsWorkerPer per) {
  TempDir dir;
  WorkerRun run(dir, 2, {});
  run.options.ps_servers = 1;
  run.options.ps_worker_per = per;
  run.options.command = {LAUNCH_TEST_WORKER};
  for (const char* name : {"DMLC_ROLE", "DMLC_NUM_WORKER", "DMLC_WORKER_ID", "RANK", "LOCAL_RANK",
                           "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR"}) {
    run.options.command.push_back("env");
    run.options.command.push_back(name);
  }
  LaunchResult result = launch(run.options);
  EXPECT_TRUE(result.succeeded()) << ::testing::PrintToString(result.summary()) << run.err();
  expect_nothing_left(result);
  return run.out();
}

TEST(PsLaunch, WorkerPerNodeCountsTheNodeInDmlcNumWorkerAndKeepsEachProcesssTorchrunVariables) {
  const std::string out = ps_variables(LaunchOptions::PsWorkerPer::kNode);
  for (const char* line :
       {"[rank0]: DMLC_ROLE=worker\n", "[rank0]: DMLC_NUM_WORKER=1\n",
        "[rank0]: DMLC_WORKER_ID=0\n", "[rank0]: RANK=0\n", "[rank1]: DMLC_NUM_WORKER=1\n",
        "[rank1]: DMLC_WORKER_ID=0\n", "[rank1]: RANK=1\n", "[rank1]: LOCAL_RANK=1\n",
        "[rank1]: WORLD_SIZE=2\n", "[rank1]: LOCAL_WORLD_SIZE=2\n", "[rank1]: GROUP_RANK=0\n",
        "[rank1]: MASTER_ADDR=127.0.0.1\n", "[scheduler]: DMLC_NUM_WORKER=1\n",
        "[scheduler]: DMLC_WORKER_ID is unset\n", "[server0]: DMLC_NUM_WORKER=1\n"}) {
    EXPECT_THAT(out, HasSubstr(line));
  }
}

TEST(PsLaunch, WorkerPerProcessCountsProcessesInDmlcNumWorkerAndNumbersThemByRank) {
  const std::string out = ps_variables(LaunchOptions::PsWorkerPer::kProcess);
  for (const char* line : {"[rank0]: DMLC_NUM_WORKER=2\n", "[rank0]: DMLC_WORKER_ID=0\n",
                           "[rank1]: DMLC_NUM_WORKER=2\n", "[rank1]: DMLC_WORKER_ID=1\n",
                           "[rank1]: RANK=1\n", "[rank1]: LOCAL_WORLD_SIZE=2\n",
                           "[scheduler]: DMLC_NUM_WORKER=2\n", "[server0]: DMLC_NUM_WORKER=2\n"}) {
    EXPECT_THAT(out, HasSubstr(line));
  }
}

TEST(PsLaunch, PsServersOnSeveralNodesIsRefusedNamingTheAlternative) {
  LaunchOptions o;
  o.ps_servers = 1;
  o.min_nodes = o.max_nodes = 2;
  o.master_port = 29400;
  o.command = {"true"};
  EXPECT_THAT([&] { launch(o); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("one node only")));
}

/// The pids whose parent is `parent` (from /proc/<pid>/stat).
std::vector<int> children_of(int parent) {
  std::vector<int> pids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = testing::read_file(entry.path().string() + "/stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && state != "Z") pids.push_back(std::stoi(name));
  }
  return pids;
}

TEST(PsLaunch, SigtermToTheLauncherStopsTheSchedulerServersAndWorkersAndExits143) {
  TempDir dir;
  WorkerRun run(dir, 2, {});
  run.options.ps_servers = 1;
  run.options.handle_signals = true;
  run.options.command = ps_node_command({"PS_NODE_STEPS=0"});  // train until stopped
  const int launcher = ::fork();
  if (launcher == 0) {
    int code = 70;
    try {
      code = launch(run.options).exit_code();
    } catch (...) {
    }
    ::_exit(code);
  }
  std::vector<int> pids;  // 2 workers, the scheduler and the server
  bool running = testing::eventually(
      [&] {
        pids = children_of(launcher);
        return pids.size() == 4 && run.err().find("worker 1 running") != std::string::npos;
      },
      std::chrono::seconds(20));
  if (!running) ::kill(launcher, SIGKILL);
  ASSERT_TRUE(running) << run.err();
  ::kill(launcher, SIGTERM);
  int status = 0;
  bool ended = testing::eventually(
      [&] { return ::waitpid(launcher, &status, WNOHANG) == launcher; }, std::chrono::seconds(15));
  if (!ended) {
    ::kill(launcher, SIGKILL);
    ::waitpid(launcher, &status, 0);
  }
  ASSERT_TRUE(ended) << "the launcher did not exit after SIGTERM";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  for (int pid : pids) {
    EXPECT_TRUE(testing::eventually([&] { return !process_alive(pid); }, std::chrono::seconds(5)))
        << "pid " << pid << " outlived the launcher";
  }
}

}  // namespace
}  // namespace dtrain
