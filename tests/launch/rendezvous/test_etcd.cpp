// The etcd v3 rendezvous backend against a real etcd on loopback, plus the
// client's base64 on its own and its deadline against servers that are not
// etcd (refusing, silent, trickling: the client's HTTP is src/http/http.h).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <thread>

#include "dtrain/errors.h"
#include "launch/rendezvous/etcd_client.h"
#include "launch/rendezvous/etcd_fixture.h"
#include "launch/rendezvous/rendezvous.h"

namespace dtrain::detail {
namespace {

using dtrain::testing::EtcdServer;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// ---- wire helpers (no etcd needed) ----

TEST(Base64, RoundTripsEveryByteAndEveryPaddingLength) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  for (size_t n : {0, 1, 2, 3, 4, 5, 256}) {
    std::string bytes = all.substr(0, n);
    EXPECT_EQ(base64_decode(base64_encode(bytes)), bytes) << n;
  }
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("f"), "Zg==");
}

TEST(Base64, RejectsBadLengthCharactersAndPadding) {
  EXPECT_EQ(base64_decode("Zm9"), std::nullopt);
  EXPECT_EQ(base64_decode("Zm9*"), std::nullopt);
  EXPECT_EQ(base64_decode("Z=9v"), std::nullopt);
  EXPECT_EQ(base64_decode("===="), std::nullopt);
}

int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(EtcdBackendErrors, UnreachableEndpointIsAStoreErrorNamingHostPort) {
  int port = closed_port();
  auto start = std::chrono::steady_clock::now();
  try {
    make_etcd_backend("127.0.0.1", port, "/t", 2s);
    FAIL() << "no error";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot reach etcd at 127.0.0.1:" + std::to_string(port)));
    EXPECT_THAT(e.what(), HasSubstr("onnection refused"));
    EXPECT_THAT(e.what(), HasSubstr("is etcd running and is LaunchOptions::rdzv_endpoint right?"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST(EtcdBackendErrors, SilentServerTimesOutWithinTheTimeout) {
  // A listening socket that never answers: connect succeeds, the reply never
  // comes.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  auto start = std::chrono::steady_clock::now();
  try {
    make_etcd_backend("127.0.0.1", port, "/t", 300ms);
    FAIL() << "no error";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("etcd at 127.0.0.1:" + std::to_string(port)));
    EXPECT_THAT(e.what(), HasSubstr("within 300 ms"));
    EXPECT_THAT(e.what(), HasSubstr("range of key '/t/'"));
  }
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, 250ms);
  EXPECT_LT(elapsed, 1500ms);
  ::close(fd);
}

// A server that answers the first request with a header promising 1,000
// bytes and then sends one byte every 50 ms: never idle, never done.
class TricklingServer {
 public:
  TricklingServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(fd_, 4);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~TricklingServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }

 private:
  // Bounded: every wait is a 50 ms poll that checks stop_.
  void serve() {
    int conn = -1;
    while (!stop_ && conn < 0) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) == 1) conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    }
    if (conn < 0) return;
    std::string request;
    char buffer[4096];
    while (!stop_ && request.find("\r\n\r\n") == std::string::npos) {
      pollfd p{conn, POLLIN, 0};
      if (::poll(&p, 1, 50) != 1) continue;
      ssize_t n = ::recv(conn, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      request.append(buffer, static_cast<size_t>(n));
    }
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{";
    ::send(conn, head.data(), head.size(), MSG_NOSIGNAL);
    while (!stop_ && ::send(conn, " ", 1, MSG_NOSIGNAL) == 1) {
      std::this_thread::sleep_for(50ms);
    }
    ::close(conn);
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(EtcdBackendErrors, TricklingServerTimesOutAtTheTotalDeadline) {
  // Bytes keep moving, so only a deadline over the whole call ends it.
  TricklingServer server;
  EtcdClient client("127.0.0.1", server.port(), 400ms);
  auto start = std::chrono::steady_clock::now();
  try {
    client.get("k");
    FAIL() << "no error";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("etcd at 127.0.0.1:" + std::to_string(server.port()) +
                                    " did not answer range of key 'k' within 400 ms"));
  }
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, 350ms);
  EXPECT_LT(elapsed, 1500ms);
}

TEST(EtcdBackendErrors, BadEndpointIsInvalidArgument) {
  EXPECT_THROW(make_etcd_backend("", 2379, "/t", 1s), InvalidArgument);
  EXPECT_THROW(make_etcd_backend("127.0.0.1", 70000, "/t", 1s), InvalidArgument);
  EXPECT_THROW(make_etcd_backend("127.0.0.1", 2379, "/t", 0ms), InvalidArgument);
}

// ---- against a real etcd ----

class EtcdBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdServer::available()) GTEST_SKIP() << EtcdServer::kSkipReason;
    etcd_.start();
    backend_ = make_etcd_backend(etcd_.host(), etcd_.port(), "/dtrain/test", 5s);
  }
  EtcdClient client() { return EtcdClient(etcd_.host(), etcd_.port(), 5s); }

  EtcdServer etcd_;
  std::shared_ptr<RendezvousBackend> backend_;
};

TEST_F(EtcdBackendTest, DescribesItselfByEndpoint) {
  EXPECT_EQ(backend_->describe(), "etcd at " + etcd_.endpoint());
}

TEST_F(EtcdBackendTest, GetOfAbsentKeyIsNullopt) { EXPECT_EQ(backend_->get("nope"), std::nullopt); }

TEST_F(EtcdBackendTest, SetThenGetReturnsTheLastValueIncludingEmpty) {
  backend_->set("k", "one");
  EXPECT_EQ(backend_->get("k"), "one");
  backend_->set("k", "");  // the gateway omits empty values from replies
  EXPECT_EQ(backend_->get("k"), "");
}

TEST_F(EtcdBackendTest, KeysLiveUnderThePrefix) {
  backend_->set("round", "3");
  EXPECT_EQ(client().get("/dtrain/test/round"), "3");
  auto slash = make_etcd_backend(etcd_.host(), etcd_.port(), "/dtrain/test/", 5s);
  EXPECT_EQ(slash->get("round"), "3");
}

TEST_F(EtcdBackendTest, ValuesAndKeysAreBinarySafe) {
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes += static_cast<char>(b);
  std::string key = std::string("k\0\xff\n", 4);
  backend_->set(key, bytes);
  EXPECT_EQ(backend_->get(key), bytes);
  std::optional<std::string> current;
  EXPECT_FALSE(backend_->compare_set(key, std::string("x"), "y", &current));
  EXPECT_EQ(current, bytes);
  EXPECT_TRUE(backend_->compare_set(key, bytes, bytes + bytes, &current));
  EXPECT_EQ(backend_->get(key), bytes + bytes);
}

TEST_F(EtcdBackendTest, CompareSetWritesOnlyWhenTheValueMatches) {
  backend_->set("k", "a");
  std::optional<std::string> current = "untouched";
  EXPECT_TRUE(backend_->compare_set("k", std::string("a"), "b", &current));
  EXPECT_EQ(current, "untouched");
  EXPECT_EQ(backend_->get("k"), "b");

  EXPECT_FALSE(backend_->compare_set("k", std::string("a"), "c", &current));
  EXPECT_EQ(current, "b");
  EXPECT_EQ(backend_->get("k"), "b");
  EXPECT_FALSE(backend_->compare_set("k", std::string("a"), "c", nullptr));
}

TEST_F(EtcdBackendTest, CompareSetWithAbsentExpectationOnlyCreates) {
  std::optional<std::string> current;
  EXPECT_TRUE(backend_->compare_set("new", std::nullopt, "first", &current));
  EXPECT_EQ(backend_->get("new"), "first");
  EXPECT_FALSE(backend_->compare_set("new", std::nullopt, "second", &current));
  EXPECT_EQ(current, "first");
  // Expecting a value of an absent key fails and reports it absent (etcd's
  // VALUE comparison never matches a missing key, not even "").
  current = "stale";
  EXPECT_FALSE(backend_->compare_set("missing", std::string(""), "x", &current));
  EXPECT_EQ(current, std::nullopt);
  EXPECT_EQ(backend_->get("missing"), std::nullopt);
}

TEST_F(EtcdBackendTest, AddStartsFromZeroAndRejectsNonIntegers) {
  EXPECT_EQ(backend_->add("n", 5), 5);
  EXPECT_EQ(backend_->add("n", -7), -2);
  EXPECT_EQ(backend_->get("n"), "-2");
  backend_->set("text", "abc");
  try {
    backend_->add("text", 1);
    FAIL() << "no error";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'/dtrain/test/text'"));
    EXPECT_THAT(e.what(), HasSubstr("'abc' is not an integer"));
  }
}

