// The launcher's parts on their own: worker environment, option resolution,
// line relay, process control, result summaries.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <csignal>

#include "dtrain/errors.h"
#include "launch/agent/worker_env.h"
#include "launch/process/line_relay.h"
#include "launch/process/process.h"
#include "launch_test_util.h"

namespace dtrain::detail {
namespace {

using dtrain::testing::read_file;
using dtrain::testing::TempDir;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> env_for(const std::vector<std::string>& base, int local_world_size) {
  WorkerIdentity who;
  who.rank = who.local_rank = 1;
  who.world_size = who.local_world_size = local_world_size;
  return worker_environment(base, who, JobInfo{"10.0.0.1", 29500, "run9"});
}

TEST(WorkerEnvironment, SetsOmpNumThreadsOnlyForSeveralWorkersWhenUnset) {
  EXPECT_THAT(env_for({"HOME=/root"}, 2), Contains("OMP_NUM_THREADS=1"));
  EXPECT_EQ(env_value(env_for({"HOME=/root"}, 1), "OMP_NUM_THREADS"), std::nullopt);
  auto user = env_for({"OMP_NUM_THREADS=8"}, 4);
  EXPECT_THAT(user, Contains("OMP_NUM_THREADS=8"));
  EXPECT_THAT(user, Not(Contains("OMP_NUM_THREADS=1")));
}

TEST(WorkerEnvironment, ReplacesInheritedTorchrunVariablesAndKeepsTheRest) {
  auto env = env_for({"RANK=7", "MASTER_PORT=1", "HOME=/root", "EMPTY="}, 2);
  EXPECT_EQ(env_value(env, "RANK"), "1");
  EXPECT_EQ(env_value(env, "MASTER_PORT"), "29500");
  EXPECT_EQ(env_value(env, "MASTER_ADDR"), "10.0.0.1");
  EXPECT_EQ(env_value(env, "TORCHELASTIC_RUN_ID"), "run9");
  EXPECT_EQ(env_value(env, "HOME"), "/root");
  EXPECT_EQ(env_value(env, "EMPTY"), "");
  EXPECT_EQ(std::count_if(env.begin(), env.end(),
                          [](const std::string& e) { return e.rfind("RANK=", 0) == 0; }),
            1);
}

TEST(ResolveLaunchOptions, DefaultsToRunIdNoneAndStandaloneGeneratesOne) {
  LaunchOptions o;
  o.command = {"x"};
  EXPECT_EQ(resolve_launch_options(o).run_id, "none");
  o.standalone = true;
  o.master_addr = "10.1.1.1";
  o.master_port = 4000;
  LaunchOptions r = resolve_launch_options(o);
  EXPECT_EQ(r.master_addr, "127.0.0.1");
  EXPECT_EQ(r.master_port, 0);
  EXPECT_NE(r.run_id, "none");
  EXPECT_NE(r.run_id, resolve_launch_options(o).run_id);
}

TEST(ResolveLaunchOptions, RejectsBadValuesNamingThem) {
  LaunchOptions o;
  o.command = {"x"};
  o.nproc_per_node = 0;
  EXPECT_THAT([&] { resolve_launch_options(o); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  HasSubstr("nproc_per_node must be at least 1, got 0")));
  o.nproc_per_node = 1;
  o.master_port = 70000;
  EXPECT_THAT(
      [&] { resolve_launch_options(o); },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("master_port 70000 is out of range")));
}

TEST(FindProgram, SearchesPathLikeExecvpAndNamesTheProgramWhenMissing) {
  EXPECT_EQ(find_program("sh", "/nonexistent:/bin"), "/bin/sh");
  EXPECT_EQ(find_program("/bin/sh", ""), "/bin/sh");
  EXPECT_THAT([] { find_program("no-such-prog", "/bin:/usr/bin"); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  HasSubstr("program 'no-such-prog' not found on PATH (/bin:/usr/bin)")));
  EXPECT_THAT([] { find_program("./missing/prog", "/bin"); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  HasSubstr("cannot run './missing/prog': No such file or directory")));
}

TEST(PosixProcessControl, ExecFailureIsReportedNamingTheProgram) {
  TempDir dir;
  std::string path = dir.file("not-executable");
  { std::ofstream(path) << "data"; }
  ::chmod(path.c_str(), 0644);
  PosixProcessControl control;
  ProcessSpec spec;
  spec.path = path;
  spec.argv = {path};
  EXPECT_THAT(
      [&] { control.start(spec); },
      ::testing::ThrowsMessage<Error>(HasSubstr("cannot start '" + path + "': Permission denied")));
}

TEST(PosixProcessControl, ChildIsAProcessGroupLeaderAndItsStatusIsReported) {
  PosixProcessControl control;
  ProcessSpec spec;
  spec.path = "/bin/sh";
  spec.argv = {"sh", "-c", "[ $(ps -o pgid= -p $$) -eq $$ ] && exit 5; exit 6"};
  spec.env = {"PATH=/usr/bin:/bin"};
  auto p = control.start(spec);
  std::optional<ExitStatus> status;
  ASSERT_TRUE(dtrain::testing::eventually([&] { return (status = p->poll()).has_value(); },
                                          std::chrono::seconds(10)));
  EXPECT_EQ(status->exit_code, 5);
  EXPECT_EQ(p->poll()->exit_code, 5);  // stable once reaped
}

TEST(PosixProcessControl, DestroyingARunningProcessKillsAndReapsIt) {
  PosixProcessControl control;
  ProcessSpec spec;
  spec.path = "/bin/sleep";
  spec.argv = {"sleep", "60"};
  int pid;
  {
    auto p = control.start(spec);
    pid = p->pid();
    ASSERT_TRUE(dtrain::testing::process_alive(pid));
  }
  EXPECT_NE(::kill(pid, 0), 0) << "reaped, so the pid no longer exists";
}

TEST(DescribeExit, NamesExitCodesAndSignals) {
  EXPECT_EQ(describe_exit(3, 0), "exit code 3");
  EXPECT_EQ(describe_exit(-1, SIGSEGV), "killed by SIGSEGV");
  EXPECT_EQ(describe_exit(-1, SIGKILL), "killed by SIGKILL");
  EXPECT_EQ(describe_exit(-1, 0), "did not exit");
  EXPECT_EQ(signal_name(SIGRTMIN + 1), "signal " + std::to_string(SIGRTMIN + 1));
}

class LineRelayTest : public ::testing::Test {
 protected:
  LineRelayTest() : dest_(open_log_file(dir_.file("dest"))) {}
  std::string drain() { return read_file(dir_.file("dest")); }
  TempDir dir_;
  Fd dest_;
};

TEST_F(LineRelayTest, EmitsOnlyCompleteLinesUntilFinished) {
  LineRelay relay("[rank3]: ", dest_.get());
  relay.feed("ab");
  relay.feed("c\nde");
  relay.feed("f\n\ng");
  relay.finish();
  EXPECT_EQ(drain(), "[rank3]: abc\n[rank3]: def\n[rank3]: \n[rank3]: g\n");
}

TEST_F(LineRelayTest, CutsOverlongLines) {
  LineRelay relay("> ", dest_.get());
  relay.feed(std::string(LineRelay::kMaxLine + 10, 'x'));
  relay.finish();
  std::string out = drain();
  EXPECT_EQ(out,
            "> " + std::string(LineRelay::kMaxLine, 'x') + "\n> " + std::string(10, 'x') + "\n");
}

TEST_F(LineRelayTest, WritesUnprefixedLinesToTheLogFile) {
  {
    LineRelay relay("[rank0]: ", dest_.get(), open_log_file(dir_.file("log")));
    relay.feed("one\ntwo");
    relay.finish();
  }
  EXPECT_EQ(drain(), "[rank0]: one\n[rank0]: two\n");
  EXPECT_EQ(read_file(dir_.file("log")), "one\ntwo\n");
}

WorkerExit exit_of(int rank, int pid, int code, int signal, bool stopped) {
  WorkerExit w;
  w.rank = w.local_rank = rank;
  w.pid = pid;
  w.exit_code = code;
  w.signal = signal;
  w.stopped = stopped;
  return w;
}

TEST(LaunchResultSummary, IsEmptyOnSuccessAndNamesTheSignalWhenTheLauncherWasStopped) {
  LaunchResult ok;
  ok.workers = {exit_of(0, 100, 0, 0, false)};
  EXPECT_TRUE(ok.summary().empty());
  EXPECT_EQ(ok.exit_code(), 0);

  LaunchResult signalled;
  signalled.launcher_signal = SIGINT;
  signalled.workers = {exit_of(0, 100, -1, SIGTERM, true), exit_of(1, 101, 0, 0, true)};
  EXPECT_EQ(signalled.exit_code(), 130);
  EXPECT_THAT(signalled.summary(),
              ElementsAre("worker rank 0 (pid 100) was stopped: killed by SIGTERM",
                          "received SIGINT; stopped 1 worker(s)"));
}

}  // namespace
}  // namespace dtrain::detail
