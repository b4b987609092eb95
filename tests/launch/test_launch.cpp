// dtrain::launch() end to end with real worker processes.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>

#include "dtrain/errors.h"
#include "dtrain/launch.h"
#include "launch/launch_test_util.h"

namespace dtrain {
namespace {

using testing::eventually;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::process_alive;
using testing::read_file;
using testing::TempDir;
using testing::WorkerRun;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(Launch, WorkersGetTheTorchrunEnvironment) {
  TempDir dir;
  std::vector<std::string> steps;
  for (const char* name :
       {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_USE_AGENT_STORE"}) {
    steps.insert(steps.end(), {"env", name});
  }
  WorkerRun run(dir, 2, steps);
  LaunchResult result = launch(run.options);

  ASSERT_TRUE(result.succeeded()) << ::testing::PrintToString(result.summary());
  EXPECT_EQ(result.exit_code(), 0);
  EXPECT_GT(result.master_port, 0);
  std::string out = run.out();
  for (int rank : {0, 1}) {
    std::string p = "[rank" + std::to_string(rank) + "]: ";
    EXPECT_THAT(out, HasSubstr(p + "RANK=" + std::to_string(rank) + "\n"));
    EXPECT_THAT(out, HasSubstr(p + "LOCAL_RANK=" + std::to_string(rank) + "\n"));
    EXPECT_THAT(out, HasSubstr(p + "ROLE_RANK=" + std::to_string(rank) + "\n"));
    EXPECT_THAT(out, HasSubstr(p + "WORLD_SIZE=2\n"));
    EXPECT_THAT(out, HasSubstr(p + "LOCAL_WORLD_SIZE=2\n"));
    EXPECT_THAT(out, HasSubstr(p + "ROLE_WORLD_SIZE=2\n"));
    EXPECT_THAT(out, HasSubstr(p + "GROUP_RANK=0\n"));
    EXPECT_THAT(out, HasSubstr(p + "GROUP_WORLD_SIZE=1\n"));
    EXPECT_THAT(out, HasSubstr(p + "ROLE_NAME=default\n"));
    EXPECT_THAT(out, HasSubstr(p + "MASTER_ADDR=127.0.0.1\n"));
    EXPECT_THAT(out, HasSubstr(p + "MASTER_PORT=" + std::to_string(result.master_port) + "\n"));
    EXPECT_THAT(out, HasSubstr(p + "TORCHELASTIC_RESTART_COUNT=0\n"));
    EXPECT_THAT(out, HasSubstr(p + "TORCHELASTIC_MAX_RESTARTS=0\n"));
    EXPECT_THAT(out, HasSubstr(p + "TORCHELASTIC_RUN_ID=none\n"));
    EXPECT_THAT(out, HasSubstr(p + "TORCHELASTIC_USE_AGENT_STORE=True\n"));
  }
}

TEST(Launch, WorkersCanConnectToTheStoreTheLauncherHosts) {
  TempDir dir;
  WorkerRun run(dir, 2, {"connect"});
  LaunchResult result = launch(run.options);
  ASSERT_TRUE(result.succeeded());
  EXPECT_THAT(run.out(), HasSubstr("[rank0]: connected\n"));
  EXPECT_THAT(run.out(), HasSubstr("[rank1]: connected\n"));
}

TEST(Launch, EveryOutputLineIsPrefixedWithItsRankOnTheSameStream) {
  TempDir dir;
  WorkerRun run(dir, 2,
                {"print", "first", "print", "second", "eprint", "oops", "partial", "no newline"});
  ASSERT_TRUE(launch(run.options).succeeded());
  std::string out = run.out(), err = run.err();
  for (std::string p : {"[rank0]: ", "[rank1]: "}) {
    EXPECT_THAT(out, HasSubstr(p + "first\n" + p + "second\n"));
    EXPECT_THAT(out, HasSubstr(p + "no newline\n"));  // flushed at EOF
    EXPECT_THAT(err, HasSubstr(p + "oops\n"));
    EXPECT_THAT(out, Not(HasSubstr("oops")));
  }
}

TEST(Launch, UntaggedOutputIsPassedThroughUnchanged) {
  TempDir dir;
  WorkerRun run(dir, 1, {"print", "plain"});
  run.options.tag_output = false;
  ASSERT_TRUE(launch(run.options).succeeded());
  EXPECT_EQ(run.out(), "plain\n");
}

TEST(Launch, WorkerExitingThreeFailsTheRunAndTheSleepingWorkerIsStoppedQuickly) {
  TempDir dir;
  WorkerRun run(dir, 2, {"sleep", "200", "rank", "1", "exit", "3", "sleep", "30000"});
  auto start = Clock::now();
  LaunchResult result = launch(run.options);
  double elapsed = seconds_since(start);

  EXPECT_LT(elapsed, 4.0) << "the sleeping worker should die on SIGTERM, well before its 30 s";
  EXPECT_FALSE(result.succeeded());
  EXPECT_EQ(result.exit_code(), 1);
  ASSERT_TRUE(result.root_cause.has_value());
  EXPECT_EQ(result.root_cause->rank, 1);
  EXPECT_EQ(result.root_cause->exit_code, 3);
  EXPECT_TRUE(result.workers[0].stopped);
  EXPECT_EQ(result.workers[0].signal, SIGTERM);

  std::string pid1 = std::to_string(result.workers[1].pid);
  std::string pid0 = std::to_string(result.workers[0].pid);
  std::vector<std::string> summary = result.summary();
  ASSERT_EQ(summary.size(), 3u) << ::testing::PrintToString(summary);
  EXPECT_EQ(summary[0], "worker rank 0 (pid " + pid0 + ") was stopped: killed by SIGTERM");
  EXPECT_EQ(summary[1], "worker rank 1 (pid " + pid1 + ") failed: exit code 3");
  EXPECT_EQ(summary[2], "root cause: worker rank 1 (pid " + pid1 +
                            ") failed first: exit code 3; 1 other worker(s) stopped");
  EXPECT_FALSE(process_alive(result.workers[0].pid));
}

TEST(Launch, WorkerKilledBySignalIsReportedBySignalName) {
  TempDir dir;
  WorkerRun run(dir, 2, {"rank", "0", "raise", std::to_string(SIGSEGV), "sleep", "30000"});
  LaunchResult result = launch(run.options);
  ASSERT_TRUE(result.root_cause.has_value());
  EXPECT_EQ(result.root_cause->rank, 0);
  EXPECT_EQ(result.root_cause->signal, SIGSEGV);
  EXPECT_EQ(result.root_cause->describe(), "killed by SIGSEGV");
  EXPECT_THAT(result.summary().back(), HasSubstr("failed first: killed by SIGSEGV"));
  EXPECT_EQ(result.exit_code(), 1);
}

TEST(Launch, WorkerIgnoringSigtermIsKilledAfterTheGracePeriod) {
  TempDir dir;
  WorkerRun run(dir, 2,
                {"ignore-term", "sleep", "300", "rank", "1", "exit", "1", "sleep", "30000"});
  run.options.stop_grace_period = milliseconds(700);
  auto start = Clock::now();
  LaunchResult result = launch(run.options);
  double elapsed = seconds_since(start);

  EXPECT_EQ(result.workers[0].signal, SIGKILL);
  EXPECT_TRUE(result.workers[0].stopped);
  EXPECT_GE(elapsed, 0.3 + 0.7);
  EXPECT_LT(elapsed, 5.0);
  EXPECT_THAT(result.summary()[0], HasSubstr("was stopped: killed by SIGKILL"));
}

TEST(Launch, BackgroundChildrenOfAWorkerDoNotOutliveIt) {
  TempDir dir;
  WorkerRun run(dir, 1, {});
  run.options.command = {"/bin/sh", "-c", "sleep 60 & echo $!; exit 0"};
  auto start = Clock::now();
  ASSERT_TRUE(launch(run.options).succeeded());
  EXPECT_LT(seconds_since(start), 5.0);
  std::string out = run.out();
  ASSERT_EQ(out.rfind("[rank0]: ", 0), 0u) << out;
  int stray = std::stoi(out.substr(9));
  EXPECT_TRUE(eventually([&] { return !process_alive(stray); }, milliseconds(5000)));
}

TEST(Launch, BusyMasterPortIsAStoreErrorNamingHostAndPort) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);

