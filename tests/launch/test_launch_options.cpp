// LaunchOptions checked and resolved before anything starts
// (launch_options.h), and LaunchResult's summary lines (launch_result.cpp).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>

#include "dtrain/errors.h"
#include "dtrain/launch.h"
#include "launch/launch_options.h"

namespace dtrain::detail {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

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
                  HasSubstr("--ps-worker-per node sets what a parameter-server job's "
                            "DMLC_NUM_WORKER counts: add --ps-servers S")));
  o.ps_servers = 1;
  EXPECT_EQ(resolve_launch_options(o).ps_worker_per, LaunchOptions::PsWorkerPer::kNode);
}

TEST(ResolveLaunchOptions, ExitBarrierAndLingerDefaultToTorchrunsAgentAndOneMinute) {
  const LaunchOptions o;
  EXPECT_EQ(o.exit_barrier_timeout, std::chrono::seconds(300));
  EXPECT_EQ(o.linger_timeout, std::chrono::seconds(60));
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
