// HTTP/1.1 for the etcd client (etcd_http.h): one POST per connection with a
// deadline over connect, send and receive, and the response parser.

#include "launch/rendezvous/etcd_http.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "common/fd.h"
#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::detail {
namespace {

using Clock = std::chrono::steady_clock;

/// A reply larger than this is not from etcd (single-key reads only).
constexpr size_t kMaxResponseBytes = 64 << 20;
constexpr const char* kHint = ": is etcd running and is LaunchOptions::rdzv_endpoint right?";

/// Milliseconds left until `deadline`, at least 0, for poll().
int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

/// Waits until `fd` is ready for `events`; false when the deadline passed.
/// Throws StoreError on a poll failure other than EINTR.
bool wait_ready(int fd, short events, Clock::time_point deadline, const std::string& where) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) throw StoreError(cat(where, ": poll failed: ", std::strerror(errno)));
  }
}

/// Connects to the first address of host:port that accepts before the deadline.
Fd connect_with_deadline(const std::string& host, int port, Clock::time_point deadline,
                         std::chrono::milliseconds timeout, const std::string& what) {
  const std::string hp = host_port(host, port);
  auto unreachable = [&](const std::string& reason) {
    return StoreError(cat("cannot reach etcd at ", hp, " (", reason, ") for ", what, kHint));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  // getaddrinfo has no deadline of its own; numeric hosts never block, names
  // are bounded by the resolver's own timeout (resolv.conf).
  int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (gai != 0) throw unreachable(cat("cannot resolve '", host, "': ", ::gai_strerror(gai)));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> addrs(found, ::freeaddrinfo);

  std::string last_error = "no address";
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!fd.valid()) {
      last_error = std::strerror(errno);
      continue;
    }
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) return fd;
    if (errno != EINPROGRESS && errno != EINTR) {
      last_error = std::strerror(errno);
      continue;
    }
    if (!wait_ready(fd.get(), POLLOUT, deadline, cat("etcd at ", hp))) {
      throw TimeoutError(cat("cannot reach etcd at ", hp, " (no connection within ",
                             timeout.count(), " ms) for ", what, kHint));
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err == 0) return fd;
    last_error = std::strerror(err);
  }
  throw unreachable(last_error);
}

void send_all(int fd, std::string_view data, Clock::time_point deadline, const std::string& where,
              const std::string& timeout_message) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd, POLLOUT, deadline, where)) throw TimeoutError(timeout_message);
    } else {
      throw StoreError(cat(where, ": sending failed: ", std::strerror(errno)));
    }
  }
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// Decodes a chunked body starting at `pos`. Returns false when more data is
/// needed (`*error` empty) or the encoding is broken (`*error` set).
bool decode_chunked(std::string_view raw, size_t pos, std::string* body, std::string* error) {
  body->clear();
  auto broken = [&](std::string why) {
    *error = std::move(why);
    return false;
  };
  for (;;) {
    size_t eol = raw.find("\r\n", pos);
    if (eol == std::string_view::npos) return false;
    std::string_view size_text = raw.substr(pos, eol - pos);
    size_text = size_text.substr(0, size_text.find(';'));  // chunk extensions
    size_t size = 0;
    if (size_text.empty()) return broken("empty chunk size");
    for (char c : size_text) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) || size > (kMaxResponseBytes >> 4)) {
        return broken(cat("bad chunk size '", size_text, "'"));
      }
      int digit =
          std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10;
      size = size * 16 + static_cast<size_t>(digit);
    }
    pos = eol + 2;
    if (size == 0) {
      // Trailer fields (the gateway sends Grpc-Trailer-* on errors) up to an
      // empty line.
      for (;;) {
        eol = raw.find("\r\n", pos);
        if (eol == std::string_view::npos) return false;
        if (eol == pos) return true;
        pos = eol + 2;
      }
    }
    if (raw.size() < pos + size + 2) return false;
    body->append(raw.substr(pos, size));
    if (raw.substr(pos + size, 2) != "\r\n") return broken("chunk not followed by CRLF");
    pos += size + 2;
  }
}

}  // namespace

