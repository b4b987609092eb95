// The `dtrain run` subcommand (src/cli/cmd_run.cpp): flag spellings,
// pass-through of the worker command, usage errors and exit codes, and a
// --ps-servers job through it.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace dtrain::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

/// Parses `args` as `dtrain run ...` and returns the exit code the callback stored.
int parse(std::vector<std::string> args) {
  CLI::App app("dtrain", "dtrain");
  app.require_subcommand(1);
  int exit_code = -1;
  add_run_command(app, &exit_code);
  args.insert(args.begin(), "run");
  std::reverse(args.begin(), args.end());  // CLI11 takes them last-first
  app.parse(args);
  return exit_code;
}

TEST(RunCommand, AcceptsTorchrunSpellingsAndTheProgramAfterDoubleDash) {
  ::testing::internal::CaptureStdout();
  int rc = parse({"--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", "0",
                  "--standalone", "--", LAUNCH_TEST_WORKER, "env", "WORLD_SIZE"});
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, HasSubstr("[rank1]: WORLD_SIZE=2\n"));
}

TEST(RunCommand, PassesEverythingFromTheProgramOnThroughUntouched) {
  ::testing::internal::CaptureStdout();
  int rc = parse({"--nproc-per-node", "1", LAUNCH_TEST_WORKER, "print", "--nproc-per-node", "print",
                  "--", "env", "WORLD_SIZE"});
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, HasSubstr("[rank0]: --nproc-per-node\n[rank0]: --\n[rank0]: WORLD_SIZE=1\n"));
}

TEST(RunCommand, ZeroWorkersIsAUsageError) {
  EXPECT_THAT(
      [] {
        parse({"--nproc-per-node", "0", "--", "true"});
      },
      ::testing::ThrowsMessage<CLI::ValidationError>(
          HasSubstr("must be a whole number >= 1, or auto, gpu, cpu; got '0'")));
}

TEST(RunCommand, UnknownFlagOrMissingProgramIsAUsageError) {
  EXPECT_THROW(parse({"--no-such-flag", "--", "true"}), CLI::ParseError);
  EXPECT_THROW(parse({"--nproc-per-node", "2"}), CLI::RequiredError);
  EXPECT_THROW(parse({"--nproc-per-node", "2", "--"}), CLI::RequiredError);
  EXPECT_THROW(parse({"--nnodes", "0", "--", "true"}), CLI::ValidationError);
  EXPECT_THROW(parse({"--nnodes", "3:2", "--", "true"}), CLI::ValidationError);
  EXPECT_THROW(parse({"--nnodes", "two", "--", "true"}), CLI::ValidationError);
  EXPECT_THROW(parse({"--max-restarts", "-1", "--", "true"}), CLI::ValidationError);
}

// launch() names LaunchOptions' fields (its rendezvous's errors too);
// `dtrain run` reports them with its flags (cli/option_flags.h).
TEST(RunCommand, LauncherErrorsNameTheFlagsNotTheLaunchOptionsFields) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--role", "", "--", "true"},
       "dtrain run: error: --role must not be empty (torchrun's: default)\n"},
      {{"--rdzv-id", "a/b", "--", "true"},
       "dtrain run: error: --rdzv-id 'a/b' must be non-empty without '/', tabs or newlines\n"},
      {{"--rdzv-conf", "join_timeout=soon", "--", "true"},
       "dtrain run: error: --rdzv-conf join_timeout=soon: expected a positive number of "
       "seconds\n"},
  };
  for (const auto& [args, message] : cases) {
    ::testing::internal::CaptureStderr();
    const int rc = parse(args);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(rc, 2) << err;
    EXPECT_EQ(err, message);
  }
}

TEST(RunCommand, ExitBarrierAndLingerTimeoutsAreSecondsAndNegativeOnesAreUsageErrors) {
  // What the times do is tested on dtrain::launch() (LaunchOptions, test_restarts.cpp).
  ::testing::internal::CaptureStdout();
  const int rc = parse({"--exit-barrier-timeout", "0.5", "--linger-timeout", "0", "--",
                        LAUNCH_TEST_WORKER, "env", "WORLD_SIZE"});
  ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_THROW(parse({"--exit-barrier-timeout", "-1", "--", "true"}), CLI::ValidationError);
  EXPECT_THROW(parse({"--linger-timeout", "-2", "--", "true"}), CLI::ValidationError);
}

