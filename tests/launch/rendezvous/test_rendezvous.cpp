// The rendezvous protocol with agents as threads, over an in-memory store and
// a real TCP store; plus configuration parsing and make_rendezvous's hosting.
// Every test runs with short timeouts (heartbeats every 50 ms) and finishes
// in a few seconds; every thread is joined (std::async futures).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <set>
#include <thread>

#include "dtrain/errors.h"
#include "dtrain/store.h"
#include "launch/rendezvous/rendezvous.h"
#include "support/http.h"

namespace dtrain::detail {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

RendezvousConfig quick_config(int min_nodes, int max_nodes, int local_world_size = 1) {
  RendezvousConfig c;
  c.run_id = "test-run";
  c.min_nodes = min_nodes;
  c.max_nodes = max_nodes;
  c.local_world_size = local_world_size;
  c.join_timeout = 5s;
  c.last_call_timeout = 200ms;
  c.heartbeat_interval = 50ms;
  c.missed_heartbeats = 3;
  c.backend_timeout = 5s;
  return c;
}

/// Forwards to a real backend until kill(): then every call fails, like the
/// connection of an agent whose process died (no heartbeats, no goodbyes).
class FaultyBackend : public RendezvousBackend {
 public:
  explicit FaultyBackend(std::shared_ptr<RendezvousBackend> inner) : inner_(std::move(inner)) {}
  void kill() { dead_ = true; }

  std::string describe() const override { return inner_->describe(); }
  std::optional<std::string> get(const std::string& key) override { return check()->get(key); }
  void set(const std::string& key, const std::string& value) override { check()->set(key, value); }
  bool compare_set(const std::string& key, const std::optional<std::string>& expected,
                   const std::string& desired, std::optional<std::string>* current) override {
    return check()->compare_set(key, expected, desired, current);
  }
  int64_t add(const std::string& key, int64_t delta) override { return check()->add(key, delta); }
  void heartbeat(const std::string& key, std::chrono::milliseconds ttl) override {
    check()->heartbeat(key, ttl);
  }
  bool alive(const std::string& key, std::chrono::milliseconds ttl) override {
    return check()->alive(key, ttl);
  }
  void forget(const std::string& key) override { check()->forget(key); }

 private:
  RendezvousBackend* check() const {
    if (dead_) throw StoreError("injected fault: this agent is dead");
    return inner_.get();
  }
  std::shared_ptr<RendezvousBackend> inner_;
  std::atomic<bool> dead_{false};
};

struct Agent {
  std::shared_ptr<FaultyBackend> backend;
  std::unique_ptr<Rendezvous> rdzv;
};

/// Runs over the memory store ("memory") or a TCP store that every agent
/// reaches through its own client connection ("tcp").
class RendezvousTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "tcp") server_ = TcpStoreServer::start({"127.0.0.1", 0, 5s});
    memory_ = make_memory_store();
  }

  Agent agent(const RendezvousConfig& config, const std::string& id) {
    StorePtr store = server_ ? connect_tcp_store("127.0.0.1", server_->port(), 5s) : memory_;
    Agent a;
    a.backend = std::make_shared<FaultyBackend>(make_store_backend(store, describe()));
    a.rdzv = make_dynamic_rendezvous(a.backend, config, id);
    return a;
  }

  std::string describe() const {
    return server_ ? "c10d store at 127.0.0.1:" + std::to_string(server_->port()) : "memory store";
  }

  static std::future<RendezvousInfo> join_async(Agent& a) {
    return std::async(std::launch::async, [&a] { return a.rdzv->next_rendezvous(); });
  }

  std::unique_ptr<TcpStoreServer> server_;
  StorePtr memory_;
};

INSTANTIATE_TEST_SUITE_P(Stores, RendezvousTest, ::testing::Values("memory", "tcp"));

/// Waits up to `limit` for `pred`.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 3s) {
  auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

