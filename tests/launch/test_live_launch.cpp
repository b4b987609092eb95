// dtrain::launch() under live recovery (LaunchOptions::Recovery::kLive) with
// the scriptable test worker: what the agent does, not the library (the
// workers here do not use dtrain/live.h, so the registration check is off
// except where it is the subject).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "dtrain/errors.h"
#include "dtrain/launch.h"
#include "launch/agent/worker_env.h"
#include "launch/launch_options.h"
#include "launch/launch_test_util.h"
#include "launch/rendezvous/rendezvous.h"

namespace dtrain {
namespace {

using testing::free_port_from;
using ::testing::HasSubstr;
using testing::joined;
using testing::process_alive;
using testing::read_file;
using testing::TempDir;
using testing::WorkerRun;
using Clock = std::chrono::steady_clock;

// This file's ports: their own range (free_port_from).
int live_launch_port() { return free_port_from(31700, 89); }

void make_live(LaunchOptions& o, int max_restarts) {
  o.recovery = LaunchOptions::Recovery::kLive;
  o.max_restarts = max_restarts;
  o.live_register_timeout = std::chrono::milliseconds(0);  // the test worker never registers
  o.stop_grace_period = std::chrono::milliseconds(500);
}

int pid_in(const TempDir& dir, int rank) {
  return std::stoi("0" + read_file(dir.file("rank" + std::to_string(rank) + ".pid")));
}

TEST(LiveLaunch, WorkersGetTheLiveRecoveryEnvironment) {
  TempDir dir;
  WorkerRun run(
      dir, 2,
      {"env", "DTRAIN_RECOVERY", "env", "DTRAIN_LIVE_MIN_WORKERS", "env", "DTRAIN_LIVE_JOIN", "env",
       "DTRAIN_LIVE_MEMBER", "env", "TORCH_NCCL_ASYNC_ERROR_HANDLING"});
  ::unsetenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");  // the agent's own environment sets none
  make_live(run.options, 1);
  LaunchResult result = launch(run.options);
  ASSERT_TRUE(result.succeeded()) << ::testing::PrintToString(result.summary());
  for (const char* p : {"[rank0]: ", "[rank1]: "}) {
    EXPECT_THAT(run.out(), HasSubstr(std::string(p) + "DTRAIN_RECOVERY=live\n"));
    EXPECT_THAT(run.out(), HasSubstr(std::string(p) + "DTRAIN_LIVE_MIN_WORKERS=1\n"));
    EXPECT_THAT(run.out(), HasSubstr(std::string(p) + "DTRAIN_LIVE_JOIN=0\n"));
    // Note [NCCL's watchdog under live recovery]: a survivor is not ended by
    // its NCCL watchdog when a peer dies.
    EXPECT_THAT(run.out(), HasSubstr(std::string(p) + "TORCH_NCCL_ASYNC_ERROR_HANDLING=0\n"));
  }
  EXPECT_THAT(run.out(), HasSubstr("[rank1]: DTRAIN_LIVE_MEMBER=rank1@"));
  EXPECT_THAT(run.err(), HasSubstr("hosted by node 0's agent: losing node 0 ends the job"));
}

// The dead worker (SIGKILL) is started again alone with DTRAIN_LIVE_JOIN=1
// and the same RANK; the others are never stopped: their pids at the end are
// the ones they wrote at the start, and each started once.
TEST(LiveLaunch, AKilledWorkerIsReplacedAloneWhileTheOthersKeepTheirProcesses) {
  TempDir dir;
  WorkerRun run(dir, 3,
                {"pidfile", dir.path(), "env", "DTRAIN_LIVE_JOIN", "env", "DTRAIN_LIVE_MEMBER",
                 "join", "0", "rank", "1", "raise", "9", "sleep", "1500", "print", "finished"});
  make_live(run.options, 2);
  LaunchResult result = launch(run.options);

  ASSERT_TRUE(result.succeeded()) << ::testing::PrintToString(result.summary());
  EXPECT_EQ(result.rounds, 1);
  EXPECT_EQ(result.restarts, 1);
  ASSERT_EQ(result.recovered_failures.size(), 1u);
  EXPECT_THAT(result.recovered_failures[0], HasSubstr("worker rank 1 (pid "));
  EXPECT_THAT(result.recovered_failures[0], HasSubstr("killed by SIGKILL; replaced by pid "));
  ASSERT_EQ(result.workers.size(), 3u);
  for (int rank : {0, 2}) EXPECT_EQ(result.workers[rank].pid, pid_in(dir, rank)) << rank;
  EXPECT_EQ(result.workers[1].pid, pid_in(dir, 1));  // the replacement's pidfile
  const std::string out = run.out();
  for (const char* line : {"[rank0]: DTRAIN_LIVE_JOIN=0\n", "[rank2]: DTRAIN_LIVE_JOIN=0\n",
                           "[rank1]: DTRAIN_LIVE_JOIN=1\n", "[rank1]: DTRAIN_LIVE_MEMBER=rank1@"}) {
    EXPECT_THAT(out, HasSubstr(line));
  }
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = out.find(what); at != std::string::npos; at = out.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("[rank0]: DTRAIN_LIVE_JOIN="), 1u);
  EXPECT_EQ(count("[rank2]: DTRAIN_LIVE_JOIN="), 1u);
  EXPECT_EQ(count("finished\n"), 3u);
  EXPECT_THAT(out, ::testing::ContainsRegex("\\[rank1\\]: DTRAIN_LIVE_MEMBER=rank1@[^\n]*\\+1\n"));
  EXPECT_THAT(run.err(), HasSubstr("live recovery: worker rank 1 (pid "));
  EXPECT_THAT(run.err(), HasSubstr("the other workers keep running; started a replacement"));
  EXPECT_THAT(run.err(), HasSubstr("1 replacement(s) left (--max-restarts)"));
}

// With no replacement left the dead worker stays dead; the others finish the
// job without it, and the node succeeds listing it as lost.
TEST(LiveLaunch, AWorkerFailingWithNoRestartsLeftIsLostAndTheOthersFinish) {
  TempDir dir;
  WorkerRun run(dir, 3, {"rank", "2", "exit", "3", "sleep", "800", "print", "finished"});
  make_live(run.options, 0);
  const auto start = Clock::now();
  LaunchResult result = launch(run.options);
  ASSERT_TRUE(result.succeeded()) << ::testing::PrintToString(result.summary());
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(700));  // nobody was stopped
  ASSERT_EQ(result.lost_workers.size(), 1u);
  EXPECT_EQ(result.lost_workers[0].rank, 2);
  EXPECT_EQ(result.lost_workers[0].exit_code, 3);
  EXPECT_EQ(result.workers.size(), 2u);
  EXPECT_THAT(run.out(), HasSubstr("[rank0]: finished"));
  EXPECT_THAT(run.out(), HasSubstr("[rank1]: finished"));
}

