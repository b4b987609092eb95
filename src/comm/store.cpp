#include "dtrain/store.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "comm/store_server/probe.h"
#include "comm/store_server/server.h"
#include "common/strings.h"
#include "common/torch_compat.h"
#include "dtrain/errors.h"

namespace dtrain {
namespace {

c10d::TCPStoreOptions tcp_options(int port, bool is_server, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = is_server;
  o.waitWorkers = false;
  o.timeout = timeout;
  compat::disable_libuv(o);
  return o;
}

}  // namespace

TcpStoreServer::TcpStoreServer(std::string host, std::unique_ptr<store_server::StoreServer> server,
                               StorePtr store)
    : host_(std::move(host)),
      port_(server->port()),
      server_(std::move(server)),
      store_(std::move(store)) {}

TcpStoreServer::~TcpStoreServer() = default;

std::unique_ptr<TcpStoreServer> TcpStoreServer::start(const TcpStoreServerOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    throw InvalidArgument(cat("store port ", options.port, " is out of range 0-65535"));
  }
  // Checked first so the message names host:port and the fix.
  if (options.port != 0 && !port_is_free(options.port)) {
    throw StoreError(cat(
        "cannot host the store on ", options.host, ":", options.port,
        ": address already in use; choose another TcpStoreServerOptions::port (MASTER_PORT) or 0 "
        "for a free one"));
  }
  std::unique_ptr<store_server::StoreServer> server;
  try {
    store_server::StoreServerOptions so;
    so.port = options.port;
    server = store_server::StoreServer::start(so);
  } catch (const std::exception& e) {
    throw StoreError(cat("cannot host the store on ", options.host, ":", options.port, ": ",
                         first_line(e.what())));
  }
  // This process's own client: c10d's, over loopback (the server listens on
  // every interface), so that everything in dtrain uses one Store interface.
  try {
    auto client = c10::make_intrusive<c10d::TCPStore>(
        "127.0.0.1", tcp_options(server->port(), /*is_server=*/false, options.timeout));
    return std::unique_ptr<TcpStoreServer>(
        new TcpStoreServer(options.host, std::move(server), StorePtr(std::move(client))));
  } catch (const std::exception& e) {
    throw StoreError(cat("cannot connect to the store just started on port ", server->port(), ": ",
                         first_line(e.what())));
  }
}

namespace {

// Note [Store dialect probe]
// c10d's TCPStore client meets a server of the other dialect badly: a 1.13
// client's queries are ignored by a 2.x server (it waits for VALIDATE), and a
// 2.x client's VALIDATE makes a 1.13 server drop the connection, which the
// client retries; both for the whole store timeout (30 minutes in PyTorch).
// So before c10d connects, dtrain asks the server in the linked client's
// dialect and then in the other (store_server/probe.h). Only a definite
// answer in the other dialect fails, in one line naming both; a server that
// answers neither in time (a slow one, another service) gets one warning and
// c10d's client as before.
constexpr auto kProbeAnswerTimeout = std::chrono::seconds(5);

// The dialect of the linked LibTorch's c10d client (store_server/wire.h):
// 1.13 speaks the legacy dialect, 2.3 and later the validate dialect (VALIDATE
// + magic number, PING; checked with 2.11). Releases in between are not
// probed. (Kept here rather than in compat.h: only this file asks.)
constexpr store_server::Dialect kClientDialect =
    DTRAIN_TORCH_VERSION < 200    ? store_server::Dialect::kLegacy
    : DTRAIN_TORCH_VERSION >= 203 ? store_server::Dialect::kValidate
                                  : store_server::Dialect::kUndecided;

void check_store_dialect(const std::string& host, int port, std::chrono::milliseconds timeout) {
  using store_server::Dialect;
  if (kClientDialect == Dialect::kUndecided) return;
  const Dialect mine = kClientDialect;
  const auto answer_timeout =
      std::min<std::chrono::milliseconds>(timeout, std::chrono::milliseconds(kProbeAnswerTimeout));
  const store_server::ProbeResult r =
      store_server::probe_store(host, port, mine, timeout, answer_timeout);
  if (!r.connected) {
    throw TimeoutError(cat("could not connect to the store at ", host, ":", port, " within ",
                           timeout.count() / 1000.0, " s (", r.error,
                           "); check MASTER_ADDR/MASTER_PORT and that rank 0 or the launcher "
                           "is running"));
  }
  if (r.dialect == mine) return;
  const std::string built = cat("LibTorch ", TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR);
  if (r.dialect == Dialect::kValidate) {
    throw StoreError(cat("the store at ", host, ":", port,
                         " speaks PyTorch 2.x's TCPStore dialect (torchrun 2.x or a PyTorch 2.x "
                         "rank 0 hosts it), which this dtrain, built on ",
                         built,
                         ", cannot speak: build dtrain on LibTorch 2.x, or start the job with "
                         "`dtrain run`, whose store speaks both"));
  }
  if (r.dialect == Dialect::kLegacy) {
    throw StoreError(cat("the store at ", host, ":", port,
                         " speaks PyTorch 1.13's TCPStore dialect (torchrun 1.13 or a PyTorch "
                         "1.13 rank 0 hosts it), which this dtrain, built on ",
                         built,
                         ", cannot speak: start the job with `dtrain run` (its store speaks both) "
                         "or a PyTorch 2.x torchrun, or build dtrain on LibTorch 1.13"));
  }
  std::cerr << "dtrain: warning: the store at " << host << ":" << port
            << " answered neither PyTorch 1.13's nor 2.x's TCPStore dialect within "
            << answer_timeout.count() / 1000.0
            << " s; connecting anyway (check MASTER_ADDR/MASTER_PORT name a c10d store)"
            << std::endl;
}

}  // namespace

StorePtr connect_tcp_store(const std::string& host, int port, std::chrono::milliseconds timeout) {
  if (port <= 0 || port > 65535) {
    throw InvalidArgument(cat("store port ", port, " is out of range 1-65535"));
  }
  check_store_dialect(host, port, timeout);
  try {
    return c10::make_intrusive<c10d::TCPStore>(host,
                                               tcp_options(port, /*is_server=*/false, timeout));
  } catch (const std::exception& e) {
    throw TimeoutError(cat("could not connect to the store at ", host, ":", port, " within ",
                           timeout.count() / 1000.0, " s (", first_line(e.what()),
                           "); check MASTER_ADDR/MASTER_PORT and that rank 0 or the launcher "
                           "is running"));
  }
}

StorePtr open_file_store(const std::string& path, int world_size,
                         std::chrono::milliseconds timeout) {
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(path, world_size);
    store->setTimeout(timeout);
    return store;
  } catch (const std::exception& e) {
    throw StoreError(cat("cannot open the file store '", path, "': ", first_line(e.what())));
  }
}

StorePtr prefix_store(const std::string& prefix, StorePtr store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, std::move(store));
}

StorePtr make_memory_store() { return c10::make_intrusive<c10d::HashStore>(); }

bool port_is_free(int port) {
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc;
  if (v6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  ::close(fd);
  return rc == 0;
}

}  // namespace dtrain