TEST_P(RendezvousTest, OneTwoAndThreeNodesAgreeOnRanksFromUnequalLocalWorldSizes) {
  for (int n = 1; n <= 3; ++n) {
    SCOPED_TRACE(n);
    SetUp();  // a fresh store per group size
    std::vector<Agent> agents;
    for (int i = 0; i < n; ++i)
      agents.push_back(agent(quick_config(n, n, i + 1), "node" + std::to_string(i)));
    std::vector<std::future<RendezvousInfo>> futures;
    for (auto& a : agents) futures.push_back(join_async(a));
    std::vector<RendezvousInfo> infos;
    for (auto& f : futures) infos.push_back(f.get());

    std::set<int> ranks;
    for (int i = 0; i < n; ++i) {
      const RendezvousInfo& info = infos[i];
      EXPECT_EQ(info.round, 0);
      EXPECT_EQ(info.num_nodes, n);
      EXPECT_EQ(info.local_world_sizes, infos[0].local_world_sizes);
      EXPECT_EQ(info.local_world_sizes[info.node_rank], i + 1);
      int base = 0;
      for (int r = 0; r < info.node_rank; ++r) base += info.local_world_sizes[r];
      EXPECT_EQ(info.base_rank(), base);
      EXPECT_EQ(info.world_size(), n * (n + 1) / 2);
      EXPECT_EQ(info.master_addr, infos[0].master_addr);
      EXPECT_EQ(info.master_port, infos[0].master_port);
      EXPECT_EQ(info.hosted_store != nullptr, info.node_rank == 0);
      ranks.insert(info.node_rank);
    }
    EXPECT_EQ(static_cast<int>(ranks.size()), n);
    // The workers' store is up at master_addr:master_port.
    StorePtr workers = connect_tcp_store(infos[0].master_addr, infos[0].master_port, 2s);
    workers->set("k", std::vector<uint8_t>{1});
  }
}

TEST_P(RendezvousTest, MaxNodesCompletesWithoutWaitingForTheLastCall) {
  RendezvousConfig c = quick_config(1, 2);
  c.last_call_timeout = 30s;
  Agent a = agent(c, "a"), b = agent(c, "b");
  auto start = Clock::now();
  auto fa = join_async(a), fb = join_async(b);
  EXPECT_EQ(fa.get().num_nodes, 2);
  EXPECT_EQ(fb.get().num_nodes, 2);
  EXPECT_LT(Clock::now() - start, 2s);
}

// RendezvousConfig::settings: nodes started with different --recovery would
// start workers that never meet; both nodes of the round are refused, each
// with one line naming the other node and both values.
TEST_P(RendezvousTest, NodesStartedWithDifferentSettingsAreBothRefusedNamingEachValue) {
  RendezvousConfig live = quick_config(2, 2);
  live.settings = "LaunchOptions::Recovery::kLive";
  RendezvousConfig restart = live;
  restart.settings = "LaunchOptions::Recovery::kRestart";
  Agent a = agent(live, "a"), b = agent(restart, "b");
  auto fa = join_async(a), fb = join_async(b);
  for (auto* f : {&fa, &fb}) {
    try {
      f->get();
      ADD_FAILURE() << "a round of nodes with different settings formed";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("LaunchOptions::Recovery::kLive"), std::string::npos) << what;
      EXPECT_NE(what.find("LaunchOptions::Recovery::kRestart"), std::string::npos) << what;
      EXPECT_NE(what.find("start every node with the same value"), std::string::npos) << what;
    }
  }
  // The same settings on both: the round forms.
  RendezvousConfig other_run = live;
  other_run.run_id = "other";
  Agent e = agent(other_run, "e"), g = agent(other_run, "g");
  auto fe = join_async(e), fg = join_async(g);
  EXPECT_EQ(fe.get().num_nodes, 2);
  EXPECT_EQ(fg.get().num_nodes, 2);
}

TEST_P(RendezvousTest, MinNodesCompleteOnceTheLastCallWindowExpires) {
  RendezvousConfig c = quick_config(2, 4);
  c.last_call_timeout = 400ms;
  Agent a = agent(c, "a"), b = agent(c, "b");
  auto start = Clock::now();
  auto fa = join_async(a), fb = join_async(b);
  EXPECT_EQ(fa.get().num_nodes, 2);
  EXPECT_EQ(fb.get().num_nodes, 2);
  EXPECT_GE(Clock::now() - start, 400ms);
  EXPECT_LT(Clock::now() - start, 3s);
}