// The library ends the job below the minimum: every survivor exits non-zero
// with a record naming the lost ranks; that line is the root cause, not the
// killed worker, and nobody is replaced after it.
TEST(LiveLaunch, AJobTheLibraryEndedBelowTheMinimumFailsNamingTheLostRanks) {
  TempDir dir;
  const std::string ended =
      "dtrain::BelowMinWorkersError: 1 live worker(s), below the minimum 2; lost: rank1@host "
      "(missed heartbeats)";
  WorkerRun run(dir, 2,
                {"rank", "1", "raise", "9", "sleep", "300", "errorfile", ended, "exit", "1"});
  make_live(run.options, 0);
  run.options.live_min_workers = 1;
  LaunchResult result = launch(run.options);
  ASSERT_FALSE(result.succeeded());
  EXPECT_EQ(result.exit_code(), 1);
  ASSERT_TRUE(result.root_cause.has_value());
  EXPECT_EQ(result.root_cause->rank, 0);
  EXPECT_THAT(::testing::PrintToString(result.summary()), HasSubstr(ended));
}

TEST(LiveLaunch, ARecordSayingTheJobEndedIsNotReplaced) {
  TempDir dir;
  WorkerRun run(
      dir, 2,
      {"join", "0", "rank", "1", "errorfile", "dtrain::BelowMinWorkersError: lost: rank0@host",
       "rank", "1", "exit", "1", "sleep", "300"});
  make_live(run.options, 3);
  LaunchResult result = launch(run.options);
  EXPECT_EQ(result.restarts, 0);
  EXPECT_THAT(run.err(), ::testing::Not(HasSubstr("started a replacement")));
}

