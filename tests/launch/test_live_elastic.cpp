// `dtrain run --recovery live -- dtrain train` as whole processes (issue 19):
// 2 nodes x 2 workers (two agents with --nnodes 2) and 4 x 1 on loopback, a
// worker SIGKILLed mid-training: the job finishes with exit 0, the survivors'
// pids do not change, the dead worker is replaced and ends with the others'
// weights; more losses than --live-min-workers allows end the job naming the
// ranks; a dropped link (network namespaces, root only) is detected and the
// job goes on; with the store in its own process (`dtrain store`, in its own
// namespace where root), losing node 0 leaves node 1 training, and a node
// started after that joins the running job. Skipped where dtrain was built
// without src/live.

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include "launch_test_util.h"
#include "netns_cluster.h"

namespace dtrain::testing {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

/// True when 127.0.0.1:port can be bound now.
bool port_is_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

int free_rdzv_port() {
  for (int port = 32700 + (::getpid() % 700); port < 65000; port += 83) {
    if (port_is_free(port)) return port;
  }
  return 0;
}

/// "live: member M finished at step S, parameter sum X" lines: M -> X.
std::map<std::string, double> parameter_sums(const std::string& text) {
  std::map<std::string, double> sums;
  std::regex re("live: member (\\S+) finished at step \\d+, parameter sum ([-0-9.eE+]+)");
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
    sums[(*it)[1]] = std::stod((*it)[2]);
  }
  return sums;
}

class LiveTraining : public ::testing::Test {
 protected:
  /// One agent (`dtrain run --recovery live`) of `nodes`, training a small
  /// model on synthetic data for a few hundred steps.
  std::unique_ptr<Proc> agent(const std::vector<std::string>& prefix, int nodes, int nproc,
                              int port, const std::string& name, int min_workers, int max_restarts,
                              const std::string& conf_extra = "") {
    std::vector<std::string> argv = prefix;
    const std::vector<std::string> run = {DTRAIN_BINARY,
                                          "run",
                                          "--nnodes",
                                          std::to_string(nodes),
                                          "--nproc-per-node",
                                          std::to_string(nproc),
                                          "--rdzv-backend",
                                          "c10d",
                                          "--rdzv-endpoint",
                                          endpoint_ + ":" + std::to_string(port),
                                          "--rdzv-id",
                                          "live",
                                          "--recovery",
                                          "live",
                                          "--live-min-workers",
                                          std::to_string(min_workers),
                                          "--max-restarts",
                                          std::to_string(max_restarts),
                                          "--live-register-timeout",
                                          "120",
                                          "--rdzv-conf",
                                          "join_timeout=60,heartbeat_interval=0.5" + conf_extra,
                                          "--",
                                          DTRAIN_BINARY,
                                          "train",
                                          "--model",
                                          "cnn",
                                          "--dataset",
                                          "synthetic",
                                          "--data-dir",
                                          "1x28x28:10:4096",
                                          "--epochs",
                                          epochs_,
                                          "--batch-size",
                                          "8",
                                          "--eval-batch-size",
                                          "512",
                                          "--threads",
                                          "1",
                                          "--device",
                                          "cpu",
                                          "--progress-steps",
                                          "1",
                                          "--seed",
                                          "7"};
    argv.insert(argv.end(), run.begin(), run.end());
    return std::make_unique<Proc>(argv, dir_.file(name + ".log"),
                                  std::vector<std::string>{"DTRAIN_LIVE_FAILURE_TIMEOUT_MS=1500"});
  }
  /// Skips the test when the binary cannot do live recovery.
  bool unsupported(const Proc& p) {
    return p.output().find("built without live recovery") != std::string::npos;
  }
  /// Waits until rank 0 reports `step` in its progress lines.
  bool reached(const Proc& p, int step) {
    return eventually(
        [&] {
          return p.output().find(" step " + std::to_string(step) + "/") != std::string::npos ||
                 unsupported(p);
        },
        seconds(120));
  }
  /// Kills one worker of `agent` (its last child) with SIGKILL; returns the
  /// pids of its other children.
  std::set<int> kill_one_worker(const Proc& agent) {
    std::vector<int> kids = children_of(agent.pid());
    EXPECT_FALSE(kids.empty());
    if (kids.empty()) return {};
    ::kill(kids.back(), SIGKILL);
    kids.pop_back();
    return {kids.begin(), kids.end()};
  }
  void expect_same_weights(const std::string& text, size_t members) {
    const auto sums = parameter_sums(text);
    ASSERT_EQ(sums.size(), members) << text;
    for (const auto& [member, sum] : sums) {
      EXPECT_NEAR(sum, sums.begin()->second, 1e-6 * std::abs(sums.begin()->second) + 1e-9)
          << member;
    }
    bool replacement = false;
    for (const auto& [member, sum] : sums) replacement |= member.find('+') != std::string::npos;
    EXPECT_TRUE(replacement) << "no replacement finished: " << text;
  }

