#include "comm/store_server/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <stdexcept>

#include "comm/store_server/key_space.h"
#include "common/strings.h"

namespace dtrain::store_server {
namespace {

constexpr std::size_t kReadChunk = 64 * 1024;
// Most bytes read from one connection per poll round, so that one client
// sending a large value does not starve the others.
constexpr std::size_t kReadPerRound = 1024 * 1024;

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

std::string peer_name(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
      ::inet_ntop(AF_INET, &v6->sin6_addr.s6_addr[12], host, sizeof(host));
    } else {
      ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
    }
    port = ntohs(v6->sin6_port);
  } else if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
    port = ntohs(v4->sin_port);
  }
  return cat(host, ":", port);
}

std::string hex_prefix(const Bytes& b, std::size_t start) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = start; i < b.size() && i < start + 12; ++i) {
    if (!out.empty()) out += ' ';
    out += kHex[b[i] >> 4];
    out += kHex[b[i] & 15];
  }
  return out;
}

// Binds every interface: IPv6 with IPv4 mapped, else IPv4 (as c10d does).
detail::Fd bind_listen(int port, int* bound_port) {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int rc = -1;
  if (fd >= 0) {
    int one = 1, zero = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<std::uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    if (rc != 0 && errno == EADDRINUSE) {
      ::close(fd);
      throw std::runtime_error(cat("port ", port, " is already in use"));
    }
    if (rc != 0) ::close(fd);
  }
  if (rc != 0) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error(cat("socket(): ", std::strerror(errno)));
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      const int err = errno;
      ::close(fd);
      throw std::runtime_error(cat("cannot bind port ", port, ": ", std::strerror(err)));
    }
  }
  detail::Fd owned(fd);
  if (::listen(fd, SOMAXCONN) != 0) {
    throw std::runtime_error(cat("cannot listen on port ", port, ": ", std::strerror(errno)));
  }
  sockaddr_storage s{};
  socklen_t len = sizeof(s);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&s), &len);
  *bound_port = s.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&s)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&s)->sin_port);
  set_nonblocking(fd);
  return owned;
}

}  // namespace

// The server's thread: owns the sockets and the key space.
class StoreServer::Loop {
 public:
  Loop(detail::Fd listen_fd, int wake_fd, StoreServerOptions options)
      : listen_(std::move(listen_fd)),
        wake_fd_(wake_fd),
        options_(std::move(options)),
        keys_([this](ConnId c, const Bytes& b) { enqueue(c, b); }) {
    if (!options_.log) {
      options_.log = [](const std::string& line) {
        std::cerr << "dtrain: store: " << line << std::endl;
      };
    }
  }

  void run();

 private:
  struct Conn {
    detail::Fd fd;
    std::string peer;
    Dialect dialect = Dialect::kUndecided;
    Bytes in;
    Bytes out;
    std::size_t out_start = 0;
    bool closing = false;  ///< close once the loop round ends
  };

  void accept_all();
  void read(ConnId id, Conn& c);
  void serve(ConnId id, Conn& c);
  void flush(Conn& c);
  void enqueue(ConnId id, const Bytes& b);
  void close_with(Conn& c, const std::string& why);
  void report_unknown(Conn& c);

  detail::Fd listen_;
  int wake_fd_;
  StoreServerOptions options_;
  KeySpace keys_;
  std::map<ConnId, Conn> conns_;
  ConnId next_id_ = 1;
  std::set<std::string> reported_hosts_;
  std::chrono::steady_clock::time_point accept_paused_until_{};
  bool out_of_descriptors_logged_ = false;
};

void StoreServer::Loop::run() {
  std::vector<pollfd> fds;
  std::vector<ConnId> ids;
  while (true) {
    fds.clear();
    ids.clear();
    // Note [Out of descriptors]: while accept fails for want of file
    // descriptors the listening socket stays readable; it is left out of
    // the poll for a moment instead of waking it at once, round after round.
    const bool accepting = std::chrono::steady_clock::now() >= accept_paused_until_;
    fds.push_back({listen_.get(), static_cast<short>(accepting ? POLLIN : 0), 0});
    fds.push_back({wake_fd_, POLLIN, 0});
    for (auto& [id, c] : conns_) {
      short events = POLLIN;
      if (c.out.size() > c.out_start) events |= POLLOUT;
      fds.push_back({c.fd.get(), events, 0});
      ids.push_back(id);
    }
    const int n = ::poll(fds.data(), fds.size(), accepting ? 1000 : 100);
    if (n < 0 && errno != EINTR) {
      options_.log(cat("poll failed: ", std::strerror(errno), "; the store stops"));
      return;
    }
    if (n <= 0) continue;
    if (fds[1].revents != 0) return;  // stop requested
    if (fds[0].revents & POLLIN) accept_all();
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const short re = fds[i + 2].revents;
      if (re == 0) continue;
      auto it = conns_.find(ids[i]);
      if (it == conns_.end()) continue;
      Conn& c = it->second;
      if (re & POLLOUT) flush(c);
      if (!c.closing && (re & (POLLIN | POLLHUP | POLLERR))) read(ids[i], c);
    }
    // Replies and wake-ups queued this round, to any connection.
    for (auto& [id, c] : conns_) {
      if (!c.closing && c.out.size() > c.out_start) flush(c);
    }
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->second.closing) {
        keys_.drop(it->first);
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void StoreServer::Loop::accept_all() {
  while (true) {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    const int fd = ::accept4(listen_.get(), reinterpret_cast<sockaddr*>(&a), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Note [Out of descriptors]
        accept_paused_until_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
        if (!out_of_descriptors_logged_) {
          options_.log(
              cat("cannot accept connections: ", std::strerror(errno), " (", conns_.size(),
                  " open); new clients wait; fix: raise the open-files limit (ulimit -n)"));
          out_of_descriptors_logged_ = true;
        }
      }
      return;  // EAGAIN, or a connection reset before accept
    }
    out_of_descriptors_logged_ = false;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Conn c;
    c.fd.reset(fd);
    c.peer = peer_name(a);
    conns_.emplace(next_id_++, std::move(c));
  }
}

