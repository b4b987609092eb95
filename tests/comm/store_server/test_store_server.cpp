// dtrain's store server against the bytes real c10d clients send: PyTorch
// 1.13's (Debian's python3-torch) and 2.11's (PyPI), recorded on loopback by
// a logging proxy between each client and its own release's server running
// the same script (set/get/add/compare_set/num_keys/delete_key/wait, and on
// 2.11 append/multi_get/multi_set/check/queues/list_keys). Replaying a
// recording against dtrain's server must give the recorded server's replies
// byte for byte.

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mutex>
#include <thread>

#include "comm/store_server/key_space.h"
#include "comm/store_server/probe.h"
#include "comm/store_server/raw_client.h"
#include "comm/store_server/server.h"
#include "comm/store_server/wire.h"

namespace dtrain::store_server {
namespace {

using testing::hex;
using testing::RawClient;
using namespace std::chrono_literals;

struct Exchange {
  bool from_client;
  const char* bytes;
};

// PyTorch 1.13.1's client (connection 1; its second, the watch connection,
// sends nothing), as recorded against 1.13.1's server.
const std::vector<Exchange> kTorch113 = {
    {true, "030500000000000000696e69742f0100000000000000"},  // ADD init/ 1
    {false, "0100000000000000"},
    {true, "0002000000000000002f6b01000000000000007605010000000000000002000000000000002f6b"},
    {false, "00"},                     // SET /k v, WAIT [/k] -> STOP_WAITING
    {true, "0202000000000000002f6b"},  // GET /k
    {false, "010000000000000076"},
    {true, "0302000000000000002f630500000000000000"},  // ADD /c 5
    {false, "0500000000000000"},
    {true, "0302000000000000002f630200000000000000"},
    {false, "0700000000000000"},
    {true, "0102000000000000002f6b010000000000000076010000000000000077"},  // COMPARE_SET
    {false, "010000000000000077"},
    {true, "0102000000000000002f6b010000000000000078010000000000000079"},
    {false, "010000000000000077"},
    {true, "0104000000000000002f6e6577000000000000000001000000000000007a"},
    {false, "01000000000000007a"},
    {true, "06"},  // GETNUMKEYS
    {false, "0400000000000000"},
    {true, "0802000000000000002f6b"},  // DELETE_KEY
    {false, "0100000000000000"},
    {true, "0802000000000000002f6b"},
    {false, "0000000000000000"},
    {true, "05010000000000000002000000000000002f63"},  // WAIT [/c]
    {false, "00"},
    {true, "05010000000000000006000000000000002f6e65766572"},  // WAIT [/never]: no reply
};

// PyTorch 2.11.0's client, as recorded against 2.11.0's (libuv) server; the
// last reply, LIST_KEYS, is in dtrain's sorted order (2.11's is hash order).
const std::vector<Exchange> kTorch211 = {
    {true, "00cef7853c0d77730000"},  // VALIDATE magic, PING nonce
    {false, "77730000"},
    {true, "040500000000000000696e69742f0100000000000000"},
    {false, "0100000000000000"},
    {true, "0102000000000000002f6b01000000000000007606010000000000000002000000000000002f6b"},
    {false, "00"},
    {true, "0302000000000000002f6b"},
    {false, "010000000000000076"},
    {true, "0402000000000000002f630500000000000000"},
    {false, "0500000000000000"},
    {true, "0402000000000000002f630200000000000000"},
    {false, "0700000000000000"},
    {true, "0202000000000000002f6b010000000000000076010000000000000077"},
    {false, "010000000000000077"},
    {true, "0202000000000000002f6b010000000000000078010000000000000079"},
    {false, "010000000000000077"},
    {true, "0204000000000000002f6e6577000000000000000001000000000000007a"},
    {false, "01000000000000007a"},
    {true, "07"},
    {false, "0400000000000000"},
    {true, "0802000000000000002f6b"},
    {false, "0100000000000000"},
    {true, "0802000000000000002f6b"},
    {false, "0000000000000000"},
    {true, "06010000000000000002000000000000002f63"},
    {false, "00"},
    {true, "06010000000000000006000000000000002f6e65766572"},  // WAIT [/never]
    {true, "0c"},                                              // its timeout: CANCEL_WAIT
    {false, "01"},
    {true,
     "0902000000000000002f610100000000000000780902000000000000002f61010000000000000079060200000000"
     "00000002000000000000002f6102000000000000002f63"},  // APPEND x2, WAIT [/a /c]
    {false, "00"},
    {true, "0a020000000000000002000000000000002f6102000000000000002f63"},  // MULTI_GET
    {false, "02000000000000007879010000000000000037"},
    {true,
     "0b020000000000000003000000000000002f6d3101000000000000003103000000000000002f6d32010000000000"
     "00003205020000000000000003000000000000002f6d3103000000000000002f6d32"},  // MULTI_SET, CHECK
    {false, "00"},
    {true, "05010000000000000005000000000000002f6e6f7065"},  // CHECK [/nope]
    {false, "01"},
    {true, "0e02000000000000002f710100000000000000610e02000000000000002f71010000000000000062"},
    {true, "1002000000000000002f71"},  // QUEUE_LEN
    {false, "0200000000000000"},
    {true, "06010000000000000002000000000000002f71"},  // WAIT [/q] (a blocking pop)
    {false, "00"},
    {true, "0f02000000000000002f71"},  // QUEUE_POP
    {false, "0200000000000000010000000000000061"},
    {true, "11"},  // LIST_KEYS
    {false,
     "060000000000000002000000000000002f6102000000000000002f6303000000000000002f6d31030000000000000"
     "0"
     "2f6d3204000000000000002f6e65770500000000000000696e69742f"},
};

struct Logged {
  std::mutex mu;
  std::vector<std::string> lines;
  std::vector<std::string> get() {
    std::lock_guard<std::mutex> g(mu);
    return lines;
  }
};

std::unique_ptr<StoreServer> start_server(Logged* log, WireLimits limits = {}) {
  StoreServerOptions o;
  o.limits = limits;
  o.log = [log](const std::string& line) {
    std::lock_guard<std::mutex> g(log->mu);
    log->lines.push_back(line);
  };
  return StoreServer::start(o);
}

void replay(int port, const std::vector<Exchange>& conversation) {
  RawClient c(port);
  ASSERT_TRUE(c.connected());
  for (std::size_t i = 0; i < conversation.size(); ++i) {
    const Bytes b = hex(conversation[i].bytes);
    if (conversation[i].from_client) {
      ASSERT_TRUE(c.send(b));
      if (i + 1 == conversation.size() || conversation[i + 1].from_client) {
        EXPECT_TRUE(c.silent()) << "a reply to exchange " << i
                                << " that the real server did not send";
      }
    } else {
      EXPECT_EQ(c.recv(b.size()), b) << "reply to exchange " << i - 1;
    }
  }
}

TEST(StoreWire, TheGreetingOfAPyTorch211ClientSelectsTheValidateDialect) {
  const Bytes b = hex("00cef7853c0d77730000");
  EXPECT_EQ(detect_dialect(b.data(), 1), Dialect::kUndecided);
  EXPECT_EQ(detect_dialect(b.data(), 4), Dialect::kUndecided);
  EXPECT_EQ(detect_dialect(b.data(), 5), Dialect::kValidate);
}

TEST(StoreWire, TheFirstQueryOfAPyTorch113ClientSelectsTheLegacyDialect) {
  const Bytes add = hex(kTorch113[0].bytes);
  EXPECT_EQ(detect_dialect(add.data(), 1), Dialect::kLegacy);
  // A SET first: decided once its key length is there.
  const Bytes set = hex(kTorch113[2].bytes);
  EXPECT_EQ(detect_dialect(set.data(), 5), Dialect::kUndecided);
  EXPECT_EQ(detect_dialect(set.data(), 9), Dialect::kLegacy);
}

TEST(StoreWire, AnotherGreetingOrAStrayRequestIsAnUnknownDialect) {
  const Bytes other_magic = hex("00 12345678 0d ffffffff");
  EXPECT_EQ(detect_dialect(other_magic.data(), other_magic.size()), Dialect::kUnknown);
  const std::string http = "GET / HTTP/1.1\r\n";
  EXPECT_EQ(detect_dialect(reinterpret_cast<const std::uint8_t*>(http.data()), http.size()),
            Dialect::kUnknown);
}

TEST(StoreWire, EveryRecordedQueryParsesWholeAndEncodesBackToTheSameBytes) {
  for (const auto* conv : {&kTorch113, &kTorch211}) {
    const Dialect d = conv == &kTorch113 ? Dialect::kLegacy : Dialect::kValidate;
    for (const Exchange& e : *conv) {
      if (!e.from_client) continue;
      const Bytes b = hex(e.bytes);
      std::size_t at = 0;
      while (at < b.size()) {
        Query q;
        ParseResult r = parse_query(d, b.data() + at, b.size() - at, WireLimits{}, &q);
        ASSERT_EQ(r.status, ParseStatus::kOk) << e.bytes << ": " << r.error;
        EXPECT_EQ(encode_query(d, q), Bytes(b.begin() + at, b.begin() + at + r.consumed))
            << op_name(q.op);
        // Every proper prefix is incomplete, never malformed.
        for (std::size_t n = 0; n < r.consumed; ++n) {
          Query partial;
          EXPECT_EQ(parse_query(d, b.data() + at, n, WireLimits{}, &partial).status,
                    ParseStatus::kNeedMore);
        }
        at += r.consumed;
      }
    }
  }
}

TEST(StoreWire, UnknownCodesAndOversizedLengthsAreMalformed) {
  Query q;
  const Bytes code18 = hex("12");
  EXPECT_EQ(parse_query(Dialect::kValidate, code18.data(), 1, WireLimits{}, &q).status,
            ParseStatus::kMalformed);
  const Bytes code13 = hex("0d");
  EXPECT_EQ(parse_query(Dialect::kLegacy, code13.data(), 1, WireLimits{}, &q).status,
            ParseStatus::kMalformed);
  // A GET whose key claims 1 GiB: refused from its 9 bytes, nothing buffered.
  const Bytes huge_key = hex("03 00000040 00000000");
  ParseResult r =
      parse_query(Dialect::kValidate, huge_key.data(), huge_key.size(), WireLimits{}, &q);
  EXPECT_EQ(r.status, ParseStatus::kMalformed);
  EXPECT_NE(r.error.find("key of 1073741824 bytes exceeds the limit"), std::string::npos)
      << r.error;
  const Bytes many_keys = hex("06 ffffffff ffffffff");
  r = parse_query(Dialect::kValidate, many_keys.data(), many_keys.size(), WireLimits{}, &q);
  EXPECT_EQ(r.status, ParseStatus::kMalformed);
  EXPECT_NE(r.error.find("key count"), std::string::npos) << r.error;
}

TEST(StoreServer, RepliesToAPyTorch211ClientAsPyTorch211sServerDid) {
  Logged log;
  auto server = start_server(&log);
  replay(server->port(), kTorch211);
  EXPECT_TRUE(log.get().empty());
}

TEST(StoreServer, RepliesToAPyTorch113ClientAsPyTorch113sServerDid) {
  Logged log;
  auto server = start_server(&log);
  replay(server->port(), kTorch113);
  EXPECT_TRUE(log.get().empty());
}

TEST(StoreServer, ALegacyWaiterIsWokenByAValidateClientsSet) {
  Logged log;
  auto server = start_server(&log);
  RawClient legacy(server->port()), modern(server->port());
  ASSERT_TRUE(legacy.send(hex("05 0100000000000000 0200000000000000 2f78")));  // WAIT [/x]
  EXPECT_TRUE(legacy.silent());
  ASSERT_TRUE(modern.validate());
  ASSERT_TRUE(modern.send(hex("01 0200000000000000 2f78 0100000000000000 31")));  // SET /x 1
  EXPECT_EQ(legacy.recv(1), hex("00"));
  ASSERT_TRUE(legacy.send(hex("02 0200000000000000 2f78")));  // GET /x
  EXPECT_EQ(legacy.recv(9), hex("0100000000000000 31"));
}

TEST(StoreServer, AWaitForSeveralKeysEndsWhenTheLastOneIsSet) {
  Logged log;
  auto server = start_server(&log);
  RawClient waiter(server->port()), setter(server->port());
  ASSERT_TRUE(waiter.validate());
  ASSERT_TRUE(setter.validate());
  ASSERT_TRUE(waiter.send(hex("06 0200000000000000 0100000000000000 61 0100000000000000 62")));
  ASSERT_TRUE(setter.send(hex("01 0100000000000000 61 0000000000000000")));  // SET a ""
  EXPECT_TRUE(waiter.silent());
  ASSERT_TRUE(setter.send(hex("04 0100000000000000 62 0300000000000000")));  // ADD b 3
  EXPECT_EQ(setter.recv(8), hex("0300000000000000"));
  EXPECT_EQ(waiter.recv(1), hex("00"));
}

TEST(StoreServer, ACanceledWaitIsAcknowledgedAndNotWokenLater) {
  Logged log;
  auto server = start_server(&log);
  RawClient c(server->port()), setter(server->port());
  ASSERT_TRUE(c.validate());
  ASSERT_TRUE(c.send(hex("06 0100000000000000 0100000000000000 7a")));  // WAIT [z]
  EXPECT_TRUE(c.silent());
  ASSERT_TRUE(c.send(hex("0c")));  // CANCEL_WAIT
  EXPECT_EQ(c.recv(1), hex("01"));
  ASSERT_TRUE(setter.validate());
  ASSERT_TRUE(setter.send(hex("01 0100000000000000 7a 0000000000000000")));
  EXPECT_TRUE(c.silent());
}

TEST(StoreServer, ALegacyWatcherHearsEveryChangeOfItsKey) {
  Logged log;
  auto server = start_server(&log);
  RawClient watcher(server->port()), writer(server->port());
  ASSERT_TRUE(watcher.send(hex("07 0100000000000000 6b")));  // WATCH_KEY k
  EXPECT_EQ(watcher.recv(1), hex("03"));                     // KEY_CALLBACK_REGISTERED
  ASSERT_TRUE(writer.send(hex("00 0100000000000000 6b 0100000000000000 31")));  // SET k 1
  EXPECT_EQ(watcher.recv(27),
            hex("01 0100000000000000 6b 0000000000000000 0100000000000000 31"));  // created
  ASSERT_TRUE(writer.send(hex("03 0100000000000000 6b 0100000000000000")));       // ADD k 1
  EXPECT_EQ(writer.recv(8), hex("0200000000000000"));
  EXPECT_EQ(watcher.recv(28),
            hex("00 0100000000000000 6b 0100000000000000 31 0100000000000000 32"));  // updated
  ASSERT_TRUE(writer.send(hex("08 0100000000000000 6b")));                           // DELETE_KEY k
  EXPECT_EQ(writer.recv(8), hex("0100000000000000"));
  EXPECT_EQ(watcher.recv(27),
            hex("02 0100000000000000 6b 0100000000000000 32 0000000000000000"));  // deleted
}

TEST(StoreServer, PoppingAnEmptyQueueRepliesZeroAndPushWakesAQueueWaiter) {
  Logged log;
  auto server = start_server(&log);
  RawClient c(server->port()), pusher(server->port());
  ASSERT_TRUE(c.validate());
  ASSERT_TRUE(c.send(hex("0f 0100000000000000 71")));  // QUEUE_POP q
  EXPECT_EQ(c.recv(8), hex("0000000000000000"));
  ASSERT_TRUE(c.send(hex("06 0100000000000000 0100000000000000 71")));  // WAIT [q]
  EXPECT_TRUE(c.silent());
  ASSERT_TRUE(pusher.validate());
  ASSERT_TRUE(pusher.send(hex("0e 0100000000000000 71 0100000000000000 41")));  // QUEUE_PUSH
  EXPECT_EQ(c.recv(1), hex("00"));
}

TEST(StoreServer, AMalformedQueryClosesOnlyThatConnectionWithALineNamingThePeer) {
  Logged log;
  auto server = start_server(&log);
  RawClient good(server->port()), bad(server->port());
  ASSERT_TRUE(good.validate());
  ASSERT_TRUE(bad.validate());
  ASSERT_TRUE(bad.send(hex("2a")));  // no query has code 42
  EXPECT_TRUE(bad.closed_by_server());
  ASSERT_TRUE(good.send(hex("0d 01020304")));  // PING
  EXPECT_EQ(good.recv(4), hex("01020304"));
  const auto lines = log.get();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("closing the connection from 127.0.0.1:"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("query code 42"), std::string::npos) << lines[0];
}

TEST(StoreServer, AQueryOfANewerReleaseIsNamedAsSuch) {
  Logged log;
  auto server = start_server(&log);
  RawClient c(server->port());
  ASSERT_TRUE(c.validate());
  ASSERT_TRUE(
      c.send(hex("12 0100000000000000 62 0200000000000000")));  // BARRIER b 2 (a later release)
  EXPECT_TRUE(c.closed_by_server());
  ASSERT_EQ(log.get().size(), 1u);
  EXPECT_NE(log.get()[0].find("query code 18 is none of the validate (PyTorch 2.x TCPStore) "
                              "queries dtrain serves (0-17, up to 2.11's LIST_KEYS): a newer "
                              "PyTorch's query?"),
            std::string::npos)
      << log.get()[0];
}

TEST(StoreServer, AddingToAValueThatIsNotANumberClosesTheConnection) {
  Logged log;
  auto server = start_server(&log);
  RawClient c(server->port());
  ASSERT_TRUE(c.send(hex("00 0100000000000000 6b 0200000000000000 6869")));  // SET k hi
  ASSERT_TRUE(c.send(hex("03 0100000000000000 6b 0100000000000000")));       // ADD k 1
  EXPECT_TRUE(c.closed_by_server());
  const auto lines = log.get();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("ADD to key 'k' whose value 'hi' is not an integer"), std::string::npos)
      << lines[0];
}

TEST(StoreServer, AnAddThatWouldOverflowASixtyFourBitCounterClosesTheConnection) {
  Logged log;
  auto server = start_server(&log);
  RawClient c(server->port());
  ASSERT_TRUE(c.send(hex("03 0100000000000000 6b ffffffffffffff7f")));  // ADD k INT64_MAX
  ASSERT_TRUE(c.send(hex("03 0100000000000000 6b 0100000000000000")));  // ADD k 1
  EXPECT_TRUE(c.closed_by_server());
  const auto lines = log.get();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("ADD of 1 to key 'k' overflows a 64-bit counter"), std::string::npos)
      << lines[0];
}