// Note [Registration check] (agent.cpp): a program without the per-step API
// ends the run with a usage error naming it, whether it keeps running past
// the bound or exits first; its workers are gone when launch() throws.
TEST(LiveLaunch, AProgramThatNeverRegistersEndsTheRunNamingTheApi) {
  TempDir dir;
  WorkerRun run(dir, 2, {"pidfile", dir.path(), "sleep", "30000"});
  make_live(run.options, 1);
  run.options.live_register_timeout = std::chrono::milliseconds(1000);
  const auto start = Clock::now();
  try {
    launch(run.options);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("never registered with live recovery"));
    EXPECT_THAT(e.what(), HasSubstr("should_commit()"));
    EXPECT_THAT(e.what(), HasSubstr(LAUNCH_TEST_WORKER));
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  for (int rank : {0, 1}) EXPECT_FALSE(process_alive(pid_in(dir, rank))) << rank;
}

TEST(LiveLaunch, AProgramThatExitsWithoutRegisteringIsAUsageError) {
  TempDir dir;
  WorkerRun run(dir, 2, {"print", "hello"});
  make_live(run.options, 1);
  run.options.live_register_timeout = std::chrono::seconds(60);
  EXPECT_THROW(
      {
        try {
          launch(run.options);
        } catch (const InvalidArgument& e) {
          EXPECT_THAT(e.what(), HasSubstr("before its workers exited"));
          throw;
        }
      },
      InvalidArgument);
}

TEST(LiveLaunch, OneWorkerInAllHasNothingToSurviveWith) {
  TempDir dir;
  WorkerRun run(dir, 1, {"print", "x"});
  make_live(run.options, 1);
  try {
    launch(run.options);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("has nothing to survive with"));
    EXPECT_THAT(e.what(), HasSubstr("LaunchOptions::Recovery::kRestart"));
  }
}

TEST(LiveLaunch, AParameterServerJobIsRefused) {
  TempDir dir;
  WorkerRun run(dir, 2, {"print", "x"});
  make_live(run.options, 1);
  run.options.ps_servers = 1;
  EXPECT_THROW(launch(run.options), InvalidArgument);
}

// --- several nodes: agents as threads over one c10d rendezvous ---------------

// 2 nodes x 2 workers: rank 3 (node 1) is SIGKILLed; its agent replaces it
// alone, node 0's agent and workers notice nothing (no new round, same pids).
TEST(LiveLaunch, OnTwoNodesAKilledWorkerIsReplacedAndTheOtherNodeKeepsItsWorkers) {
  TempDir dir_a, dir_b;
  const int port = live_launch_port();
  ASSERT_GT(port, 0);
  auto steps = [](const TempDir& d) {
    return std::vector<std::string>{"pidfile", d.path(), "join",  "0",    "rank",  "3",
                                    "raise",   "9",      "sleep", "2000", "print", "finished"};
  };
  WorkerRun a(dir_a, 2, steps(dir_a)), b(dir_b, 2, steps(dir_b));
  for (LaunchOptions* o : {&a.options, &b.options}) {
    o->rdzv_backend = "c10d";
    o->rdzv_endpoint = "127.0.0.1:" + std::to_string(port);
    o->min_nodes = o->max_nodes = 2;
    o->run_id = "live2x2";
    make_live(*o, 1);
  }
  a.options.rdzv_conf = "join_timeout=20,is_host=true";
  b.options.rdzv_conf = "join_timeout=20,is_host=false";
  LaunchResult ra, rb;
  std::thread ta([&] { ra = launch(a.options); });
  for (int i = 0; i < 500 && port_is_free(port); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::thread tb([&] { rb = launch(b.options); });
  ta.join();
  tb.join();
  ASSERT_TRUE(ra.succeeded()) << joined(ra.summary()) << a.err();
  ASSERT_TRUE(rb.succeeded()) << joined(rb.summary()) << b.err();
  EXPECT_EQ(ra.rounds, 1);
  EXPECT_EQ(rb.rounds, 1);
  EXPECT_EQ(ra.restarts, 0);
  EXPECT_EQ(rb.restarts, 1);
  // Node 0 holds ranks 0-1 here (it hosts the rendezvous and came first).
  for (const LaunchResult* r : {&ra, &rb}) {
    for (const WorkerExit& w : r->workers) {
      const TempDir& d = r == &ra ? dir_a : dir_b;
      EXPECT_EQ(w.pid, pid_in(d, w.rank)) << "rank " << w.rank;
    }
  }
  const std::string out = a.out() + b.out();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(out, HasSubstr("[rank" + std::to_string(rank) + "]: finished\n"));
  }
  EXPECT_THAT(b.err(), HasSubstr("live recovery: worker rank 3 (pid "));
  EXPECT_THAT(a.err() + b.err(), ::testing::Not(HasSubstr("membership changed")));
}

