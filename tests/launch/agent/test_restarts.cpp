// The elastic agent inside dtrain::launch(): restarts after failures, the
// root cause with the worker's error record, per-attempt log directories,
// multi-node rounds with agents as threads, a lost node, and rendezvous
// errors. The pure decision behind them is tested in test_round_decision.cpp.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <optional>
#include <thread>

#include "dtrain/errors.h"
#include "dtrain/launch.h"
#include "dtrain/store.h"
#include "launch/launch_options.h"
#include "launch/launch_test_util.h"
#include "launch/rendezvous/rendezvous.h"

namespace dtrain {
namespace {

using testing::free_port_from;
using ::testing::HasSubstr;
using testing::joined;
using testing::read_file;
using testing::TempDir;
using testing::WorkerRun;
namespace fs = std::filesystem;

// This file's ports: their own range (free_port_from).
int restarts_port() { return free_port_from(29700, 97); }

TEST(Restarts, WorkerFailingOnceIsRestartedAndTheRunSucceeds) {
  TempDir dir;
  WorkerRun run(dir, 2,
                {"attempt", "0", "rank", "1", "exit", "3", "env", "TORCHELASTIC_RESTART_COUNT"});
  run.options.max_restarts = 2;
  LaunchResult result = launch(run.options);
  ASSERT_TRUE(result.succeeded()) << joined(result.summary()) << run.err();
  EXPECT_EQ(result.restarts, 1);
  EXPECT_EQ(result.rounds, 2);
  ASSERT_EQ(result.recovered_failures.size(), 2u);  // the failure and the stopped worker
  EXPECT_THAT(joined(result.recovered_failures), HasSubstr("worker rank 1"));
  EXPECT_THAT(run.out(), HasSubstr("[rank0]: TORCHELASTIC_RESTART_COUNT=1\n"));
  EXPECT_THAT(run.out(), HasSubstr("[rank1]: TORCHELASTIC_RESTART_COUNT=1\n"));
  EXPECT_THAT(run.err(), HasSubstr("restarting the group (restart 1 of 2)"));
}

TEST(Restarts, RestartsExhaustedFailNamingTheRootCauseAndItsErrorRecord) {
  TempDir dir;
  WorkerRun run(dir, 2,
                {"rank", "1", "errorfile", "DataError: shard 7 is truncated", "rank", "1", "exit",
                 "3", "sleep", "20000"});
  run.options.max_restarts = 1;
  LaunchResult result = launch(run.options);
  EXPECT_EQ(result.exit_code(), 1);
  EXPECT_EQ(result.restarts, 1);
  EXPECT_EQ(result.rounds, 2);
  ASSERT_TRUE(result.root_cause);
  EXPECT_EQ(result.root_cause->rank, 1);
  EXPECT_EQ(result.root_cause->error_message, "DataError: shard 7 is truncated");
  EXPECT_THAT(result.summary().back(), HasSubstr("root cause: worker rank 1 (pid " +
                                                 std::to_string(result.root_cause->pid)));
  EXPECT_THAT(result.summary().back(),
              HasSubstr("failed first: exit code 3: DataError: shard 7 is truncated"));
  EXPECT_THAT(result.summary().back(), HasSubstr("(after 1 restart(s))"));
}

TEST(Restarts, LogDirHasOneAttemptDirectoryPerRoundWithTheErrorRecord) {
  TempDir dir;
  WorkerRun run(dir, 1,
                {"env", "TORCHELASTIC_ERROR_FILE", "attempt", "0", "errorfile", "first try",
                 "attempt", "0", "exit", "4"});
  run.options.log_dir = dir.file("logs");
  run.options.run_id = "job9";
  run.options.max_restarts = 1;
  ASSERT_TRUE(launch(run.options).succeeded()) << run.err();
  const std::string a0 = dir.file("logs/job9/attempt_0/0/"),
                    a1 = dir.file("logs/job9/attempt_1/0/");
  EXPECT_THAT(read_file(a0 + "stdout.log"),
              HasSubstr("TORCHELASTIC_ERROR_FILE=" + a0 + "error.json"));
  EXPECT_THAT(read_file(a0 + "error.json"), HasSubstr("first try"));
  EXPECT_THAT(read_file(a1 + "stdout.log"),
              HasSubstr("TORCHELASTIC_ERROR_FILE=" + a1 + "error.json"));
  EXPECT_FALSE(fs::exists(a1 + "error.json"));
}

TEST(Restarts, ErrorFilesWithoutALogDirLiveInATemporaryDirectoryThatIsRemoved) {
  TempDir dir;
  WorkerRun run(dir, 1, {"env", "TORCHELASTIC_ERROR_FILE"});
  ASSERT_TRUE(launch(run.options).succeeded());
  std::string out = run.out();
  auto at = out.find("TORCHELASTIC_ERROR_FILE=");
  ASSERT_NE(at, std::string::npos) << out;
  std::string path = out.substr(at + 24, out.find('\n', at) - at - 24);
  EXPECT_THAT(path, HasSubstr("/attempt_0/0/error.json"));
  EXPECT_FALSE(fs::exists(fs::path(path).parent_path()));
}

// Two agents as threads of this process form one c10d rendezvous: node ranks,
// global ranks and the shared store of the round.
TEST(Restarts, TwoAgentsFormOneGroupOfFourRanks) {
  TempDir dir;
  const int port = restarts_port();
  ASSERT_GT(port, 0);
  std::vector<std::string> steps = {"env",    "RANK",       "env", "GROUP_RANK",
                                    "env",    "WORLD_SIZE", "env", "GROUP_WORLD_SIZE",
                                    "connect"};
  WorkerRun a(dir, 2, steps);
  TempDir dir_b;
  WorkerRun b(dir_b, 2, steps);
  for (LaunchOptions* o : {&a.options, &b.options}) {
    o->rdzv_backend = "c10d";
    o->rdzv_endpoint = "127.0.0.1:" + std::to_string(port);
    o->min_nodes = o->max_nodes = 2;
    o->run_id = "threads";
    o->rdzv_conf = "join_timeout=20";
  }
  LaunchResult ra, rb;
  std::thread ta([&] { ra = launch(a.options); });
  std::thread tb([&] { rb = launch(b.options); });
  ta.join();
  tb.join();
  ASSERT_TRUE(ra.succeeded()) << joined(ra.summary()) << a.err();
  ASSERT_TRUE(rb.succeeded()) << joined(rb.summary()) << b.err();
  std::string out = a.out() + b.out();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(
        out, HasSubstr("[rank" + std::to_string(rank) + "]: RANK=" + std::to_string(rank) + "\n"));
    EXPECT_THAT(out, HasSubstr("[rank" + std::to_string(rank) +
                               "]: GROUP_RANK=" + std::to_string(rank / 2) + "\n"));
  }
  EXPECT_THAT(out, HasSubstr("WORLD_SIZE=4\n"));
  EXPECT_THAT(out, HasSubstr("GROUP_WORLD_SIZE=2\n"));
  EXPECT_EQ(out.find("connect failed"), std::string::npos) << out;
  EXPECT_EQ(ra.master_port, rb.master_port);
}

// LaunchOptions::exit_barrier_timeout bounds how long a node whose workers
// all succeeded waits for the others: node A (not hosting) leaves after
// 200 ms while node B's worker still sleeps, and both runs succeed.
TEST(Restarts, AFinishedNodeWaitsAtTheExitBarrierOnlyForExitBarrierTimeout) {
  TempDir dir_a, dir_b;
  const int port = restarts_port();
  ASSERT_GT(port, 0);
  WorkerRun a(dir_a, 1, {"env", "RANK"});
  WorkerRun b(dir_b, 1, {"sleep", "3000", "env", "RANK"});
  for (LaunchOptions* o : {&a.options, &b.options}) {
    o->rdzv_backend = "c10d";
    o->rdzv_endpoint = "127.0.0.1:" + std::to_string(port);
    o->min_nodes = o->max_nodes = 2;
    o->run_id = "barrier";
  }
  b.options.rdzv_conf = "join_timeout=20,is_host=true";
  a.options.rdzv_conf = "join_timeout=20,is_host=false";
  a.options.exit_barrier_timeout = std::chrono::milliseconds(200);
  LaunchResult ra, rb;
  std::atomic<bool> b_done{false};
  std::thread tb([&] {
    rb = launch(b.options);
    b_done = true;
  });
  for (int i = 0; i < 500 && port_is_free(port); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::thread ta([&] { ra = launch(a.options); });
  ta.join();
  const bool b_done_when_a_left = b_done;
  tb.join();
  ASSERT_TRUE(ra.succeeded()) << joined(ra.summary()) << a.err();
  ASSERT_TRUE(rb.succeeded()) << joined(rb.summary()) << b.err();
  EXPECT_THAT(a.err(), HasSubstr("not every node finished within 0.2 s of this one"));
  EXPECT_FALSE(b_done_when_a_left) << "node A waited for node B's 3 s worker";
  EXPECT_THAT(b.err(), ::testing::Not(HasSubstr("not every node finished")));
}

// Node of rank 2 keeps failing: its agent spends the one restart, closes the
// rendezvous and reports the root cause; the other node's agent stops its
// healthy workers and fails naming that first failure.
TEST(Restarts, ExhaustedRestartsOnOneNodeEndTheRunEverywhereNamingTheFirstFailure) {
  TempDir dir_a, dir_b;
  const int port = restarts_port();
  std::vector<std::string> steps = {"rank", "2",    "errorfile", "DataError: boom", "rank",
                                    "2",    "exit", "3",         "sleep",           "30000"};
  WorkerRun a(dir_a, 2, steps), b(dir_b, 2, steps);
  for (LaunchOptions* o : {&a.options, &b.options}) {
    o->rdzv_backend = "c10d";
    o->rdzv_endpoint = "127.0.0.1:" + std::to_string(port);
    o->min_nodes = o->max_nodes = 2;
    o->run_id = "doomed";
    o->max_restarts = 1;
    o->rdzv_conf = "join_timeout=20";
  }
  struct Outcome {
    std::optional<LaunchResult> result;
    std::string error;
  } oa, ob;
  auto agent = [](LaunchOptions& o, Outcome& out) {
    try {
      out.result = launch(o);
    } catch (const Error& e) {
      out.error = e.what();
    }
  };
  auto start = std::chrono::steady_clock::now();
  std::thread ta([&] { agent(a.options, oa); });
  std::thread tb([&] { agent(b.options, ob); });
  ta.join();
  tb.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  Outcome& failed = oa.result && oa.result->root_cause ? oa : ob;
  Outcome& other = &failed == &oa ? ob : oa;
  ASSERT_TRUE(failed.result && failed.result->root_cause) << oa.error << ob.error;
  EXPECT_EQ(failed.result->exit_code(), 1);
  EXPECT_EQ(failed.result->root_cause->rank, 2);
  EXPECT_EQ(failed.result->restarts, 1);
  EXPECT_THAT(joined(failed.result->summary()),
              HasSubstr("first failure in the run: worker rank 2 on node 1"));
  EXPECT_THAT(other.error, HasSubstr("was ended by another node"));
  EXPECT_THAT(other.error, HasSubstr("first failure: worker rank 2 on node 1 ("));
  EXPECT_THAT(other.error, HasSubstr("exit code 3: DataError: boom"));
}

TEST(Restarts, RendezvousThatCannotCompleteTimesOutNamingTheEndpoint) {
  TempDir dir;
  const int port = restarts_port();
  WorkerRun run(dir, 1, {"print", "never"});
  run.options.rdzv_backend = "c10d";
  run.options.rdzv_endpoint = "127.0.0.1:" + std::to_string(port);
  run.options.min_nodes = run.options.max_nodes = 2;
  run.options.run_id = "lonely";
  run.options.rdzv_conf = "join_timeout=1";
  auto start = std::chrono::steady_clock::now();
  try {
    launch(run.options);
    ADD_FAILURE() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("127.0.0.1:" + std::to_string(port)));
    EXPECT_THAT(e.what(), HasSubstr("lonely"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_THAT(run.out(), ::testing::Not(HasSubstr("never")));
}

TEST(Restarts, ElasticOptionsAreCheckedBeforeAnythingStarts) {
  LaunchOptions o;
  o.command = {"true"};
  o.min_nodes = 1;
  o.max_nodes = 2;
  EXPECT_THAT([&] { launch(o); }, ::testing::ThrowsMessage<InvalidArgument>(
                                      HasSubstr("LaunchOptions::rdzv_backend c10d")));
  o.rdzv_backend = "c10d";
  EXPECT_THAT([&] { launch(o); }, ::testing::ThrowsMessage<InvalidArgument>(
                                      HasSubstr("needs LaunchOptions::rdzv_endpoint")));
  o.rdzv_backend = "zookeeper";
  EXPECT_THAT([&] { launch(o); }, ::testing::ThrowsMessage<InvalidArgument>(
                                      HasSubstr("'zookeeper' is not one of static, c10d, etcd")));
  o.rdzv_backend = "static";
  o.min_nodes = o.max_nodes = 2;
  o.node_rank = 2;
  EXPECT_THAT([&] { launch(o); }, ::testing::ThrowsMessage<InvalidArgument>(
                                      HasSubstr("LaunchOptions::node_rank 2 is outside")));
  o.node_rank = 1;
  EXPECT_THAT([&] { launch(o); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  HasSubstr("needs LaunchOptions::master_addr and LaunchOptions::master_port")));
  o.max_restarts = -1;
  EXPECT_THAT([&] { launch(o); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("LaunchOptions::max_restarts")));
}

// --- a lost node, seen by a real agent --------------------------------------

// An agent and a second participant that joins the round through the
// rendezvous API and then leaves without a word (as a dead node does, its
// heartbeat stops). The agent's worker fails the way Gloo makes it fail when
// a peer dies; with --max-restarts 0 the run still goes on, in a smaller
// group, because the restart is not counted.
TEST(Restarts, WorkersFailingBecauseANodeWasLostDoNotSpendARestart) {
  TempDir dir;
  const int port = restarts_port();
  ASSERT_GT(port, 0);
  WorkerRun a(dir, 1,
              {"world", "2", "errorfile",
               "dtrain::PeerLostError: rank 0: allreduce of gradient bucket 0: Connection closed "
               "by peer",
               "world", "2", "exit", "1", "env", "WORLD_SIZE"});
  const std::string conf =
      "join_timeout=20,last_call_timeout=1,heartbeat_interval=0.2,missed_heartbeats=3";
  a.options.rdzv_backend = "c10d";
  a.options.rdzv_endpoint = "127.0.0.1:" + std::to_string(port);
  a.options.min_nodes = 1;
  a.options.max_nodes = 2;
  a.options.run_id = "lost";
  a.options.max_restarts = 0;
  a.options.log_dir = dir.file("logs");
  a.options.rdzv_conf = conf + ",is_host=true";
  std::optional<LaunchResult> ra;
  std::string error;
  std::thread ta([&] {
    try {
      ra = launch(a.options);
    } catch (const Error& e) {
      error = e.what();
    }
  });
  detail::RendezvousConfig c;
  c.backend = "c10d";
  c.endpoint = a.options.rdzv_endpoint;
  c.run_id = "lost";
  c.min_nodes = 1;
  c.max_nodes = 2;
  c.apply_conf(conf + ",is_host=false,timeout=10");
  // What node A's launcher gives its rendezvous to agree on (--recovery).
  c.settings = detail::rendezvous_config(a.options).settings;
  // Join once the agent hosts the store, well within its last call.
  for (int i = 0; i < 200 && port_is_free(port); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string other_error;
  try {
    auto other = detail::make_rendezvous(c);
    detail::RendezvousInfo round = other->next_rendezvous();
    EXPECT_EQ(round.num_nodes, 2);
    // Leave once the agent's worker has failed (its error record is there),
    // so that the loss is found after the failure, not before.
    const std::string record = dir.file("logs/lost/attempt_0/0/error.json");
    for (int i = 0; i < 200 && !fs::exists(record); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(fs::exists(record));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } catch (const std::exception& e) {  // `other` is gone: its heartbeat stops
    other_error = e.what();
  }
  ta.join();
  EXPECT_EQ(other_error, "");
  ASSERT_TRUE(ra) << error << a.err();
  EXPECT_TRUE(ra->succeeded()) << joined(ra->summary()) << a.err();
  EXPECT_EQ(ra->restarts, 0);
  EXPECT_EQ(ra->rounds, 2);
  EXPECT_THAT(a.err(), HasSubstr("after a node of the round was lost; restarting the group "
                                 "without spending a restart (0 of 0)"));
  // The second round is the smaller group.
  EXPECT_THAT(read_file(dir.file("logs/lost/attempt_1/0/stdout.log")), HasSubstr("WORLD_SIZE=1\n"));
}

}  // namespace
}  // namespace dtrain
