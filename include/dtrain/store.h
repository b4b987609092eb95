#pragma once
// Key/value stores that ranks and agents meet through. dtrain uses c10d's
// Store interface (set / get / add / compareSet / wait with a timeout) so that
// c10d's process groups can run on any of them.
//
/// Example:
/// ```
/// void local_store() {
///   dtrain::TcpStoreServerOptions o;
///   o.port = 0;  // a free port
///   auto server = dtrain::TcpStoreServer::start(o);
///   auto store = dtrain::connect_tcp_store("127.0.0.1", server->port(), std::chrono::seconds(30));
/// }
/// ```

#include <chrono>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace dtrain {
namespace store_server {
class StoreServer;
}

using StorePtr = c10::intrusive_ptr<c10d::Store>;

/// Default deadline for connecting to a store and for blocking store calls.
constexpr std::chrono::milliseconds kDefaultStoreTimeout = std::chrono::seconds(300);

struct TcpStoreServerOptions {
  /// Address to report to clients; the server listens on every interface.
  std::string host = "127.0.0.1";
  /// Port to listen on; 0 picks a free port (read it back with port()).
  int port = 0;
  /// Deadline for blocking calls made through the server's own client.
  std::chrono::milliseconds timeout = kDefaultStoreTimeout;
};

/// A TCP key/value store hosted in this process. It speaks c10d's TCPStore
/// protocol in both dialects, whichever LibTorch dtrain is built on: PyTorch
/// 1.13's and PyTorch 2.x's (VALIDATE + PING; checked with 2.11), one per
/// connection, over one key space, so Python programs on either release and
/// dtrain's own ranks meet in it. A client of another dialect is closed with
/// one line on standard error naming it. The server stops when the object is
/// destroyed. Thread-safe.
///
/// Preconditions: the port is free (0 picks a free one); the server outlives
/// every client that still needs it (a worker's group, a rendezvous).
class TcpStoreServer {
 public:
  /// Starts listening. Throws StoreError naming host:port when the port is
  /// taken or cannot be bound.
  static std::unique_ptr<TcpStoreServer> start(const TcpStoreServerOptions& options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  /// A client of this server that lives in the same process.
  StorePtr store() const { return store_; }

 private:
  TcpStoreServer(std::string host, std::unique_ptr<store_server::StoreServer> server,
                 StorePtr store);
  std::string host_;
  int port_;
  std::unique_ptr<store_server::StoreServer> server_;  // outlives store_ (declared first)
  StorePtr store_;
};

/// Connects to a TCP store at host:port, retrying until `timeout`. Throws
/// TimeoutError naming host:port when no server answers in time. Before
/// c10d's client connects, the server's dialect is asked (a few seconds at
/// most): a server that speaks only the other dialect than the linked
/// LibTorch's client (torchrun 2.x's store for a 1.13 build, torchrun 1.13's
/// for a 2.x build) throws StoreError naming both and the fix, instead of
/// c10d's silent retries. Blocking calls on the returned store also use
/// `timeout`.
StorePtr connect_tcp_store(const std::string& host, int port, std::chrono::milliseconds timeout);

/// A store in a file on a (shared) filesystem, for `file://` initialisation.
/// `world_size` processes share it; the last one to close it deletes the file.
StorePtr open_file_store(const std::string& path, int world_size,
                         std::chrono::milliseconds timeout);

/// A view of `store` where every key is prefixed with `prefix` + "/".
StorePtr prefix_store(const std::string& prefix, StorePtr store);

/// An in-memory store shared by the threads of one process (c10d HashStore):
/// for running several ranks as threads in tests.
StorePtr make_memory_store();

/// Returns true when a TCP port can be bound on this host right now.
bool port_is_free(int port);

}  // namespace dtrain
