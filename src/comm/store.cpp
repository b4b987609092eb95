#include "dtrain/store.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

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

TcpStoreServer::TcpStoreServer(std::string host, int port, StorePtr store)
    : host_(std::move(host)), port_(port), store_(std::move(store)) {}

TcpStoreServer::~TcpStoreServer() = default;

std::unique_ptr<TcpStoreServer> TcpStoreServer::start(const TcpStoreServerOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    throw InvalidArgument(cat("store port ", options.port, " is out of range 0-65535"));
  }
  // c10d reports a taken port as a generic socket error; check first so the
  // message names host:port and the fix.
  if (options.port != 0 && !port_is_free(options.port)) {
    throw StoreError(cat("cannot host the store on ", options.host, ":", options.port,
                         ": address already in use; choose another port (--master-port) or 0 "
                         "for a free one"));
  }
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>(
        options.host, tcp_options(options.port, /*is_server=*/true, options.timeout));
    int port = store->getPort();
    return std::unique_ptr<TcpStoreServer>(
        new TcpStoreServer(options.host, port, StorePtr(std::move(store))));
  } catch (const std::exception& e) {
    throw StoreError(cat("cannot host the store on ", options.host, ":", options.port, ": ",
                         first_line(e.what())));
  }
}

StorePtr connect_tcp_store(const std::string& host, int port, std::chrono::milliseconds timeout) {
  if (port <= 0 || port > 65535) {
    throw InvalidArgument(cat("store port ", port, " is out of range 1-65535"));
  }
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