  void lose_node0_with_the_store_off(
      const std::vector<std::string>& store_prefix,
      const std::function<std::vector<std::string>(int)>& node_prefix, int port,
      const std::string& said, bool then_a_new_node = false);

  TempDir dir_;
  std::string endpoint_ = "127.0.0.1";
  std::string epochs_ = "1";
};

// 2 nodes x 2 workers: a worker of node 1 is SIGKILLed at step 20.
TEST_F(LiveTraining, TwoNodesOfTwoSurviveASigkilledWorkerAndItsReplacementMatchesTheOthers) {
  const int port = free_rdzv_port();
  auto a = agent({}, 2, 2, port, "a", 2, 1);
  ASSERT_TRUE(eventually([&] { return !port_is_free(port); }, seconds(20)));
  auto b = agent({}, 2, 2, port, "b", 2, 1);
  ASSERT_TRUE(reached(*a, 20)) << a->output() << b->output();
  if (unsupported(*a)) GTEST_SKIP() << "dtrain was built without live recovery";
  const std::vector<int> kids_a = children_of(a->pid());
  const std::set<int> before_a(kids_a.begin(), kids_a.end());
  const std::set<int> survivors_b = kill_one_worker(*b);
  // Training goes on past the loss with the same processes on node 0 and the
  // survivor on node 1 (the replacement is a new child of node 1's agent).
  ASSERT_TRUE(reached(*a, 40)) << a->output() << b->output();
  const std::vector<int> now_a = children_of(a->pid()), now_b = children_of(b->pid());
  EXPECT_EQ(std::set<int>(now_a.begin(), now_a.end()), before_a);
  for (int pid : survivors_b) {
    EXPECT_NE(std::find(now_b.begin(), now_b.end(), pid), now_b.end()) << pid;
  }
  ASSERT_NE(a->wait(seconds(240)), -1) << a->output();
  ASSERT_NE(b->wait(seconds(60)), -1) << b->output();
  EXPECT_EQ(a->exit_code(), 0) << a->output();
  EXPECT_EQ(b->exit_code(), 0) << b->output();
  EXPECT_THAT(b->output(), HasSubstr("live recovery: worker rank"));
  EXPECT_THAT(b->output(), HasSubstr("started a replacement as pid"));
  EXPECT_THAT(a->output() + b->output(), HasSubstr("live recovery: generation"));
  // Node 0's workers and node 1's surviving worker kept their processes:
  // none of them was restarted (their agents started no other).
  EXPECT_THAT(a->output(), ::testing::Not(HasSubstr("restarting the group")));
  EXPECT_THAT(a->output(), ::testing::Not(HasSubstr("started a replacement")));
  std::cerr << "survivors' pids: node 0 " << ::testing::PrintToString(before_a) << ", node 1 "
            << ::testing::PrintToString(survivors_b) << "\n";
  expect_same_weights(a->output() + b->output(), 4);
}

