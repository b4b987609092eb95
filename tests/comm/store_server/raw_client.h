#pragma once
// A raw TCP client for the store server's tests: sends exact bytes and reads
// exact bytes with a deadline, so each test states the wire format itself.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/store_server/wire.h"

namespace dtrain::testing {

using store_server::Bytes;

/// Bytes from a hex string ("00 ce f7" or "00cef7").
inline Bytes hex(const std::string& s) {
  Bytes out;
  int hi = -1;
  for (char ch : s) {
    int v;
    if (ch >= '0' && ch <= '9') {
      v = ch - '0';
    } else if (ch >= 'a' && ch <= 'f') {
      v = ch - 'a' + 10;
    } else {
      continue;
    }
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<std::uint8_t>(hi * 16 + v));
      hi = -1;
    }
  }
  return out;
}

class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  bool send(const Bytes& b) {
    return ::send(fd_, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size());
  }
  /// Exactly n bytes, or fewer when the deadline passes or the server closes.
  Bytes recv(std::size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    Bytes out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (out.size() < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      std::uint8_t buf[4096];
      const ssize_t got = ::recv(fd_, buf, std::min(sizeof(buf), n - out.size()), 0);
      if (got <= 0) {
        closed_ = true;
        break;
      }
      out.insert(out.end(), buf, buf + got);
    }
    return out;
  }
  /// True when nothing arrives within `timeout` and the connection stays open.
  bool silent(std::chrono::milliseconds timeout = std::chrono::milliseconds(200)) {
    return recv(1, timeout).empty() && !closed_;
  }
  /// True when the server closes the connection within `timeout`.
  bool closed_by_server(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    while (!closed_) {
      if (recv(1, timeout).empty()) break;
    }
    return closed_;
  }
  /// Sends the validate dialect's greeting (VALIDATE + magic).
  bool validate() { return send(hex("00 ce f7 85 3c")); }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
};

}  // namespace dtrain::testing