TEST_P(RendezvousTest, LateNodeWaitsUntilTheRunningNodesRestartIntoTheNextRound) {
  RendezvousConfig c = quick_config(2, 3);
  Agent a = agent(c, "a"), b = agent(c, "b"), late = agent(c, "late");
  {
    auto fa = join_async(a), fb = join_async(b);
    EXPECT_EQ(fa.get().num_nodes, 2);
    EXPECT_EQ(fb.get().num_nodes, 2);
  }
  EXPECT_EQ(a.rdzv->num_nodes_waiting(), 0);
  auto fl = join_async(late);
  ASSERT_TRUE(eventually([&] { return a.rdzv->num_nodes_waiting() == 1; }));
  EXPECT_EQ(b.rdzv->num_nodes_waiting(), 1);
  auto fa = join_async(a), fb = join_async(b);
  for (auto* f : {&fa, &fb, &fl}) {
    RendezvousInfo info = f->get();
    EXPECT_EQ(info.round, 1);
    EXPECT_EQ(info.num_nodes, 3);
  }
}

TEST_P(RendezvousTest, AgentRestartingAfterAFailureMakesTheOthersJoinTheNextRound) {
  RendezvousConfig c = quick_config(2, 2);
  Agent a = agent(c, "a"), b = agent(c, "b");
  {
    auto fa = join_async(a), fb = join_async(b);
    fa.get();
    fb.get();
  }
  auto fa = join_async(a);  // a's workers failed
  ASSERT_TRUE(eventually([&] { return b.rdzv->num_nodes_waiting() > 0; }));
  EXPECT_FALSE(b.rdzv->lost_participants());
  auto fb = join_async(b);
  RendezvousInfo ia = fa.get(), ib = fb.get();
  EXPECT_EQ(ia.round, 1);
  EXPECT_EQ(ib.round, 1);
  EXPECT_NE(ia.node_rank, ib.node_rank);
}

TEST_P(RendezvousTest, DeadParticipantIsReportedAndDroppedFromTheNextRound) {
  RendezvousConfig c = quick_config(1, 2);
  Agent a = agent(c, "a"), b = agent(c, "b");
  {
    auto fa = join_async(a), fb = join_async(b);
    fa.get();
    fb.get();
  }
  b.backend->kill();  // b's agent dies: no heartbeats, never leaves
  ASSERT_TRUE(eventually([&] { return a.rdzv->lost_participants(); }));
  RendezvousInfo info = a.rdzv->next_rendezvous();
  EXPECT_EQ(info.round, 1);
  EXPECT_EQ(info.num_nodes, 1);
  EXPECT_EQ(info.node_rank, 0);
}

TEST_P(RendezvousTest, DeadNodeInAnOpenRoundIsDroppedBeforeCompletion) {
  RendezvousConfig c = quick_config(3, 3);
  Agent dead = agent(c, "dead"), a = agent(c, "a"), b = agent(c, "b"), d = agent(c, "d");
  auto fdead = join_async(dead);
  std::this_thread::sleep_for(100ms);
  dead.backend->kill();
  EXPECT_THROW(fdead.get(), StoreError);
  auto fa = join_async(a);
  std::this_thread::sleep_for(1s);  // a notices the stall and drops the dead slot
  auto fb = join_async(b), fd = join_async(d);
  for (auto* f : {&fa, &fb, &fd}) {
    RendezvousInfo info = f->get();
    EXPECT_EQ(info.num_nodes, 3);
    EXPECT_EQ(info.round, 0);
  }
}

TEST_P(RendezvousTest, JoinTimeoutNamesEndpointRunRoundAndArrivedNodes) {
  RendezvousConfig c = quick_config(2, 2);
  c.join_timeout = 300ms;
  Agent a = agent(c, "node-a");
  try {
    a.rdzv->next_rendezvous();
    FAIL() << "expected a timeout";
  } catch (const TimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(describe()), std::string::npos) << what;
    EXPECT_NE(what.find("'test-run'"), std::string::npos) << what;
    EXPECT_NE(what.find("round 0"), std::string::npos) << what;
    EXPECT_NE(what.find("1 node(s) arrived (node-a at 127.0.0.1)"), std::string::npos) << what;
    EXPECT_NE(what.find("2 needed"), std::string::npos) << what;
  }
  // It withdrew: a later pair forms the round without counting it.
  Agent b = agent(c, "b"), d = agent(c, "d");
  auto fb = join_async(b), fd = join_async(d);
  EXPECT_EQ(fb.get().num_nodes, 2);
  EXPECT_EQ(fd.get().num_nodes, 2);
}