  TempDir dir;
  WorkerRun run(dir, 2, {"exit", "0"});
  run.options.master_port = port;
  try {
    launch(run.options);
    ADD_FAILURE() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("127.0.0.1:" + std::to_string(port)));
    EXPECT_THAT(e.what(), HasSubstr("address already in use"));
  }
  ::close(fd);
}

TEST(Launch, OmpNumThreadsIsOneWithSeveralWorkersUnlessTheUserSetIt) {
  TempDir dir;
  WorkerRun two(dir, 2, {"env", "OMP_NUM_THREADS"});
  two.options.environment = std::vector<std::string>{"PATH=/usr/bin:/bin"};
  ASSERT_TRUE(launch(two.options).succeeded());
  EXPECT_THAT(two.out(), HasSubstr("[rank1]: OMP_NUM_THREADS=1\n"));
  EXPECT_THAT(two.err(),
              HasSubstr("dtrain run: setting OMP_NUM_THREADS=1 for each of the 2 workers"));

  WorkerRun user_set(dir, 2, {"env", "OMP_NUM_THREADS"});
  user_set.options.environment = std::vector<std::string>{"OMP_NUM_THREADS=4"};
  ASSERT_TRUE(launch(user_set.options).succeeded());
  EXPECT_THAT(user_set.out(), HasSubstr("[rank1]: OMP_NUM_THREADS=4\n"));
  EXPECT_THAT(user_set.err(), Not(HasSubstr("OMP_NUM_THREADS")));

  WorkerRun one(dir, 1, {"env", "OMP_NUM_THREADS"});
  one.options.environment = std::vector<std::string>{};
  ASSERT_TRUE(launch(one.options).succeeded());
  EXPECT_THAT(one.out(), HasSubstr("[rank0]: OMP_NUM_THREADS is unset\n"));
}

