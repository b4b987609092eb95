// dtrain's store server with the real c10d clients: Debian's python3-torch
// 1.13 and PyPI's torch 2.x (scripts/peer-torch.sh), each running every query
// its release has (python_store_client.py), and both on one key space at once.
// Each test skips, saying why, when its python is not installed.

#include <gtest/gtest.h>

#include <mutex>

#include "comm/store_server/server.h"
#include "common/strings.h"
#include "support/peer_torch.h"
#include "support/shell.h"

namespace dtrain::store_server {
namespace {

using testing::run_shell;

const std::string kClient = DTRAIN_SOURCE_DIR "/tests/comm/store_server/python_store_client.py";

class PythonClients : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreServerOptions o;
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> g(mu_);
      log_ += line + "\n";
    };
    server_ = StoreServer::start(o);
  }
  std::string log() {
    std::lock_guard<std::mutex> g(mu_);
    return log_;
  }
  std::string client(const std::string& python, const std::string& args) {
    return cat("timeout -k 5 120 ", python, " ", kClient, " ", server_->port(), " ", args);
  }
  // `waiter` waits for a key that `setter` sets once the waiter is waiting.
  void wait_across(const std::string& waiter, const std::string& setter, const std::string& key) {
    const std::string out = cat("/tmp/dtrain-store-waiter-", ::getpid(), "-", key);
    const testing::ShellRun r = run_shell(
        cat(client(waiter, "wait " + key), " > ", out, " 2>&1 & pid=$!; ",
            "for i in $(seq 600); do grep -q waiting ", out, " && break; sleep 0.1; done; ",
            "sleep 0.5; ", client(setter, "set " + key + " hello"), " 2>&1; ",
            "wait $pid; echo waiter=$?; cat ", out, "; rm -f ", out));
    EXPECT_NE(r.output.find("waiter=0"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("hello\nOK torch"), std::string::npos) << r.output;
  }

  std::unique_ptr<StoreServer> server_;
  std::mutex mu_;
  std::string log_;
};

TEST_F(PythonClients, APyTorch113ClientRunsEveryQueryItHas) {
  const std::string py = testing::python_torch_113();
  if (py.empty()) GTEST_SKIP() << testing::kNoPeer113;
  const testing::ShellRun r = run_shell(client(py, "ops p113/") + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("OK torch 1.13"), std::string::npos) << r.output;
  EXPECT_EQ(log(), "");
}

TEST_F(PythonClients, APyTorch2xClientRunsEveryQueryItHas) {
  const std::string py = testing::python_torch_2x();
  if (py.empty()) GTEST_SKIP() << testing::kNoPeer2x;
  const testing::ShellRun r = run_shell(client(py, "ops p2x/") + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("OK torch 2."), std::string::npos) << r.output;
  EXPECT_EQ(log(), "");
}

TEST_F(PythonClients, ClientsOfBothReleasesShareOneKeySpaceAndWakeEachOther) {
  const std::string py113 = testing::python_torch_113();
  const std::string py2x = testing::python_torch_2x();
  if (py113.empty()) GTEST_SKIP() << testing::kNoPeer113;
  if (py2x.empty()) GTEST_SKIP() << testing::kNoPeer2x;
  wait_across(py113, py2x, "from2x");
  wait_across(py2x, py113, "from113");
  EXPECT_EQ(log(), "");
}

}  // namespace
}  // namespace dtrain::store_server