TEST_F(EtcdBackendTest, AddFromManyThreadsSumsExactly) {
  constexpr int kThreads = 8;
  constexpr int kAddsPerThread = 25;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Half the threads share the backend, half have their own.
      auto mine =
          t % 2 == 0 ? backend_ : make_etcd_backend(etcd_.host(), etcd_.port(), "/dtrain/test", 5s);
      for (int i = 0; i < kAddsPerThread; ++i) {
        try {
          mine->add("counter", 1);
        } catch (const std::exception&) {
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(backend_->get("counter"), std::to_string(kThreads * kAddsPerThread));
}

TEST_F(EtcdBackendTest, HeartbeatMakesANodeAliveUnderThePrefix) {
  EXPECT_FALSE(backend_->alive("node-a", 2s));
  backend_->heartbeat("node-a", 2s);
  EXPECT_TRUE(backend_->alive("node-a", 2s));
  EXPECT_FALSE(backend_->alive("node-b", 2s));
  EXPECT_TRUE(client().get("/dtrain/test/alive/node-a").has_value());
}

TEST_F(EtcdBackendTest, RenewedHeartbeatsOutliveTheTtl) {
  auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < 2500ms) {
    backend_->heartbeat("node-a", 1s);
    ASSERT_TRUE(backend_->alive("node-a", 1s));
    std::this_thread::sleep_for(300ms);
  }
}

TEST_F(EtcdBackendTest, NodeIsDeadOnceHeartbeatsStopAndComesBackOnTheNextOne) {
  backend_->heartbeat("node-a", 1s);
  ASSERT_TRUE(backend_->alive("node-a", 1s));
  // A 1 s lease (etcd's minimum under the fixture's timers) lapses, and etcd
  // checks for expired leases every 500 ms.
  auto start = std::chrono::steady_clock::now();
  while (backend_->alive("node-a", 1s) && std::chrono::steady_clock::now() - start < 4s) {
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_FALSE(backend_->alive("node-a", 1s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 900ms);
  backend_->heartbeat("node-a", 1s);  // finds the lease gone, grants another
  EXPECT_TRUE(backend_->alive("node-a", 1s));
}

TEST_F(EtcdBackendTest, ForgetRemovesTheNodeAndLeavesOthers) {
  backend_->heartbeat("node-a", 5s);
  backend_->heartbeat("node-b", 5s);
  backend_->forget("node-a");
  EXPECT_FALSE(backend_->alive("node-a", 5s));
  EXPECT_TRUE(backend_->alive("node-b", 5s));
  backend_->forget("node-b");
  EXPECT_FALSE(backend_->alive("node-b", 5s));
  backend_->forget("node-b");  // idempotent
  backend_->heartbeat("node-b", 5s);
  EXPECT_TRUE(backend_->alive("node-b", 5s));
}

TEST_F(EtcdBackendTest, ChangingTheTtlKeepsTheNodeAlive) {
  backend_->heartbeat("node-a", 5s);
  backend_->heartbeat("node-a", 10s);
  EXPECT_TRUE(backend_->alive("node-a", 10s));
}

TEST_F(EtcdBackendTest, LeaseCallsOnUnknownLeasesReportItWithoutThrowing) {
  EtcdClient etcd = client();
  EXPECT_EQ(etcd.keep_alive(12345), 0);
  EXPECT_FALSE(etcd.revoke_lease(12345));
  EXPECT_FALSE(etcd.put_leased("/x", "y", 12345));
  EtcdLease lease = etcd.grant_lease(1);
  EXPECT_GE(lease.ttl_seconds, 1);  // etcd may raise it to its minimum
  EXPECT_GE(etcd.keep_alive(lease.id), 1);
  EXPECT_TRUE(etcd.revoke_lease(lease.id));
}

TEST_F(EtcdBackendTest, EtcdErrorRepliesBecomeStoreErrorsNamingTheOperation) {
  // An over-long TTL (etcd's maximum is 9,000,000,000 s) is refused.
  try {
    client().grant_lease(int64_t{1} << 40);
    FAIL() << "no error";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("etcd at " + etcd_.endpoint() + " refused grant of a"));
    EXPECT_THAT(e.what(), HasSubstr("gRPC code"));
  }
}

// Sets an environment variable (nullptr: unsets it) for its lifetime.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

TEST_F(EtcdBackendTest, ProxyVariablesAreIgnoredEtcdIsReachedDirectly) {
  // libcurl would send every request to this proxy, where nothing listens.
  const std::string proxy = "http://127.0.0.1:" + std::to_string(closed_port());
  ScopedEnv http_proxy("http_proxy", proxy.c_str());
  ScopedEnv no_proxy("no_proxy", nullptr);
  ScopedEnv no_proxy_upper("NO_PROXY", nullptr);
  EtcdClient etcd = client();
  EXPECT_NO_THROW(etcd.put("/proxy", "direct"));
  EXPECT_EQ(etcd.get("/proxy"), "direct");
}

TEST_F(EtcdBackendTest, StoppedEtcdGivesAStoreErrorNamingHostPort) {
  etcd_.stop();
  try {
    backend_->get("k");
    FAIL() << "no error";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot reach etcd at " + etcd_.endpoint()));
    EXPECT_THAT(e.what(), HasSubstr("range of key '/dtrain/test/k'"));
  }
}

}  // namespace
}  // namespace dtrain::detail
