// LaunchOptions checked and resolved before anything starts
// (launch_options.h), and LaunchResult's summary lines (launch_result.cpp).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>

#include "dtrain/errors.h"
#include "dtrain/launch.h"
#include "launch/launch_options.h"
#include "launch/rendezvous/rendezvous.h"

namespace dtrain::detail {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

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
  o.master_port = 0;
  o.exit_barrier_timeout = std::chrono::milliseconds(-1);
  EXPECT_THAT([&] { resolve_launch_options(o); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("exit_barrier_timeout")));
  o.exit_barrier_timeout = std::chrono::seconds(1);
  o.linger_timeout = std::chrono::milliseconds(-1);
  EXPECT_THAT([&] { resolve_launch_options(o); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("linger_timeout")));
}

TEST(ResolveLaunchOptions, PsWorkerPerNodeWithoutPsServersIsRefusedNamingPsServers) {
  LaunchOptions o;
  o.command = {"x"};
  o.ps_worker_per = LaunchOptions::PsWorkerPer::kNode;
  EXPECT_THAT([&] { resolve_launch_options(o); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  HasSubstr("LaunchOptions::PsWorkerPer::kNode sets what a parameter-server "
                            "job's DMLC_NUM_WORKER counts: add LaunchOptions::ps_servers > 0")));
  o.ps_servers = 1;
  EXPECT_EQ(resolve_launch_options(o).ps_worker_per, LaunchOptions::PsWorkerPer::kNode);
}

// Library users set fields, not flags: launch() names the field as
// LaunchOptions spells it (`dtrain run` maps it to --max-restarts,
// tests/cli/test_run_command.cpp).
TEST(ResolveLaunchOptions, ANegativeMaxRestartsIsRefusedByLaunchNamingTheFieldNotTheFlag) {
  LaunchOptions o;
  o.command = {"true"};
  o.max_restarts = -1;
  try {
    launch(o);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), "LaunchOptions::max_restarts must not be negative, got -1");
    EXPECT_THAT(e.what(), Not(HasSubstr("--")));
  }
}

TEST(ResolveLaunchOptions, ExitBarrierAndLingerDefaultToTorchrunsAgentAndOneMinute) {
  const LaunchOptions o;
  EXPECT_EQ(o.exit_barrier_timeout, std::chrono::seconds(300));
  EXPECT_EQ(o.linger_timeout, std::chrono::seconds(60));
}

// torchrun's --no-python (dtrain's default), -m and --run-path, as
// torch/distributed/run.py's config_from_args builds the command.
TEST(ProgramCommand, ExecRunsTheProgramModulePrependsPythonDashUDashMRunPathUsesRunpy) {
  LaunchOptions o;
  o.command = {"pkg.train", "--lr", "0.1"};
  EXPECT_THAT(program_command(o), ElementsAre("pkg.train", "--lr", "0.1"));
  o.program_mode = LaunchOptions::ProgramMode::kModule;
  o.python = "/opt/py/bin/python";
  EXPECT_THAT(program_command(o),
              ElementsAre("/opt/py/bin/python", "-u", "-m", "pkg.train", "--lr", "0.1"));
  o.program_mode = LaunchOptions::ProgramMode::kRunPath;
  o.command = {"/abs/train.py", "--lr", "0.1"};
  const std::vector<std::string> run_path = program_command(o);
  ASSERT_EQ(run_path.size(), 6u);
  EXPECT_EQ(run_path[0], "/opt/py/bin/python");
  EXPECT_EQ(run_path[1], "-c");
  EXPECT_THAT(run_path[2], HasSubstr("runpy.run_path(sys.argv[0], run_name='__main__')"));
  EXPECT_THAT(std::vector<std::string>(run_path.begin() + 3, run_path.end()),
              ElementsAre("/abs/train.py", "--lr", "0.1"));
}

TEST(ResolveLaunchOptions, ResolvesTheProgramModeIntoTheCommandOnce) {
  LaunchOptions o;
  o.command = {"mod"};
  o.program_mode = LaunchOptions::ProgramMode::kModule;
  const LaunchOptions r = resolve_launch_options(o);
  EXPECT_THAT(r.command, ElementsAre("python3", "-u", "-m", "mod"));
  EXPECT_EQ(r.program_mode, LaunchOptions::ProgramMode::kExec);
  EXPECT_EQ(resolve_launch_options(r).command, r.command);
}