TEST_P(RendezvousTest, ClosedRendezvousFailsWaitingAndLaterNodes) {
  RendezvousConfig c = quick_config(2, 2);
  Agent a = agent(c, "a"), b = agent(c, "b"), waiting = agent(c, "waiting"),
        later = agent(c, "later");
  {
    auto fa = join_async(a), fb = join_async(b);
    fa.get();
    fb.get();
  }
  auto fw = join_async(waiting);  // round 0 is complete: it waits
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(b.rdzv->is_closed());
  a.rdzv->set_closed();
  EXPECT_TRUE(b.rdzv->is_closed());
  try {
    fw.get();
    FAIL() << "expected the waiting node to fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rendezvous 'test-run' at " + describe() + " is closed"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(later.rdzv->next_rendezvous(), Error);
  EXPECT_THROW(b.rdzv->next_rendezvous(), Error);
}

TEST_P(RendezvousTest, WaitingNodeThatTimesOutLeavesTheWaitList) {
  RendezvousConfig c = quick_config(1, 3);
  c.last_call_timeout = 50ms;
  Agent a = agent(c, "a");
  a.rdzv->next_rendezvous();
  RendezvousConfig short_wait = c;
  short_wait.join_timeout = 300ms;
  Agent late = agent(short_wait, "late");
  auto fl = join_async(late);
  ASSERT_TRUE(eventually([&] { return a.rdzv->num_nodes_waiting() == 1; }));
  EXPECT_THROW(fl.get(), TimeoutError);
  EXPECT_EQ(a.rdzv->num_nodes_waiting(), 0);
}

// Note [Late nodes] (protocol_rounds.cpp): under live recovery a node that
// comes while a round of MAX nodes runs waits, without asking the running
// agents to restart, until a lost node makes room; it then joins that round
// as late node 1, behind the participants' ranks, with node 0's workers'
// store, and the others' exit barrier waits for it.
TEST_P(RendezvousTest, LiveLateNodeJoinsTheRunningRoundOnceALostNodeMakesRoom) {
  RendezvousConfig c = quick_config(2, 2, 2);
  c.join_running_round = true;
  Agent a = agent(c, "a"), b = agent(c, "b"), late = agent(c, "late");
  RendezvousInfo ia, ib;
  {
    auto fa = join_async(a), fb = join_async(b);
    ia = fa.get();
    ib = fb.get();
  }
  Agent& node0 = ia.node_rank == 0 ? a : b;
  Agent& node1 = ia.node_rank == 0 ? b : a;
  const RendezvousInfo& info0 = ia.node_rank == 0 ? ia : ib;
  auto fl = join_async(late);
  EXPECT_EQ(fl.wait_for(400ms), std::future_status::timeout) << "admitted beyond max_nodes";
  EXPECT_EQ(node0.rdzv->num_nodes_waiting(), 0);
  node1.backend->kill();  // node 1's agent dies: no heartbeats, never leaves
  ASSERT_EQ(fl.wait_for(3s), std::future_status::ready);
  const RendezvousInfo il = fl.get();
  EXPECT_EQ(il.round, 0);
  EXPECT_EQ(il.late, 1);
  EXPECT_EQ(il.num_nodes, 2);
  EXPECT_EQ(il.node_rank, 2);
  EXPECT_EQ(il.world_size(), 4);
  EXPECT_EQ(il.base_rank(), 4);
  EXPECT_EQ(il.master_addr, info0.master_addr);
  EXPECT_EQ(il.master_port, info0.master_port);
  EXPECT_EQ(il.hosted_store, nullptr);
  // Node 0 finishes first: it waits for the late node, not for dead node 1.
  auto barrier = std::async(std::launch::async, [&] { return node0.rdzv->exit_barrier(5s, true); });
  EXPECT_EQ(barrier.wait_for(300ms), std::future_status::timeout);
  EXPECT_TRUE(late.rdzv->exit_barrier(5s, true));
  EXPECT_TRUE(barrier.get());
}

// A late node finds max_nodes alive: it times out naming why, and leaves no
// entry that would hold a later node back. When the one node dies, the later
// node gets in if the workers share the rendezvous store (tcp: the endpoint's
// store and the round's prefix), and is told the job cannot be joined if
// node 0 hosted their store (memory).
TEST_P(RendezvousTest, LiveLateNodeWaitsWhileMaxNodesRunAndTimesOutSayingSo) {
  const bool shared = GetParam() == "tcp";
  RendezvousConfig c = quick_config(1, 1);
  c.join_running_round = true;
  c.last_call_timeout = 50ms;
  if (shared) {
    c.workers_share_store = true;
    c.endpoint = "127.0.0.1:" + std::to_string(server_->port());
  }
  Agent a = agent(c, "a");
  RendezvousInfo ia = a.rdzv->next_rendezvous();
  EXPECT_EQ(ia.worker_key_prefix, shared ? "dtrain/rdzv/test-run/r0/workers" : "");
  RendezvousConfig short_wait = c;
  short_wait.join_timeout = 400ms;
  Agent late = agent(short_wait, "late"), later = agent(c, "later");
  try {
    late.rdzv->next_rendezvous();
    FAIL() << "a late node was admitted beyond max_nodes";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("round 0 is running with 1 node(s) alive, and a "
                                               "late node is admitted only while fewer run"));
  }
  EXPECT_EQ(a.rdzv->num_nodes_waiting(), 0);
  auto fl = join_async(later);
  a.backend->kill();
  ASSERT_EQ(fl.wait_for(3s), std::future_status::ready);
  if (!shared) {
    try {
      fl.get();
      FAIL() << "joined a job whose workers' store is gone";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("hosted its workers' store and is gone: that "
                                                 "job cannot be joined"));
    }
    return;
  }
  RendezvousInfo il = fl.get();
  EXPECT_EQ(il.late, 2);
  EXPECT_EQ(il.base_rank(), 2);
  EXPECT_EQ(il.master_port, server_->port());
  EXPECT_EQ(il.worker_key_prefix, ia.worker_key_prefix);
}