// 4 nodes x 1 worker on loopback: one node's worker is SIGKILLed.
TEST_F(LiveTraining, FourNodesOfOneSurviveASigkilledWorker) {
  const int port = free_rdzv_port();
  std::vector<std::unique_ptr<Proc>> agents;
  agents.push_back(agent({}, 4, 1, port, "n0", 2, 1));
  ASSERT_TRUE(eventually([&] { return !port_is_free(port); }, seconds(20)));
  for (int i = 1; i < 4; ++i)
    agents.push_back(agent({}, 4, 1, port, "n" + std::to_string(i), 2, 1));
  ASSERT_TRUE(reached(*agents[0], 20)) << agents[0]->output();
  if (unsupported(*agents[0])) GTEST_SKIP() << "dtrain was built without live recovery";
  kill_one_worker(*agents[2]);
  std::string all;
  for (auto& p : agents) {
    ASSERT_NE(p->wait(seconds(240)), -1) << p->output();
    EXPECT_EQ(p->exit_code(), 0) << p->output();
    all += p->output();
  }
  expect_same_weights(all, 4);
}

// --live-min-workers 3 of 4 and no replacements: two losses end the job,
// every surviving node exits 1 naming the lost ranks.
TEST_F(LiveTraining, LosingMoreThanTheMinimumAllowsEndsTheJobNamingTheRanks) {
  const int port = free_rdzv_port();
  auto a = agent({}, 2, 2, port, "a", 3, 0);
  ASSERT_TRUE(eventually([&] { return !port_is_free(port); }, seconds(20)));
  auto b = agent({}, 2, 2, port, "b", 3, 0);
  ASSERT_TRUE(reached(*a, 10)) << a->output() << b->output();
  if (unsupported(*a)) GTEST_SKIP() << "dtrain was built without live recovery";
  for (int pid : children_of(b->pid())) ::kill(pid, SIGKILL);
  ASSERT_NE(a->wait(seconds(60)), -1) << a->output();
  EXPECT_EQ(a->exit_code(), 1) << a->output();
  EXPECT_THAT(a->output(), HasSubstr("fewer than min_workers = 3; lost: rank"));
  EXPECT_THAT(a->output(), ::testing::ContainsRegex("rank[23]@"));
}