bool parse_http_response(std::string_view raw, bool at_eof, HttpResponse* out, std::string* error) {
  error->clear();
  auto incomplete = [&](const char* what) {
    if (at_eof) *error = what;
    return false;
  };
  for (;;) {
    size_t head_end = raw.find("\r\n\r\n");
    if (head_end == std::string_view::npos)
      return incomplete("connection closed inside the headers");
    std::vector<std::string> lines = split(raw.substr(0, head_end), '\n');
    const std::string& status_line = lines.front();
    long long status = 0;
    if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12 ||
        !parse_int(std::string_view(status_line).substr(9, 3), &status)) {
      *error = cat("not an HTTP/1.x status line: '", first_line(status_line), "'");
      return false;
    }
    if (status >= 100 && status < 200) {  // interim (100 Continue): the real one follows
      // A loop, not a call: a reply of millions of interim heads must not
      // exhaust the stack (seen while writing fuzz/etcd_http.cpp).
      raw.remove_prefix(head_end + 4);
      continue;
    }
    bool chunked = false;
    std::optional<size_t> content_length;
    for (size_t i = 1; i < lines.size(); ++i) {
      std::string_view line = lines[i];
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      std::string name = lower(line.substr(0, colon));
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      long long length = 0;
      if (name == "transfer-encoding" && lower(value).find("chunked") != std::string::npos) {
        chunked = true;
      } else if (name == "content-length") {
        if (!parse_int(value, &length) || length < 0) {
          *error = cat("bad Content-Length '", value, "'");
          return false;
        }
        content_length = static_cast<size_t>(length);
      }
    }
    out->status = static_cast<int>(status);
    size_t body_start = head_end + 4;
    if (chunked) {
      if (decode_chunked(raw, body_start, &out->body, error)) return true;
      return error->empty() ? incomplete("connection closed inside a chunked body") : false;
    }
    if (content_length) {
      if (raw.size() < body_start + *content_length) {
        return incomplete("connection closed before Content-Length bytes arrived");
      }
      out->body = std::string(raw.substr(body_start, *content_length));
      return true;
    }
    if (!at_eof) return false;  // body delimited by the end of the connection
    out->body = std::string(raw.substr(body_start));
    return true;
  }
}

HttpResponse http_post(const std::string& host, int port, const std::string& path,
                       const std::string& body, std::chrono::milliseconds timeout,
                       const std::string& what) {
  // One deadline for connect + send + receive: the caller's bound is per call.
  const Clock::time_point deadline = Clock::now() + timeout;
  const std::string hp = host_port(host, port);
  const std::string where = cat("etcd at ", hp, ", ", what);
  const std::string late =
      cat("etcd at ", hp, " did not answer ", what, " within ", timeout.count(),
          " ms: is etcd healthy (a leader elected) and is LaunchOptions::rdzv_endpoint "
          "right?");
  Fd fd = connect_with_deadline(host, port, deadline, timeout, what);

  std::string request = cat("POST ", path, " HTTP/1.1\r\nHost: ", hp,
                            "\r\nContent-Type: application/json\r\nAccept: application/json\r\n"
                            "Connection: close\r\nContent-Length: ",
                            body.size(), "\r\n\r\n", body);
  send_all(fd.get(), request, deadline, where, late);

  std::string raw;
  HttpResponse response;
  std::string error;
  char buffer[16384];
  for (;;) {
    ssize_t n = ::recv(fd.get(), buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd.get(), POLLIN, deadline, where)) throw TimeoutError(late);
      continue;
    }
    if (n < 0) throw StoreError(cat(where, ": receiving failed: ", std::strerror(errno)));
    raw.append(buffer, static_cast<size_t>(n));
    if (raw.size() > kMaxResponseBytes) {
      throw StoreError(cat(where, ": reply larger than ", kMaxResponseBytes, " bytes"));
    }
    if (parse_http_response(raw, n == 0, &response, &error)) return response;
    if (!error.empty()) throw StoreError(cat(where, ": malformed HTTP reply: ", error));
  }
}

}  // namespace dtrain::detail