// Over a c10d rendezvous the workers share the rendezvous store (Note [Where
// the live store lives]): MASTER_PORT is the endpoint's, their keys go under
// the round's prefix, and the agent hosting it says that losing its node
// ends the job.
TEST(LiveLaunch, OverAC10dRendezvousTheWorkersShareItsStoreUnderTheRoundsPrefix) {
  TempDir dir;
  const int port = live_launch_port();
  ASSERT_GT(port, 0);
  WorkerRun run(dir, 2, {"env", "MASTER_PORT", "env", "DTRAIN_LIVE_KEY_PREFIX"});
  run.options.rdzv_backend = "c10d";
  run.options.rdzv_endpoint = "127.0.0.1:" + std::to_string(port);
  run.options.run_id = "shared";
  run.options.rdzv_conf = "join_timeout=20,is_host=true";
  make_live(run.options, 1);
  LaunchResult result = launch(run.options);
  ASSERT_TRUE(result.succeeded()) << joined(result.summary()) << run.err();
  for (const char* p : {"[rank0]: ", "[rank1]: "}) {
    EXPECT_THAT(run.out(),
                HasSubstr(std::string(p) + "MASTER_PORT=" + std::to_string(port) + "\n"));
    EXPECT_THAT(run.out(), HasSubstr(std::string(p) +
                                     "DTRAIN_LIVE_KEY_PREFIX=dtrain/rdzv/shared/r0/workers\n"));
  }
  EXPECT_THAT(run.err(), HasSubstr("the workers share the rendezvous store at 127.0.0.1:" +
                                   std::to_string(port) +
                                   ", hosted by this node's agent: losing this node ends the job"));
}