TEST(Launch, LogDirGetsEachWorkersOutputUnprefixed) {
  TempDir dir;
  WorkerRun run(dir, 2, {"print", "hello", "eprint", "warn"});
  run.options.log_dir = dir.file("logs");
  run.options.run_id = "job7";
  ASSERT_TRUE(launch(run.options).succeeded());
  EXPECT_EQ(read_file(dir.file("logs/job7/attempt_0/1/stdout.log")), "hello\n");
  EXPECT_EQ(read_file(dir.file("logs/job7/attempt_0/0/stderr.log")), "warn\n");
  EXPECT_THAT(run.out(), HasSubstr("[rank1]: hello\n"));
}

// torchrun --redirects / --tee: "0:1,1:2" sends local rank 0's stdout and
// local rank 1's stderr to their log files only; the rest is relayed too.
TEST(Launch, RedirectedStreamsGoToTheLogFilesOnlyAndTheOthersAlsoToTheConsole) {
  TempDir dir;
  WorkerRun run(dir, 2, {"print", "hello", "eprint", "warn"});
  run.options.log_dir = dir.file("logs");
  run.options.run_id = "job8";
  run.options.redirects = "0:1,1:2";
  run.options.tee = "3";
  ASSERT_TRUE(launch(run.options).succeeded());
  EXPECT_THAT(run.out(), Not(HasSubstr("[rank0]: hello")));
  EXPECT_THAT(run.out(), HasSubstr("[rank1]: hello\n"));
  EXPECT_THAT(run.err(), HasSubstr("[rank0]: warn\n"));
  EXPECT_THAT(run.err(), Not(HasSubstr("[rank1]: warn")));
  for (const char* rank : {"0", "1"}) {
    EXPECT_EQ(read_file(dir.file(std::string("logs/job8/attempt_0/") + rank + "/stdout.log")),
              "hello\n");
    EXPECT_EQ(read_file(dir.file(std::string("logs/job8/attempt_0/") + rank + "/stderr.log")),
              "warn\n");
  }
}