TEST(RunCommand, InconsistentElasticFlagsExitTwoNamingTheFix) {
  ::testing::internal::CaptureStderr();
  int rc = parse({"--nnodes", "1:4", "--", "true"});
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(err, HasSubstr("dtrain run: error: --nnodes 1:4 needs an elastic rendezvous: add "
                             "--rdzv-backend c10d (or etcd) and --rdzv-endpoint HOST:PORT\n"));
  ::testing::internal::CaptureStderr();
  rc = parse({"--nnodes", "2", "--node-rank", "1", "--", "true"});
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(err, HasSubstr("needs --master-addr and --master-port of node 0"));
}

TEST(RunCommand, NprocPerNodeAutoAndCpuFollowTheMachine) {
  ::testing::internal::CaptureStdout();
  int rc = parse({"--nproc-per-node", "cpu", "--", LAUNCH_TEST_WORKER, "rank", "0", "env",
                  "LOCAL_WORLD_SIZE"});
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, HasSubstr("LOCAL_WORLD_SIZE=" +
                             std::to_string(std::max(1u, std::thread::hardware_concurrency()))));
  EXPECT_THROW(parse({"--nproc-per-node", "many", "--", "true"}), CLI::ValidationError);
}

// Kubeflow exports PET_NPROC_PER_NODE=auto in every pod, also to pods that run
// `dtrain train` directly: other subcommands must not trip over it.
TEST(RunCommand, PetNprocPerNodeAutoDoesNotBreakOtherSubcommands) {
  ::setenv("PET_NPROC_PER_NODE", "auto", 1);
  CLI::App app("dtrain", "dtrain");
  app.require_subcommand(1);
  int exit_code = -1;
  add_run_command(app, &exit_code);
  CLI::App* other = app.add_subcommand("other", "");
  bool ran = false;
  other->callback([&] { ran = true; });
  std::vector<std::string> args = {"other"};
  EXPECT_NO_THROW(app.parse(args));
  ::unsetenv("PET_NPROC_PER_NODE");
  EXPECT_TRUE(ran);
}

TEST(RunCommand, PetVariablesConfigureTheRunLikeKubeflowPassesThem) {
  ::setenv("PET_NNODES", "1:3", 1);
  ::setenv("PET_RDZV_BACKEND", "c10d", 1);
  ::testing::internal::CaptureStderr();
  int rc = parse({"--", "true"});
  std::string err = ::testing::internal::GetCapturedStderr();
  ::unsetenv("PET_NNODES");
  ::unsetenv("PET_RDZV_BACKEND");
  EXPECT_EQ(rc, 2);  // the endpoint is missing: proves both variables were read
  EXPECT_THAT(err, HasSubstr("--rdzv-backend c10d needs --rdzv-endpoint HOST:PORT"));
}

// Every flag can come from its PET_* variable (the flag's name in capitals,
// '-' as '_'), as torchrun's `env` action reads them and Kubeflow sets them.
// Issue 19's bad input: one worker in all has nothing to survive with.
TEST(RunCommand, RecoveryLiveWithOneWorkerInAllIsAUsageErrorNamingTheFix) {
  ::testing::internal::CaptureStderr();
  const int rc = parse({"--recovery", "live", "--nnodes", "1", "--nproc-per-node", "1", "--",
                        LAUNCH_TEST_WORKER, "print", "x"});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(err, HasSubstr("dtrain run: error: --recovery live with --nnodes 1:1 x "
                             "--nproc-per-node 1 = 1 worker(s)"));
  EXPECT_THAT(err, HasSubstr("has nothing to survive with"));
  EXPECT_THAT(err, HasSubstr("or use --recovery restart\n"));
}