void StoreServer::Loop::read(ConnId id, Conn& c) {
  std::size_t total = 0;
  while (total < kReadPerRound) {
    const std::size_t old = c.in.size();
    c.in.resize(old + kReadChunk);
    const ssize_t got = ::recv(c.fd.get(), c.in.data() + old, kReadChunk, 0);
    if (got > 0) {
      c.in.resize(old + static_cast<std::size_t>(got));
      total += static_cast<std::size_t>(got);
      continue;
    }
    c.in.resize(old);
    if (got == 0) {
      c.closing = true;  // the client closed: its normal way to leave
      break;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    if (errno == EINTR) continue;
    c.closing = true;
    break;
  }
  // Queries that arrived before a close are still applied (a SET then exit).
  const bool was_closing = c.closing;
  c.closing = false;
  serve(id, c);
  c.closing = c.closing || was_closing;
}

void StoreServer::Loop::serve(ConnId id, Conn& c) {
  if (c.dialect == Dialect::kUndecided) {
    c.dialect = detect_dialect(c.in.data(), c.in.size());
    if (c.dialect == Dialect::kUndecided) return;
    if (c.dialect == Dialect::kUnknown) {
      report_unknown(c);
      return;
    }
  }
  std::size_t start = 0;
  while (!c.closing && start < c.in.size()) {
    Query q;
    ParseResult r =
        parse_query(c.dialect, c.in.data() + start, c.in.size() - start, options_.limits, &q);
    if (r.status == ParseStatus::kNeedMore) break;
    if (r.status == ParseStatus::kMalformed) {
      close_with(c, cat("malformed ", dialect_name(c.dialect), " query (", r.error, "; bytes ",
                        hex_prefix(c.in, start), ")"));
      return;
    }
    start += r.consumed;
    try {
      keys_.apply(id, q);
    } catch (const std::exception& e) {
      close_with(c, cat(dialect_name(c.dialect), " ", op_name(q.op), ": ", e.what()));
      return;
    }
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(start));
  if (c.in.capacity() > 4 * kReadPerRound && c.in.size() < kReadPerRound) c.in.shrink_to_fit();
}

void StoreServer::Loop::enqueue(ConnId id, const Bytes& b) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.closing) return;
  Conn& c = it->second;
  if (c.out.size() - c.out_start + b.size() > 2 * options_.limits.max_query_bytes) {
    close_with(c, cat("its unread replies exceed ", 2 * options_.limits.max_query_bytes,
                      " bytes (the client does not read them)"));
    return;
  }
  c.out.insert(c.out.end(), b.begin(), b.end());
}

void StoreServer::Loop::flush(Conn& c) {
  while (c.out.size() > c.out_start) {
    const ssize_t sent =
        ::send(c.fd.get(), c.out.data() + c.out_start, c.out.size() - c.out_start, MSG_NOSIGNAL);
    if (sent > 0) {
      c.out_start += static_cast<std::size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.closing = true;  // the peer is gone
    return;
  }
  c.out.clear();
  c.out_start = 0;
}

void StoreServer::Loop::close_with(Conn& c, const std::string& why) {
  options_.log(cat("closing the connection from ", c.peer, ": ", why));
  c.closing = true;
}

void StoreServer::Loop::report_unknown(Conn& c) {
  c.closing = true;
  const std::string host = c.peer.substr(0, c.peer.rfind(':'));
  // One line per client host: a client retries its connection for its whole
  // timeout, and the first line says all there is to say.
  if (!reported_hosts_.insert(host).second) return;
  std::string what = "an unknown c10d store dialect";
  if (c.in.size() >= 5 && c.in[0] == 0) {
    std::uint32_t magic = 0;
    std::memcpy(&magic, c.in.data() + 1, sizeof(magic));
    what = cat("a VALIDATE greeting with magic number 0x", std::hex, magic, std::dec,
               " (PyTorch 2.x uses 0x3c85f7ce: a newer TCPStore dialect?)");
  }
  options_.log(cat("the client at ", c.peer, " speaks ", what, " (first bytes ",
                   hex_prefix(c.in, 0), "); this store serves the ", dialect_name(Dialect::kLegacy),
                   " and ", dialect_name(Dialect::kValidate),
                   " dialects: run the program with one of those PyTorch releases (its TCPStore "
                   "client keeps retrying until its timeout)"));
}

StoreServer::StoreServer(detail::Fd listen_fd, int port, const StoreServerOptions& options)
    : port_(port) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    throw std::runtime_error(cat("cannot create the store's wake pipe: ", std::strerror(errno)));
  }
  wake_read_.reset(p[0]);
  wake_write_.reset(p[1]);
  loop_ = std::make_unique<Loop>(std::move(listen_fd), wake_read_.get(), options);
  thread_ = std::thread([this] { loop_->run(); });
}

StoreServer::~StoreServer() {
  const char b = 1;
  if (::write(wake_write_.get(), &b, 1) < 0) {
    // The pipe cannot be full (one byte) or closed (we own both ends).
  }
  if (thread_.joinable()) thread_.join();
}

std::unique_ptr<StoreServer> StoreServer::start(const StoreServerOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    throw std::runtime_error(cat("store port ", options.port, " is out of range 0-65535"));
  }
  int bound = 0;
  detail::Fd fd = bind_listen(options.port, &bound);
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(fd), bound, options));
}

}  // namespace dtrain::store_server