// ---- configuration -----------------------------------------------------------

TEST(RendezvousConfigTest, ApplyConfReadsTorchrunKeysWithFractionalSeconds) {
  RendezvousConfig c;
  c.apply_conf(
      "join_timeout=12.5, last_call_timeout=1,close_timeout=3,heartbeat_interval=0.25,"
      "missed_heartbeats=4,timeout=7,is_host=false,local_addr=10.1.2.3,etcd_prefix=/x,");
  EXPECT_EQ(c.join_timeout, 12500ms);
  EXPECT_EQ(c.last_call_timeout, 1000ms);
  EXPECT_EQ(c.heartbeat_interval, 250ms);
  EXPECT_EQ(c.missed_heartbeats, 4);
  EXPECT_EQ(c.backend_timeout, 7000ms);
  ASSERT_TRUE(c.is_host.has_value());
  EXPECT_FALSE(*c.is_host);
  EXPECT_EQ(c.local_addr, "10.1.2.3");
  EXPECT_EQ(c.etcd_prefix, "/x");
  c.apply_conf("");  // nothing to do
}

TEST(RendezvousConfigTest, ApplyConfRejectsUnknownKeysAndBadValuesByName) {
  auto message = [](const std::string& conf) {
    RendezvousConfig c;
    try {
      c.apply_conf(conf);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("join_timout=5").find("unknown key 'join_timout'"), std::string::npos);
  EXPECT_NE(message("join_timeout=abc").find("join_timeout=abc"), std::string::npos);
  EXPECT_NE(message("join_timeout=-1").find("positive"), std::string::npos);
  EXPECT_NE(message("missed_heartbeats=0").find("missed_heartbeats=0"), std::string::npos);
  EXPECT_NE(message("is_host=maybe").find("is_host=maybe"), std::string::npos);
  EXPECT_NE(message("join_timeout").find("expected key=value"), std::string::npos);
}

TEST(RendezvousConfigTest, ParseEndpointSplitsHostAndPortOrUsesTheDefault) {
  EXPECT_EQ(parse_endpoint("node0:1234", 29400), std::make_pair(std::string("node0"), 1234));
  EXPECT_EQ(parse_endpoint("node0", 29400), std::make_pair(std::string("node0"), 29400));
  EXPECT_EQ(parse_endpoint("[::1]:5", 1), std::make_pair(std::string("::1"), 5));
  EXPECT_EQ(parse_endpoint("[::1]", 7), std::make_pair(std::string("::1"), 7));
  for (const char* bad : {"", ":5", "node0:abc", "node0:70000", "node0:0"}) {
    try {
      parse_endpoint(bad, 29400);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(RendezvousConfigTest, BaseRankAndWorldSizeArePrefixSums) {
  RendezvousInfo info;
  info.local_world_sizes = {2, 3, 4};
  info.node_rank = 2;
  EXPECT_EQ(info.base_rank(), 5);
  EXPECT_EQ(info.world_size(), 9);
}

// ---- make_rendezvous -----------------------------------------------------------

using dtrain::testing::free_port;

TEST(MakeRendezvousTest, RejectsABadConfigNamingTheProblem) {
  auto message = [](RendezvousConfig c) {
    try {
      make_rendezvous(c);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  RendezvousConfig c = quick_config(1, 1);
  c.endpoint = "127.0.0.1:1";
  RendezvousConfig bad = c;
  bad.backend = "zookeeper";
  EXPECT_NE(message(bad).find("'zookeeper'"), std::string::npos);
  bad = c;
  bad.min_nodes = 3;
  bad.max_nodes = 2;
  EXPECT_NE(message(bad).find("3:2"), std::string::npos);
  bad = c;
  bad.backend = "static";
  EXPECT_NE(message(bad).find("LaunchOptions::node_rank -1"), std::string::npos);
  bad = c;
  bad.endpoint = "";
  EXPECT_NE(message(bad).find("LaunchOptions::rdzv_endpoint"), std::string::npos);
}

TEST(MakeRendezvousTest, StaticBackendKeepsConfiguredNodeRanksAcrossRestarts) {
  const int port = free_port();
  // Created concurrently: nodes 2 and 1 connect while node 0 starts hosting.
  std::vector<std::future<std::unique_ptr<Rendezvous>>> made;
  for (int rank : {2, 0, 1}) {
    RendezvousConfig c = quick_config(3, 3, rank + 1);
    c.backend = "static";
    c.endpoint = "127.0.0.1:" + std::to_string(port);
    c.node_rank = rank;
    made.push_back(std::async(std::launch::async, [c] { return make_rendezvous(c); }));
  }
  std::vector<std::unique_ptr<Rendezvous>> nodes;
  for (auto& f : made) nodes.push_back(f.get());
  for (int round = 0; round < 2; ++round) {
    std::vector<std::future<RendezvousInfo>> futures;
    for (auto& n : nodes)
      futures.push_back(std::async(std::launch::async, [&n] { return n->next_rendezvous(); }));
    int expected_rank[] = {2, 0, 1};
    for (int i = 0; i < 3; ++i) {
      RendezvousInfo info = futures[i].get();
      EXPECT_EQ(info.round, round);
      EXPECT_EQ(info.node_rank, expected_rank[i]);
      EXPECT_EQ(info.local_world_sizes, (std::vector<int>{1, 2, 3}));
      EXPECT_EQ(info.base_rank(), expected_rank[i] * (expected_rank[i] + 1) / 2);
    }
  }
  // The store is hosted by node rank 0 (nodes[1]): destroy it last.
  nodes[0].reset();
  nodes[2].reset();
  nodes[1].reset();
}

TEST(MakeRendezvousTest, C10dAgentOnTheEndpointHostHostsAndTheSecondConnects) {
  const int port = free_port();
  RendezvousConfig c = quick_config(2, 2);
  c.endpoint = "127.0.0.1:" + std::to_string(port);
  std::unique_ptr<Rendezvous> host = make_rendezvous(c);  // port free: hosts
  EXPECT_FALSE(port_is_free(port));
  std::unique_ptr<Rendezvous> guest = make_rendezvous(c);  // port taken: connects
  EXPECT_EQ(guest->describe(), "c10d store at 127.0.0.1:" + std::to_string(port));
  auto fh = std::async(std::launch::async, [&] { return host->next_rendezvous(); });
  auto fg = std::async(std::launch::async, [&] { return guest->next_rendezvous(); });
  RendezvousInfo ih = fh.get(), ig = fg.get();
  EXPECT_EQ(ih.num_nodes, 2);
  EXPECT_EQ(ih.master_port, ig.master_port);
  EXPECT_EQ(ih.master_addr, "127.0.0.1");
  guest.reset();
  host.reset();
}

TEST(MakeRendezvousTest, C10dClientThatCannotReachTheStoreNamesHostAndPort) {
  const int port = free_port();
  RendezvousConfig c = quick_config(1, 1);
  c.endpoint = "127.0.0.1:" + std::to_string(port);
  c.is_host = false;
  c.backend_timeout = 300ms;
  try {
    make_rendezvous(c);
    FAIL() << "expected a connection failure";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dtrain::detail