TEST(RunCommand, RecoveryLiveComesFromPetRecoveryAndStartsReplacements) {
  ::setenv("PET_RECOVERY", "live", 1);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int rc = parse({"--nproc-per-node", "2", "--max-restarts", "1", "--live-register-timeout",
                        "0", "--", LAUNCH_TEST_WORKER, "env", "DTRAIN_LIVE_JOIN", "join", "0",
                        "rank", "1", "exit", "4", "sleep", "500"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ::unsetenv("PET_RECOVERY");
  EXPECT_EQ(rc, 0) << err;
  EXPECT_THAT(out, HasSubstr("[rank1]: DTRAIN_LIVE_JOIN=1\n"));
  EXPECT_THAT(err, HasSubstr("dtrain run: live recovery: worker rank 1 (pid "));
}

TEST(RunCommand, AnUnknownRecoveryIsAUsageError) {
  EXPECT_THROW(parse({"--recovery", "sometimes", "--", LAUNCH_TEST_WORKER}), CLI::ValidationError);
}

TEST(RunCommand, EveryFlagHasItsPetVariable) {
  CLI::App app("dtrain", "dtrain");
  int exit_code = -1;
  add_run_command(app, &exit_code);
  int flags = 0;
  for (const CLI::Option* opt : app.get_subcommand("run")->get_options()) {
    if (opt->get_lnames().empty() || opt->get_lnames().front() == "help") continue;
    std::string name = opt->get_lnames().front();
    std::string expected = "PET_";
    for (char c : name) expected += c == '-' ? '_' : static_cast<char>(std::toupper(c));
    EXPECT_EQ(opt->get_envname(), expected) << "--" << name;
    ++flags;
  }
  EXPECT_GE(flags, 25);
}

// torchrun's flags that only change how the job looks, with its meaning:
// --role is ROLE_NAME, --local-addr the address this node advertises,
// --start-method is accepted (workers are always exec'd), --no-python runs
// the program directly, --tee 0 changes nothing.
TEST(RunCommand, AcceptsTorchrunsRoleLocalAddrStartMethodNoPythonAndTee) {
  ::testing::internal::CaptureStdout();
  const int rc = parse({"--role", "trainer", "--local_addr", "127.0.0.1", "--start_method", "fork",
                        "--no_python", "-t", "0", "--", LAUNCH_TEST_WORKER, "env", "ROLE_NAME"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, HasSubstr("[rank0]: ROLE_NAME=trainer\n"));
  ::setenv("PET_ROLE", "reader", 1);
  ::testing::internal::CaptureStdout();
  const int from_env = parse({"--", LAUNCH_TEST_WORKER, "env", "ROLE_NAME"});
  const std::string env_out = ::testing::internal::GetCapturedStdout();
  ::unsetenv("PET_ROLE");
  EXPECT_EQ(from_env, 0);
  EXPECT_THAT(env_out, HasSubstr("[rank0]: ROLE_NAME=reader\n"));
  EXPECT_THAT(
      [] {
        parse({"--start-method", "thread", "--", "true"});
      },
      ::testing::ThrowsMessage<CLI::ValidationError>(
          HasSubstr("'thread' is not one of spawn, fork, forkserver")));
}

TEST(RunCommand, ModuleRunsPythonDashMWithPythonExecAndRefusesNoPython) {
  ::setenv("PYTHON_EXEC", "/bin/echo", 1);  // torchrun's variable; echo shows the arguments
  ::testing::internal::CaptureStdout();
  const int rc = parse({"-m", "pkg.train", "--lr", "0.1"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  ::unsetenv("PYTHON_EXEC");
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, HasSubstr("[rank0]: -u -m pkg.train --lr 0.1\n"));
  EXPECT_THAT(
      [] {
        parse({"--no-python", "--module", "pkg", "--", "x"});
      },
      ::testing::ThrowsMessage<CLI::ValidationError>(
          HasSubstr("--no-python and -m/--module cannot be used together")));
}

TEST(RunCommand, RedirectsKeepAStreamOffTheConsoleAndABadValueExitsTwo) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  int rc = parse({"-r", "1", "--", LAUNCH_TEST_WORKER, "print", "hidden", "eprint", "shown"});
  std::string out = ::testing::internal::GetCapturedStdout();
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, Not(HasSubstr("hidden")));
  EXPECT_THAT(err, HasSubstr("[rank0]: shown\n"));
  EXPECT_THAT(err, HasSubstr("workers' logs (--redirects/--tee) in "));
  const size_t at = err.find(" in /");
  if (at != std::string::npos) {
    std::string dir = err.substr(at + 4, err.find('\n', at) - at - 4);
    if (dir.find("dtrain-logs-") != std::string::npos) std::filesystem::remove_all(dir);
  }
  ::testing::internal::CaptureStderr();
  rc = parse({"--redirects", "0:5", "--", "true"});
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(err, HasSubstr("--redirects '0:5' is not a stream set 0-3"));
}

TEST(RunCommand, FailedWorkerExitsOneWithASummaryOnStderr) {
  ::testing::internal::CaptureStderr();
  int rc = parse({"--nproc-per-node", "2", "--", LAUNCH_TEST_WORKER, "rank", "1", "exit", "3",
                  "sleep", "30000"});
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("dtrain run: worker rank 1 (pid "));
  EXPECT_THAT(err, HasSubstr(") failed: exit code 3\n"));
  EXPECT_THAT(err, HasSubstr("dtrain run: root cause: worker rank 1 (pid "));
}

TEST(RunCommand, BusyPortIsOneErrorLineAndExitCodeOne) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  std::string port = std::to_string(ntohs(a.sin_port));

  ::testing::internal::CaptureStderr();
  int rc = parse({"--master-port", port, "--", "true"});
  std::string err = ::testing::internal::GetCapturedStderr();
  ::close(fd);
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(
      err, HasSubstr("dtrain run: error: rendezvous 'none': cannot host the store on 127.0.0.1:" +
                     port));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

/// `env VAR=... ps_node` (tests/ps): a --ps-servers job runs this same
/// command in every role.
std::vector<std::string> ps_node_command(std::vector<std::string> vars) {
  std::vector<std::string> command = {"env"};
  command.insert(command.end(), vars.begin(), vars.end());
  command.push_back(PS_NODE);
  return command;
}

TEST(RunCommand, PsServersJobExitsZeroWithWorkerOutputTaggedByRank) {
  std::vector<std::string> args = {"--ps-servers", "2", "--nproc-per-node", "2", "--"};
  for (auto& a : ps_node_command({"PS_NODE_STEPS=10"})) args.push_back(a);
  ::testing::internal::CaptureStderr();
  int rc = parse(args);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 0) << err;
  EXPECT_THAT(err, HasSubstr("[rank0]: ps_node: worker 0 running"));
}

