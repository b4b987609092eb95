#pragma once
// dtrain's HTTP stack (component dtrain_http): one request in, one response
// out. CurlTransport is the real one (libcurl); tests put a faulty one in its
// place (tests/objstore/test_faults.cpp).

#include <chrono>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtrain::http {

/// Header fields, sent in this order, names as written.
using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method = "GET";
  std::string url;
  Headers headers;
  /// Sent for PUT and POST (also when empty: Content-Length: 0). Not owned:
  /// it must outlive perform().
  std::string_view body;
  /// The attempt fails when no byte moves for this long (Note [Idle, not total, deadline]).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(5)};
  /// PEM CA bundle; empty: the system's.
  std::string ca_bundle;
};

struct HttpResponse {
  int status = 0;
  /// Names lower-cased.
  std::map<std::string, std::string> headers;
  std::string body;

  /// The header's value, or "" when absent (`name` lower-case).
  std::string header(const std::string& name) const;
};

/// No response came: connection refused or reset, DNS, TLS, timeout.
class TransportError : public std::runtime_error {
 public:
  TransportError(const std::string& message, bool timed_out)
      : std::runtime_error(message), timed_out(timed_out) {}
  bool timed_out;
};

/// Performs HTTP requests. Thread-safe; perform() blocks for at most the
/// request's timeout and throws TransportError when no response came.
class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  virtual HttpResponse perform(const HttpRequest& request) = 0;
};

/// libcurl, reusing connections through a small pool of easy handles.
/// Proxies: libcurl's own reading of http_proxy, https_proxy, all_proxy,
/// no_proxy.
std::shared_ptr<HttpTransport> curl_transport();

}  // namespace dtrain::http