// Note [Where the live store lives] (src/launch/agent/agent.cpp): with the
// rendezvous store off the workers' nodes (`dtrain store`), losing node 0 —
// its agent and both its workers SIGKILLed at once, as when its machine dies
// — leaves node 1 training in its own processes to the end, with one set of
// weights. `store_prefix` and `node_prefix(i)` start a process on the
// store's host and on worker node i; `said` is what each agent must say at
// start about losing its node.
void LiveTraining::lose_node0_with_the_store_off(
    const std::vector<std::string>& store_prefix,
    const std::function<std::vector<std::string>(int)>& node_prefix, int port,
    const std::string& said, bool then_a_new_node) {
  std::vector<std::string> store_argv = store_prefix;
  for (const std::string& a : {std::string(DTRAIN_BINARY), std::string("store"),
                               std::string("--port"), std::to_string(port)}) {
    store_argv.push_back(a);
  }
  Proc store(store_argv, dir_.file("store.log"));
  ASSERT_TRUE(eventually(
      [&] { return store.output().find("serving c10d's TCPStore") != std::string::npos; },
      seconds(20)))
      << store.output();
  {  // a second store on the same port: one line naming the port, exit 1
    Proc again(store_argv, dir_.file("again.log"));
    ASSERT_NE(again.wait(seconds(20)), -1);
    EXPECT_EQ(again.exit_code(), 1) << again.output();
    EXPECT_THAT(again.output(),
                HasSubstr("dtrain store: error: cannot listen on port " + std::to_string(port)));
  }
  auto a = agent(node_prefix(0), 2, 2, port, "a", 2, 0, ",is_host=false");
  auto b = agent(node_prefix(1), 2, 2, port, "b", 2, 0, ",is_host=false");
  ASSERT_TRUE(eventually(
      [&] {
        return (a->output().find("round 0: node ") != std::string::npos &&
                b->output().find("round 0: node ") != std::string::npos) ||
               unsupported(*a);
      },
      seconds(120)))
      << a->output() << b->output();
  if (unsupported(*a)) GTEST_SKIP() << "dtrain was built without live recovery";
  // The rendezvous numbers nodes by arrival: find node 0.
  const bool a_first = a->output().find("round 0: node 0 of 2") != std::string::npos;
  Proc& node0 = a_first ? *a : *b;
  Proc& node1 = a_first ? *b : *a;
  for (Proc* p : {&node0, &node1}) EXPECT_THAT(p->output(), HasSubstr(said));
  ASSERT_TRUE(reached(node0, 10)) << node0.output() << node1.output();
  const std::vector<int> kids1 = children_of(node1.pid());
  const std::vector<int> kids0 = children_of(node0.pid());
  ASSERT_EQ(kids0.size(), 2u);
  ASSERT_EQ(kids1.size(), 2u);
  node0.signal(SIGKILL);
  for (int pid : kids0) ::kill(pid, SIGKILL);
  ASSERT_TRUE(eventually(
      [&] { return node1.output().find("live recovery: generation") != std::string::npos; },
      seconds(20)))
      << node1.output();
  const std::vector<int> now1 = children_of(node1.pid());
  EXPECT_EQ(std::set<int>(now1.begin(), now1.end()), std::set<int>(kids1.begin(), kids1.end()));
  {
    const std::string out = node1.output();
    const size_t at = out.find("live recovery: generation");
    std::cerr << "node 1 after node 0 was lost: " << out.substr(at, out.find('\n', at) - at)
              << "\n";
  }
  std::string joined_output;  // the new node's, when one joins
  if (then_a_new_node) {
    // A node started now (as a lost machine's replacement would be) joins
    // the running round (Note [Late nodes]); its two workers are taken into
    // the next generation and receive the state from node 1's.
    auto c = agent(node_prefix(0), 2, 2, port, "c", 2, 0, ",is_host=false");
    ASSERT_TRUE(eventually(
        [&] { return c->output().find("joining it as late node 1") != std::string::npos; },
        seconds(30)))
        << c->output();
    ASSERT_TRUE(eventually(
        [&] {
          const std::string out = node1.output() + c->output();
          return std::regex_search(
              out, std::regex("live recovery: generation \\d+ at step \\d+: joined rank"));
        },
        seconds(60)))
        << node1.output() << c->output();
    {
      const std::string out = node1.output() + c->output();
      for (const std::string& what :
           {std::string("joining it as late node"), std::string(": joined rank")}) {
        const size_t at = out.find(what);
        const size_t from = out.rfind('\n', at) + 1;
        std::cerr << "new node: " << out.substr(from, out.find('\n', at) - from) << "\n";
      }
    }
    ASSERT_NE(c->wait(seconds(240)), -1) << c->output();
    EXPECT_EQ(c->exit_code(), 0) << c->output();
    EXPECT_THAT(c->output(), ::testing::Not(HasSubstr("nothing to do"))) << c->output();
    joined_output = c->output();
  }
  ASSERT_NE(node1.wait(seconds(240)), -1) << node1.output();
  EXPECT_EQ(node1.exit_code(), 0) << node1.output();
  EXPECT_THAT(node1.output(), ::testing::Not(HasSubstr("restarting the group")));
  const std::string finished = node1.output() + joined_output;
  const auto sums = parameter_sums(finished);
  ASSERT_EQ(sums.size(), then_a_new_node ? 4u : 2u) << finished;
  for (const auto& [member, sum] : sums) {
    EXPECT_NEAR(sum, sums.begin()->second, 1e-6 * std::abs(sums.begin()->second) + 1e-9) << member;
  }
  store.signal(SIGTERM);
  ASSERT_NE(store.wait(seconds(20)), -1) << store.output();
  EXPECT_EQ(store.exit_code(), 0) << store.output();
}

// Three network namespaces (root only): the store alone in the first, a
// node of two workers in each of the others.
TEST_F(LiveTraining, WithTheStoreOffTheWorkersNodesLosingNode0LeavesTheOtherNodeTraining) {
  std::string why;
  auto cluster = NetnsCluster::create(3, &why);
  if (!cluster) GTEST_SKIP() << why;
  endpoint_ = cluster->addr(0);
  lose_node0_with_the_store_off(
      cluster->exec_in(0), [&](int i) { return cluster->exec_in(i + 1); },
      29613,  // inside our namespaces only
      "not hosted on this node: losing this node (node 0 included) does not end the job");
}