TEST(RunCommand, PsServersJobWithACrashingWorkerExitsOneNamingTheRootCause) {
  std::vector<std::string> args = {"--ps-servers", "2", "--nproc-per-node", "2", "--"};
  for (auto& a : ps_node_command({"PS_NODE_FAIL_RANK=0"})) args.push_back(a);
  ::testing::internal::CaptureStderr();
  int rc = parse(args);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1) << err;
  EXPECT_THAT(err, HasSubstr("[rank0]: ps_node: worker 0 failing on purpose"));
  EXPECT_THAT(err, HasSubstr("dtrain run: root cause: worker rank 0 (pid "));
  EXPECT_THAT(err, HasSubstr("dtrain run: scheduler (pid "));
}

TEST(RunCommand, PsWorkerPerNodeGivesTheWorkersTheNodeCountAndTheNodesRank) {
  // What the two modes set is tested on dtrain::launch() (test_ps_launch.cpp).
  ::testing::internal::CaptureStdout();
  const int rc =
      parse({"--ps-servers", "1", "--nproc-per-node", "2", "--ps-worker-per", "node", "--",
             LAUNCH_TEST_WORKER, "env", "DMLC_NUM_WORKER", "env", "DMLC_WORKER_ID", "env", "RANK"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("[rank1]: DMLC_NUM_WORKER=1\n[rank1]: DMLC_WORKER_ID=0\n"
                             "[rank1]: RANK=1\n"));
  EXPECT_THAT(out, HasSubstr("[scheduler]: DMLC_NUM_WORKER=1\n"));
}

TEST(RunCommand, PsWorkerPerIsProcessOrNodeAndNodeNeedsPsServers) {
  EXPECT_THAT(
      [] {
        parse({"--ps-servers", "1", "--ps-worker-per", "gpu", "--", "true"});
      },
      ::testing::Throws<CLI::ValidationError>());
  ::testing::internal::CaptureStderr();
  const int rc = parse({"--ps-worker-per", "node", "--", "true"});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_EQ(err,
            "dtrain run: error: --ps-worker-per node sets what a parameter-server job's "
            "DMLC_NUM_WORKER counts: add --ps-servers S, or drop it\n");
}

}  // namespace
}  // namespace dtrain::cli
