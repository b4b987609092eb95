// dtrain's TCP store and c10d's real servers and clients of both TCPStore
// dialects: Debian's python3-torch 1.13 and PyPI's torch 2.x
// (scripts/peer-torch.sh). connect_tcp_store must work against a server of
// the linked LibTorch's dialect and name a server of the other dialect in one
// line within seconds; TcpStoreServer's keys must reach Python clients of
// both. Each test skips, saying why, when its python is not installed.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <torch/version.h>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/store.h"
#include "support/http.h"
#include "support/peer_torch.h"
#include "support/shell.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using testing::run_shell;

constexpr bool kBuiltOn2x = TORCH_VERSION_MAJOR >= 2;

// A c10d TCPStore server in a Python process of the given torch; stopped
// (by its pid) on destruction.
class PythonStoreServer {
 public:
  PythonStoreServer(const std::string& python, int port) : port_(port) {
    out_ = cat("/tmp/dtrain-pystore-", ::getpid(), "-", port);
    const auto r = run_shell(
        cat(python, " -c \"import datetime, time, torch.distributed as d; ",
            "s = d.TCPStore('127.0.0.1', ", port, ", 1, True, datetime.timedelta(seconds=60), ",
            "wait_for_workers=False); s.set('from_python', 'hi'); print('up', flush=True); ",
            "time.sleep(300)\" > ", out_, " 2>&1 & echo $!"));
    pid_ = std::atoi(r.output.c_str());
    for (int i = 0; i < 1200 && !up(); ++i) std::this_thread::sleep_for(100ms);
  }
  ~PythonStoreServer() {
    if (pid_ > 0) ::kill(pid_, SIGKILL);
    std::remove(out_.c_str());
  }
  bool up() const {
    std::ifstream f(out_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str().find("up") != std::string::npos;
  }

 private:
  int port_;
  int pid_ = -1;
  std::string out_;
};

std::string value(const StorePtr& store, const std::string& key) {
  const auto v = store->get(key);
  return std::string(v.begin(), v.end());
}

TEST(StoreDialects, ConnectingToAPythonServerOfTheLinkedReleasesDialectWorks) {
  const std::string py = kBuiltOn2x ? testing::python_torch_2x() : testing::python_torch_113();
  if (py.empty()) GTEST_SKIP() << (kBuiltOn2x ? testing::kNoPeer2x : testing::kNoPeer113);
  const int port = testing::free_port();
  PythonStoreServer server(py, port);
  ASSERT_TRUE(server.up());
  auto store = connect_tcp_store("127.0.0.1", port, 30s);
  EXPECT_EQ(value(store, "from_python"), "hi");
}

TEST(StoreDialects, AServerOfTheOtherDialectIsNamedInOneLineWithinSeconds) {
  const std::string py = kBuiltOn2x ? testing::python_torch_113() : testing::python_torch_2x();
  if (py.empty()) GTEST_SKIP() << (kBuiltOn2x ? testing::kNoPeer113 : testing::kNoPeer2x);
  const int port = testing::free_port();
  PythonStoreServer server(py, port);
  ASSERT_TRUE(server.up());
  const auto t0 = std::chrono::steady_clock::now();
  try {
    connect_tcp_store("127.0.0.1", port, 120s);
    FAIL() << "connected to a store of the other dialect";
  } catch (const StoreError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(kBuiltOn2x ? "speaks PyTorch 1.13's TCPStore dialect"
                                  : "speaks PyTorch 2.x's TCPStore dialect"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(cat("127.0.0.1:", port)), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 15s);
}

TEST(StoreDialects, KeysOfDtrainsStoreReachPythonClientsOfBothReleases) {
  auto server = TcpStoreServer::start({});
  server->store()->set("from_dtrain", std::vector<uint8_t>{'o', 'k'});
  int ran = 0;
  for (const std::string& py : {testing::python_torch_113(), testing::python_torch_2x()}) {
    if (py.empty()) continue;
    ++ran;
    const auto r =
        run_shell(cat("timeout -k 5 120 ", py, " -c \"import datetime, torch.distributed as d; ",
                      "s = d.TCPStore('127.0.0.1', ", server->port(), ", None, False, ",
                      "datetime.timedelta(seconds=30)); print(s.get('from_dtrain').decode()); ",
                      "s.set('from_python', 'yes')\" 2>&1"));
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("ok"), std::string::npos) << r.output;
    EXPECT_EQ(value(server->store(), "from_python"), "yes");
    server->store()->deleteKey("from_python");
  }
  if (ran == 0) GTEST_SKIP() << testing::kNoPeer113 << "; " << testing::kNoPeer2x;
}

}  // namespace
}  // namespace dtrain