TEST(Launch, RedirectsWithoutLogDirWriteToANewDirectoryNamedOnStderr) {
  TempDir dir;
  WorkerRun run(dir, 1, {"print", "hello"});
  run.options.redirects = "3";
  run.options.run_id = "job9";
  ASSERT_TRUE(launch(run.options).succeeded());
  EXPECT_THAT(run.out(), Not(HasSubstr("hello")));
  const std::string err = run.err();
  const std::string marker = "workers' logs (--redirects/--tee) in ";
  const size_t at = err.find(marker);
  ASSERT_NE(at, std::string::npos) << err;
  const std::string logs = err.substr(at + marker.size(), err.find('\n', at) - at - marker.size());
  EXPECT_EQ(read_file(logs + "/job9/attempt_0/0/stdout.log"), "hello\n");
  std::filesystem::remove_all(logs);
}

TEST(Launch, RoleIsTheWorkersRoleName) {
  TempDir dir;
  WorkerRun run(dir, 1, {"env", "ROLE_NAME"});
  ASSERT_TRUE(launch(run.options).succeeded());
  EXPECT_THAT(run.out(), HasSubstr("[rank0]: ROLE_NAME=default\n"));  // torchrun's default
  WorkerRun trainer(dir, 1, {"env", "ROLE_NAME"});
  trainer.options.role = "trainer";
  ASSERT_TRUE(launch(trainer.options).succeeded());
  EXPECT_THAT(trainer.out(), HasSubstr("[rank0]: ROLE_NAME=trainer\n"));
}

// -m: the interpreter gets "-u -m MODULE ARGS" (echo stands in for Python
// and prints them); --run-path: a real python3 runs the file as __main__.
TEST(Launch, ModuleAndRunPathModesRunThePythonCommandTorchrunRuns) {
  TempDir dir;
  WorkerRun module(dir, 1, {"a"});
  module.options.command = {"pkg.train", "--lr", "0.1"};
  module.options.program_mode = LaunchOptions::ProgramMode::kModule;
  module.options.python = "/bin/echo";
  ASSERT_TRUE(launch(module.options).succeeded());
  EXPECT_THAT(module.out(), HasSubstr("[rank0]: -u -m pkg.train --lr 0.1\n"));

  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  std::ofstream(dir.file("train.py")) << "import sys\nprint(__name__, sys.argv)\n";
  WorkerRun run_path(dir, 1, {});
  run_path.options.command = {dir.file("train.py"), "--lr", "0.1"};
  run_path.options.program_mode = LaunchOptions::ProgramMode::kRunPath;
  run_path.options.python = "/usr/bin/python3";
  ASSERT_TRUE(launch(run_path.options).succeeded()) << run_path.err();
  EXPECT_THAT(run_path.out(),
              HasSubstr("[rank0]: __main__ ['" + dir.file("train.py") + "', '--lr', '0.1']\n"));
}

TEST(Launch, StandaloneGeneratesARunIdAndAFreePort) {
  TempDir dir;
  WorkerRun run(dir, 1, {"env", "TORCHELASTIC_RUN_ID"});
  run.options.standalone = true;
  run.options.master_port = 1;  // ignored in standalone mode
  LaunchResult result = launch(run.options);
  ASSERT_TRUE(result.succeeded());
  EXPECT_EQ(result.run_id.size(), 36u);
  EXPECT_NE(result.master_port, 1);
  EXPECT_THAT(run.out(), HasSubstr("TORCHELASTIC_RUN_ID=" + result.run_id));
}

TEST(Launch, UnknownProgramIsAnInvalidArgumentNamingIt) {
  TempDir dir;
  WorkerRun run(dir, 2, {});
  run.options.command = {"dtrain-no-such-program"};
  try {
    launch(run.options);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("program 'dtrain-no-such-program' not found on PATH"));
  }
}