// The same on one machine (loopback): each agent says the store runs on its
// machine, and losing node 0's processes still leaves node 1 training.
TEST_F(LiveTraining, WithTheStoreInItsOwnProcessLosingNode0sProcessesLeavesTheOtherNodeTraining) {
  lose_node0_with_the_store_off(
      {}, [](int) { return std::vector<std::string>{}; }, free_rdzv_port(),
      "which runs on this machine: losing this machine ends the job");
}

// The same, then a new node is started while node 1 trains alone: it joins
// the running job (live mode runs one rendezvous round, Note [Late nodes] in
// src/launch/rendezvous/protocol_rounds.cpp), its workers are admitted at a
// step boundary with the state from node 1's, and all four end with one set
// of weights.
TEST_F(LiveTraining, ANodeStartedAfterNode0WasLostJoinsTheRunningJobAndEndsWithTheSameWeights) {
  epochs_ = "2";  // room for the new node to start and join before the end, under load too
  lose_node0_with_the_store_off(
      {}, [](int) { return std::vector<std::string>{}; }, free_rdzv_port(),
      "which runs on this machine: losing this machine ends the job", /*then_a_new_node=*/true);
}

// A node's link drops (network namespaces; root only): its workers are
// declared dead within the detection bound and the other node goes on.
//
// Note [Which node is node 0]
// Agent a runs in namespace 0 and hosts the rendezvous store (the endpoint
// is its address), and node 0's agent hosts the workers' store; losing
// either ends the job by design, so the link cut must be node 1's, and a
// must be node 0. The rendezvous numbers nodes in the order they join, not
// by who hosts it: when b was started at once, b sometimes joined first
// (about one run in six under load), became node 0 and printed rank 0's
// progress, so `reached(*a, 10)` waited out its 120 s while both workers
// trained to the end (the first run's "node 0 did not reach step 10 while
// node 1's worker ran to the end alone"). So b starts only once a listens
// on the rendezvous port inside its namespace (a joins right after, well
// before b's process has even loaded LibTorch), and the test checks that a
// is node 0 before cutting anything.
TEST_F(LiveTraining, ADroppedLinkIsDetectedAndTheOtherNodeGoesOn) {
  std::string why;
  auto cluster = NetnsCluster::create(2, &why);
  if (!cluster) GTEST_SKIP() << why;
  endpoint_ = cluster->addr(0);
  const int port = 29612;  // inside our namespaces only
  auto a = agent(cluster->exec_in(0), 2, 1, port, "a", 1, 0);
  ASSERT_TRUE(eventually(
      [&] {
        return sh("ip netns exec " + cluster->ns(0) +
                  " ss -Hltn 'sport = :" + std::to_string(port) + "' | grep -q .");
      },
      seconds(60)))
      << a->output();
  auto b = agent(cluster->exec_in(1), 2, 1, port, "b", 1, 0);
  ASSERT_TRUE(eventually(
      [&] { return a->output().find("round 0: node ") != std::string::npos || unsupported(*a); },
      seconds(120)))
      << a->output() << b->output();
  if (unsupported(*a)) GTEST_SKIP() << "dtrain was built without live recovery";
  ASSERT_THAT(a->output(), HasSubstr("round 0: node 0 of 2"))
      << "agent a must be node 0 (Note [Which node is node 0])\n"
      << a->output() << b->output();
  ASSERT_TRUE(reached(*a, 10)) << a->output() << b->output();
  ASSERT_TRUE(sh("ip -n " + cluster->ns(1) + " link set eth0 down"));
  const auto cut = std::chrono::steady_clock::now();
  ASSERT_TRUE(
      eventually([&] { return a->output().find("live recovery: generation") != std::string::npos; },
                 seconds(10)))
      << a->output();
  EXPECT_LT(std::chrono::steady_clock::now() - cut, seconds(5));
  ASSERT_NE(a->wait(seconds(240)), -1) << a->output();
  EXPECT_EQ(a->exit_code(), 0) << a->output();
}

}  // namespace
}  // namespace dtrain::testing