TEST(StdStreamsFor, ReadsTorchrunsValueAndPerLocalRankForms) {
  EXPECT_EQ(std_streams_for("0", 5, "LaunchOptions::tee"), 0);
  EXPECT_EQ(std_streams_for("3", 5, "LaunchOptions::tee"), kStdOut | kStdErr);
  EXPECT_EQ(std_streams_for("0:1,1:2", 0, "LaunchOptions::redirects"), kStdOut);
  EXPECT_EQ(std_streams_for("0:1,1:2", 1, "LaunchOptions::redirects"), kStdErr);
  EXPECT_EQ(std_streams_for("0:1,1:2", 2, "LaunchOptions::redirects"), 0);  // not listed: none
  for (const char* bad : {"4", "", "all", "0:1,", "a:1", "0:4", "-1:1", "1:"}) {
    EXPECT_THAT([&] { std_streams_for(bad, 0, "LaunchOptions::redirects"); },
                ::testing::ThrowsMessage<InvalidArgument>(HasSubstr(
                    "LaunchOptions::redirects '" + std::string(bad) + "' is not a stream set 0-3")))
        << bad;
  }
}

TEST(ResolveLaunchOptions, MalformedRedirectsOrTeeOrAnEmptyRoleAreRefusedNamingTheField) {
  LaunchOptions o;
  o.command = {"x"};
  o.tee = "0:9";
  EXPECT_THAT([&] { resolve_launch_options(o); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("LaunchOptions::tee '0:9'")));
  o.tee = "0";
  o.role.clear();
  EXPECT_THAT([&] { resolve_launch_options(o); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  HasSubstr("LaunchOptions::role must not be empty")));
}

TEST(LogDirForStreams, IsANewKeptDirectoryOnlyWhenAStreamIsRedirectedOrTeedWithoutLogDir) {
  LaunchOptions o;
  o.command = {"x"};
  o.nproc_per_node = 2;
  EXPECT_FALSE(log_dir_for_streams(o).has_value());
  o.redirects = "5:3";  // no such local rank
  EXPECT_FALSE(log_dir_for_streams(o).has_value());
  o.log_dir = "/given";
  o.tee = "3";
  EXPECT_EQ(log_dir_for_streams(o), "/given");
  o.log_dir.reset();
  const std::optional<std::string> made = log_dir_for_streams(o);
  ASSERT_TRUE(made.has_value());
  EXPECT_THAT(*made, HasSubstr("dtrain-logs-"));
  EXPECT_TRUE(std::filesystem::is_directory(*made));
  std::filesystem::remove_all(*made);
}

TEST(RendezvousConfigOfOptions, LocalAddrIsTheAdvertisedAddressAndMustAgreeWithRdzvConf) {
  LaunchOptions o;
  o.command = {"x"};
  EXPECT_EQ(rendezvous_config(resolve_launch_options(o)).local_addr, "");
  o.local_addr = "10.0.0.7";
  EXPECT_EQ(rendezvous_config(resolve_launch_options(o)).local_addr, "10.0.0.7");
  o.rdzv_conf = "local_addr=10.0.0.7";
  EXPECT_EQ(rendezvous_config(resolve_launch_options(o)).local_addr, "10.0.0.7");
  o.rdzv_conf = "local_addr=10.0.0.8";
  EXPECT_THAT([&] { rendezvous_config(resolve_launch_options(o)); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  HasSubstr("LaunchOptions::local_addr 10.0.0.7 and LaunchOptions::rdzv_conf "
                            "local_addr=10.0.0.8 disagree")));
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

TEST(LaunchResultSummary, ARootCauseStoppedWhileExitingIsNotCountedAmongTheOthersStopped) {
  // Rank 1 recorded its error and was still exiting when rank 0's abort made
  // the launcher stop it (round_decision.cpp, Note [Choosing the root cause]).
  LaunchResult r;
  r.workers = {exit_of(0, 100, -1, SIGABRT, false), exit_of(1, 101, -1, SIGTERM, true)};
  r.root_cause = r.workers[1];
  r.root_cause->error_message = "RuntimeError: rank 1 fails";
  EXPECT_THAT(r.summary(),
              ElementsAre("worker rank 0 (pid 100) failed: killed by SIGABRT",
                          "worker rank 1 (pid 101) was stopped: killed by SIGTERM",
                          "root cause: worker rank 1 (pid 101) failed first: killed by SIGTERM: "
                          "RuntimeError: rank 1 fails; 0 other worker(s) stopped"));
}

}  // namespace
}  // namespace dtrain::detail