TEST(Launch, ZeroWorkersOrNoCommandIsAnInvalidArgument) {
  LaunchOptions options;
  options.command = {"true"};
  options.nproc_per_node = 0;
  EXPECT_THROW(launch(options), InvalidArgument);
  options.nproc_per_node = 1;
  options.command.clear();
  EXPECT_THROW(launch(options), InvalidArgument);
}

// ---- The launcher as a process: signals and orphans -------------------------

/// Runs launch() in a forked child (so that signals can be sent to it), with
/// workers that write their pids to `dir` and sleep.
class LauncherProcess {
 public:
  LauncherProcess(const TempDir& dir, int nproc) : dir_(dir), nproc_(nproc) {
    WorkerRun run(dir, nproc, {"pidfile", dir.path(), "sleep", "60000"});
    run.options.handle_signals = true;
    run.options.stop_grace_period = milliseconds(2000);
    pid_ = ::fork();
    if (pid_ == 0) {
      int code = 70;
      try {
        code = launch(run.options).exit_code();
      } catch (...) {
      }
      ::_exit(code);
    }
  }
  ~LauncherProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int pid() const { return pid_; }

  /// The workers' pids, once all have written them (bounded wait).
  std::vector<int> worker_pids() {
    std::vector<int> pids;
    eventually(
        [&] {
          pids.clear();
          for (int r = 0; r < nproc_; ++r) {
            std::string text = read_file(dir_.file("rank" + std::to_string(r) + ".pid"));
            if (text.empty() || text.back() != '\n') return false;
            pids.push_back(std::stoi(text));
          }
          return true;
        },
        milliseconds(20000));
    return pids;
  }

  /// The launcher's wait status, or nullopt if it did not end in `timeout`.
  std::optional<int> wait(milliseconds timeout) {
    int status = 0;
    bool ended = eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, timeout);
    if (!ended) return std::nullopt;
    reaped_ = true;
    return status;
  }

 private:
  const TempDir& dir_;
  int nproc_;
  int pid_ = -1;
  bool reaped_ = false;
};

void expect_all_gone(const std::vector<int>& pids) {
  for (int pid : pids) {
    EXPECT_TRUE(eventually([&] { return !process_alive(pid); }, milliseconds(5000)))
        << "worker pid " << pid << " outlived the launcher";
  }
}

TEST(LaunchProcess, SigtermToTheLauncherStopsEveryWorkerAndExits143) {
  TempDir dir;
  LauncherProcess launcher(dir, 2);
  std::vector<int> pids = launcher.worker_pids();
  ASSERT_EQ(pids.size(), 2u);
  for (int pid : pids) ASSERT_TRUE(process_alive(pid));

  ::kill(launcher.pid(), SIGTERM);
  std::optional<int> status = launcher.wait(milliseconds(10000));
  ASSERT_TRUE(status.has_value()) << "the launcher did not exit after SIGTERM";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 128 + SIGTERM);
  expect_all_gone(pids);
  EXPECT_THAT(read_file(dir.file("err.txt")), Not(HasSubstr("error")));
}

TEST(LaunchProcess, SigintToTheLauncherExits130) {
  TempDir dir;
  LauncherProcess launcher(dir, 1);
  std::vector<int> pids = launcher.worker_pids();
  ASSERT_EQ(pids.size(), 1u);
  ::kill(launcher.pid(), SIGINT);
  std::optional<int> status = launcher.wait(milliseconds(10000));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 128 + SIGINT);
  expect_all_gone(pids);
}

TEST(LaunchProcess, WorkersDieWhenTheLauncherIsKilled) {
  TempDir dir;
  LauncherProcess launcher(dir, 2);
  std::vector<int> pids = launcher.worker_pids();
  ASSERT_EQ(pids.size(), 2u);
  ::kill(launcher.pid(), SIGKILL);
  ASSERT_TRUE(launcher.wait(milliseconds(10000)).has_value());
  expect_all_gone(pids);
}

}  // namespace
}  // namespace dtrain