// RendezvousConfig::settings: a node started with --recovery live and one
// with --recovery restart would start workers that never meet. Both are
// refused with one line naming the other node's value and their own; the
// node that hosts the store keeps it until the other has read the round, so
// that node says why too instead of losing the store.
TEST(LiveLaunch, NodesStartedWithDifferentRecoveryAreBothRefusedNamingEachValue) {
  TempDir dir_a, dir_b;
  const int port = live_launch_port();
  ASSERT_GT(port, 0);
  WorkerRun a(dir_a, 1, {"print", "started"}), b(dir_b, 1, {"print", "started"});
  for (LaunchOptions* o : {&a.options, &b.options}) {
    o->rdzv_backend = "c10d";
    o->rdzv_endpoint = "127.0.0.1:" + std::to_string(port);
    o->min_nodes = o->max_nodes = 2;
    o->run_id = "mixed";
  }
  make_live(a.options, 0);
  a.options.rdzv_conf = "join_timeout=20,is_host=true";
  b.options.rdzv_conf = "join_timeout=20,is_host=false";
  std::string error_a, error_b;
  std::thread ta([&] {
    try {
      launch(a.options);
    } catch (const InvalidArgument& e) {
      error_a = e.what();
    }
  });
  for (int i = 0; i < 500 && port_is_free(port); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::thread tb([&] {
    try {
      launch(b.options);
    } catch (const InvalidArgument& e) {
      error_b = e.what();
    }
  });
  ta.join();
  tb.join();
  EXPECT_THAT(error_a, HasSubstr("was started with LaunchOptions::Recovery::kRestart and this "
                                 "node"));
  EXPECT_THAT(error_a, HasSubstr("with LaunchOptions::Recovery::kLive: start every node"));
  EXPECT_THAT(error_b, HasSubstr("was started with LaunchOptions::Recovery::kLive and this node"));
  EXPECT_THAT(error_b, HasSubstr("with LaunchOptions::Recovery::kRestart: start every node"));
  EXPECT_THAT(a.out() + b.out(), ::testing::Not(HasSubstr("started")));
}

// The same linger serves the static rendezvous's node-rank check, which
// fails at the same place (a round every node refuses): three nodes, two of
// them started with node rank 1 and none with 2, are all refused with one
// line naming the clash. Node 0 hosts the store and keeps it until the
// others have read the round, so that they say why too instead of losing
// the store (without that linger, most runs end with the other nodes'
// StoreError: "Connection was likely closed").
TEST(LiveLaunch, StaticNodesWithADuplicateNodeRankAreAllRefusedNamingTheRanks) {
  TempDir dir0, dir1, dir2;
  const int port = live_launch_port();
  ASSERT_GT(port, 0);
  WorkerRun n0(dir0, 1, {"print", "started"}), n1(dir1, 1, {"print", "started"}),
      n1_again(dir2, 1, {"print", "started"});
  WorkerRun* nodes[] = {&n0, &n1, &n1_again};
  const int node_ranks[] = {0, 1, 1};
  for (int i = 0; i < 3; ++i) {
    LaunchOptions& o = nodes[i]->options;
    o.rdzv_backend = "static";
    o.master_addr = "127.0.0.1";
    o.master_port = port;
    o.min_nodes = o.max_nodes = 3;
    o.node_rank = node_ranks[i];
    o.run_id = "duplicate";
    o.rdzv_conf = "join_timeout=20";
  }
  std::string errors[3];
  auto run = [&](int i) {
    return std::thread([&, i] {
      try {
        launch(nodes[i]->options);
      } catch (const InvalidArgument& e) {
        errors[i] = e.what();
      } catch (const std::exception& e) {  // a node that lost the store: StoreError
        errors[i] = std::string("not the refusal: ") + e.what();
      }
    });
  };
  std::thread t0 = run(0);  // node 0 first: it hosts the store
  for (int i = 0; i < 500 && port_is_free(port); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::thread t1 = run(1), t2 = run(2);
  t0.join();
  t1.join();
  t2.join();
  for (const std::string& e : errors) {
    EXPECT_THAT(e, HasSubstr("duplicate or missing LaunchOptions::node_rank")) << e;
    EXPECT_THAT(e, HasSubstr("has node rank 1, expected 2 of 0..2")) << e;
    EXPECT_THAT(e, HasSubstr("give every node a distinct LaunchOptions::node_rank")) << e;
  }
  EXPECT_THAT(n0.out() + n1.out() + n1_again.out(), ::testing::Not(HasSubstr("started")));
}

// A node that disappears without a word (its heartbeats stop) does not stop
// the other node's workers, and the finished node does not wait out the exit
// barrier (300 s) for it.
TEST(LiveLaunch, ANodeLostWithoutAWordLeavesTheOtherNodesWorkersRunning) {
  TempDir dir;
  const int port = live_launch_port();
  ASSERT_GT(port, 0);
  WorkerRun a(dir, 2, {"pidfile", dir.path(), "sleep", "2500", "print", "finished"});
  const std::string conf =
      "join_timeout=20,last_call_timeout=1,heartbeat_interval=0.2,missed_heartbeats=3";
  a.options.rdzv_backend = "c10d";
  a.options.rdzv_endpoint = "127.0.0.1:" + std::to_string(port);
  a.options.min_nodes = 1;
  a.options.max_nodes = 2;
  a.options.run_id = "livelost";
  a.options.rdzv_conf = conf + ",is_host=true";
  make_live(a.options, 1);
  std::optional<LaunchResult> ra;
  std::string error;
  const auto start = Clock::now();
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
  c.run_id = "livelost";
  c.min_nodes = 1;
  c.max_nodes = 2;
  c.local_world_size = 1;
  c.apply_conf(conf + ",is_host=false,timeout=10");
  c.workers_share_store = true;  // as node A's agent has it (a live job over c10d)
  // What node A's launcher gives its rendezvous to agree on (--recovery).
  c.settings = detail::rendezvous_config(a.options).settings;
  for (int i = 0; i < 200 && port_is_free(port); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    auto other = detail::make_rendezvous(c);
    detail::RendezvousInfo round = other->next_rendezvous();
    EXPECT_EQ(round.num_nodes, 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }  // `other` is gone: its heartbeat stops while node A's workers run
  ta.join();
  ASSERT_TRUE(ra) << error << a.err();
  EXPECT_TRUE(ra->succeeded()) << joined(ra->summary()) << a.err();
  EXPECT_EQ(ra->rounds, 1);
  for (const WorkerExit& w : ra->workers) EXPECT_EQ(w.pid, pid_in(dir, w.rank));
  EXPECT_THAT(a.out(), HasSubstr("finished"));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
  EXPECT_THAT(a.err(), ::testing::Not(HasSubstr("not every node finished")));
}

// --- with the library: examples/live_recovery.cpp under the agent -----------

#ifdef LIVE_EXAMPLE
// 3 workers of the live-recovery example, rank 1 SIGKILLs itself in step 8:
// the agent replaces it (DTRAIN_LIVE_JOIN=1), the survivors keep their
// processes, every member ends with the same weights, and the program
// registered (the registration check is on).
TEST(LiveLaunch, TheLiveExampleSurvivesASigkilledWorkerAndTheReplacementEndsWithTheSameWeights) {
  TempDir dir;
  LaunchOptions o;
  o.nproc_per_node = 3;
  // Enough steps for the replacement to start and join on a loaded machine
  // (a joiner that arrives after the others finished waits out its start
  // timeout: docs/live_recovery.md).
  o.command = {LIVE_EXAMPLE, "--steps",    "400", "--die-at-step", "8", "--die-rank",
               "1",          "--pause-ms", "50"};
  o.recovery = LaunchOptions::Recovery::kLive;
  o.max_restarts = 1;
  o.live_register_timeout = std::chrono::seconds(60);
  o.handle_signals = false;
  const int out = ::open(dir.file("out.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err = ::open(dir.file("err.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  o.stdout_fd = out;
  o.stderr_fd = err;
  LaunchResult result = launch(o);
  ::close(out);
  ::close(err);
  const std::string text = read_file(dir.file("out.txt")), errors = read_file(dir.file("err.txt"));
  ASSERT_TRUE(result.succeeded()) << joined(result.summary()) << errors;
  EXPECT_EQ(result.restarts, 1);
  EXPECT_EQ(result.rounds, 1);
  EXPECT_THAT(errors, HasSubstr("live recovery: worker rank 1 (pid "));
  std::regex line("member (\\S+) pid (\\d+) step 400 weights checksum ([-0-9.eE+]+)");
  std::map<std::string, std::pair<int, double>> members;
  for (std::sregex_iterator it(text.begin(), text.end(), line), end; it != end; ++it) {
    members[(*it)[1]] = {std::stoi((*it)[2]), std::stod((*it)[3])};
  }
  ASSERT_EQ(members.size(), 3u) << text << errors;
  std::set<int> pids;
  for (const auto& [member, v] : members) {
    pids.insert(v.first);
    EXPECT_DOUBLE_EQ(v.second, members.begin()->second.second) << member;
  }
  for (const WorkerExit& w : result.workers) EXPECT_EQ(pids.count(w.pid), 1u) << w.rank;
  EXPECT_EQ(members.count(detail::live_member_id(1) + "+1"), 1u) << text;
  std::cerr << "pids at the end: " << ::testing::PrintToString(pids) << "\n";
}
#endif

}  // namespace
}  // namespace dtrain