TEST(StoreServer, OutOfFileDescriptorsTheServerWaitsWithoutSpinningAndServesOnceSomeAreFree) {
  // In a child process: the descriptor limit is the process's.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Logged log;
    auto server = start_server(&log);
    rlimit lim{};
    ::getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = 64;
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) ::_exit(10);
    std::vector<std::unique_ptr<RawClient>> clients;
    while (clients.size() < 100) {  // until socket() itself fails: every descriptor taken
      auto c = std::make_unique<RawClient>(server->port());
      if (!c->connected()) break;
      clients.push_back(std::move(c));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    rusage before{}, after{};
    ::getrusage(RUSAGE_SELF, &before);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ::getrusage(RUSAGE_SELF, &after);
    auto cpu = [](const rusage& u) {
      return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
             (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
    };
    if (cpu(after) - cpu(before) > 0.1) ::_exit(11);  // spinning
    bool logged = false;
    for (const auto& line : log.get())
      logged |= line.find("raise the open-files limit") != std::string::npos;
    if (!logged) ::_exit(12);
    clients.clear();  // frees descriptors: the server accepts again
    RawClient again(server->port());
    // PING 7 is answered with 7.
    if (!again.connected() || !again.validate() || !again.send(hex("0d 07000000")) ||
        again.recv(4) != hex("07000000"))
      ::_exit(13);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setrlimit, 11: the server spun, 12: no log line, "
                                       "13: not served after descriptors were freed";
}

TEST(StoreServer, AQueryBeyondTheLimitsIsRefusedBeforeItIsBuffered) {
  Logged log;
  WireLimits limits;
  limits.max_query_bytes = 1024;
  auto server = start_server(&log, limits);
  RawClient c(server->port());
  ASSERT_TRUE(c.validate());
  ASSERT_TRUE(c.send(hex("01 0100000000000000 6b 0000100000000000")));  // SET k <1 MiB>
  EXPECT_TRUE(c.closed_by_server());
  ASSERT_EQ(log.get().size(), 1u);
  EXPECT_NE(log.get()[0].find("exceeds the limit of 1024"), std::string::npos) << log.get()[0];
}

TEST(StoreServer, AnUnknownDialectGetsOneLineNamingThePeerAndTheDialectsServed) {
  Logged log;
  auto server = start_server(&log);
  for (int i = 0; i < 3; ++i) {  // a client retrying: still one line
    RawClient c(server->port());
    ASSERT_TRUE(c.send(hex("00 12345678 0d 01020304")));
    EXPECT_TRUE(c.closed_by_server());
  }
  const auto lines = log.get();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("the client at 127.0.0.1:"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("magic number 0x78563412"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("legacy (PyTorch 1.13 TCPStore) and validate (PyTorch 2.x TCPStore)"),
            std::string::npos)
      << lines[0];
}

TEST(StoreServer, AClientThatLeavesWhileWaitingIsForgotten) {
  Logged log;
  auto server = start_server(&log);
  {
    RawClient gone(server->port());
    ASSERT_TRUE(gone.validate());
    ASSERT_TRUE(gone.send(hex("06 0100000000000000 0100000000000000 77")));
    EXPECT_TRUE(gone.silent());
  }
  RawClient c(server->port());
  ASSERT_TRUE(c.validate());
  ASSERT_TRUE(c.send(hex("01 0100000000000000 77 0000000000000000 07")));  // SET w, GETNUMKEYS
  EXPECT_EQ(c.recv(8), hex("0100000000000000"));
  EXPECT_TRUE(log.get().empty());
}

TEST(StoreProbe, DtrainsServerAnswersInWhicheverDialectIsAskedFirst) {
  Logged log;
  auto server = start_server(&log);
  for (Dialect d : {Dialect::kLegacy, Dialect::kValidate}) {
    ProbeResult r = probe_store("127.0.0.1", server->port(), d, 5s, 2s);
    EXPECT_TRUE(r.connected);
    EXPECT_EQ(r.dialect, d);
  }
  EXPECT_TRUE(log.get().empty());
}

TEST(StoreProbe, AListenerThatAnswersNeitherDialectIsUnknownWithinTheAnswerTimeouts) {
  // A socket that accepts (the kernel's backlog) and never answers.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 8), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const auto t0 = std::chrono::steady_clock::now();
  ProbeResult r = probe_store("127.0.0.1", ntohs(a.sin_port), Dialect::kLegacy, 5s, 300ms);
  const auto took = std::chrono::steady_clock::now() - t0;
  ::close(fd);
  EXPECT_TRUE(r.connected);
  EXPECT_EQ(r.dialect, Dialect::kUnknown);
  EXPECT_LT(took, 3s);
}

TEST(StoreProbe, NoServerIsReportedAsNotConnectedAtTheConnectDeadline) {
  // A port that was free a moment ago: nothing listens there.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  ProbeResult r = probe_store("127.0.0.1", ntohs(a.sin_port), Dialect::kValidate, 500ms, 300ms);
  EXPECT_FALSE(r.connected);
  EXPECT_FALSE(r.error.empty());
}

}  // namespace
}  // namespace dtrain::store_server
