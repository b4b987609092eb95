#include "comm/store_server/probe.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/fd.h"
#include "common/strings.h"

namespace dtrain::store_server {
namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

// One connection attempt to any address of host:port, bounded by `deadline`.
// Returns an invalid Fd and sets `error` on failure.
detail::Fd connect_once(const std::string& host, int port, Clock::time_point deadline,
                        std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    *error = cat("cannot resolve '", host, "': ", ::gai_strerror(rc));
    return detail::Fd();
  }
  detail::Fd out;
  for (addrinfo* a = res; a != nullptr && !out.valid(); a = a->ai_next) {
    detail::Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) continue;
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      *error = std::strerror(errno);
      continue;
    }
    pollfd p{fd.get(), POLLOUT, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) <= 0) {
      *error = "connect timed out";
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      *error = std::strerror(err);
      continue;
    }
    out = std::move(fd);
  }
  ::freeaddrinfo(res);
  return out;
}

enum class Answer { kAnswered, kClosed, kSilent };

// Sends `question` and waits for `want` bytes of answer (checked by `ok`).
template <typename Check>
Answer ask(int fd, const Bytes& question, std::size_t want, Check ok,
           std::chrono::milliseconds timeout) {
  std::size_t sent = 0;
  while (sent < question.size()) {
    const ssize_t n = ::send(fd, question.data() + sent, question.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    } else {
      return Answer::kClosed;
    }
  }
  const auto deadline = Clock::now() + timeout;
  Bytes got;
  while (got.size() < want) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r == 0) return Answer::kSilent;
    if (r < 0 && errno == EINTR) continue;
    std::uint8_t buf[64];
    const ssize_t n = ::recv(fd, buf, std::min(sizeof(buf), want - got.size()), 0);
    if (n > 0) {
      got.insert(got.end(), buf, buf + n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      continue;
    } else {
      return Answer::kClosed;
    }
  }
  return ok(got) ? Answer::kAnswered : Answer::kSilent;
}

Answer ask_in(Dialect d, int fd, std::chrono::milliseconds timeout) {
  if (d == Dialect::kLegacy) {
    Query q;
    q.op = Op::kNumKeys;
    return ask(
        fd, encode_query(d, q), 8, [](const Bytes&) { return true; }, timeout);
  }
  // The nonce's bytes make a legacy server's key length 0xffffff0d3c85f7ce
  // (Note [Dialect detection]): beyond a vector's max_size, so it throws
  // before allocating and drops the connection.
  const std::uint32_t nonce = 0xffffffffu;
  Query validate;
  validate.op = Op::kValidate;
  validate.number = kValidateMagic;
  Query ping;
  ping.op = Op::kPing;
  ping.number = nonce;
  Bytes question = encode_query(d, validate);
  Bytes p = encode_query(d, ping);
  question.insert(question.end(), p.begin(), p.end());
  return ask(
      fd, question, 4,
      [&](const Bytes& b) {
        std::uint32_t echoed = 0;
        std::memcpy(&echoed, b.data(), 4);
        return echoed == nonce;
      },
      timeout);
}

}  // namespace

ProbeResult probe_store(const std::string& host, int port, Dialect preferred,
                        std::chrono::milliseconds connect_timeout,
                        std::chrono::milliseconds answer_timeout) {
  ProbeResult result;
  const auto deadline = Clock::now() + connect_timeout;
  const Dialect other = preferred == Dialect::kLegacy ? Dialect::kValidate : Dialect::kLegacy;
  for (Dialect d : {preferred, other}) {
    detail::Fd fd;
    auto pause = std::chrono::milliseconds(50);
    while (true) {
      fd = connect_once(host, port, deadline, &result.error);
      if (fd.valid() || Clock::now() >= deadline) break;
      std::this_thread::sleep_for(
          std::min(pause, std::chrono::milliseconds(remaining_ms(deadline))));
      pause = std::min(pause * 2, std::chrono::milliseconds(1000));
    }
    if (!fd.valid()) return result;
    result.connected = true;
    if (ask_in(d, fd.get(), answer_timeout) == Answer::kAnswered) {
      result.dialect = d;
      return result;
    }
  }
  result.dialect = Dialect::kUnknown;
  return result;
}

}  // namespace dtrain::store_server
