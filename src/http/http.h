#pragma once
// dtrain's one HTTP stack (component dtrain_http): one request in, one
// response out, over libcurl. Its users: the object store's S3 client
// (src/objstore) and the etcd client of the etcd rendezvous
// (src/launch/rendezvous/etcd_client.cpp). CurlTransport is the real one;
// tests put a faulty one in its place (tests/objstore/test_faults.cpp).
//
//   auto http = dtrain::http::curl_transport();
//   dtrain::http::HttpRequest request;
//   request.method = "POST";
//   request.url = "http://127.0.0.1:2379/v3/kv/range";
//   request.body = body;                     // must outlive perform()
//   request.total_timeout = std::chrono::seconds(5);
//   dtrain::http::HttpResponse response = http->perform(request);

#include <chrono>
#include <cstdint>
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

/// Where the body of a 2xx answer goes in place of HttpResponse::body, so
/// that a large body is received straight into the caller's memory (Note
/// [Body into place] in http.cpp).
class BodySink {
 public:
  virtual ~BodySink() = default;
  /// A 2xx answer's body begins: its status and Content-Length (-1: none
  /// sent). Called again at each attempt's answer: drop what came before.
  virtual void start(int status, int64_t content_length) = 0;
  /// The body's next bytes.
  virtual void append(const char* data, size_t n) = 0;
};

struct HttpRequest {
  std::string method = "GET";
  std::string url;
  Headers headers;
  /// Sent for PUT and POST (also when empty: Content-Length: 0). Not owned:
  /// it must outlive perform().
  std::string_view body;
  /// The attempt fails when no byte moves for this long (Note [Idle, not total, deadline]).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  /// The attempt fails when it has not ended this long after it started,
  /// bytes moving or not (connect, send and receive together); 0: no such
  /// bound (the default: a large body may take as long as it moves). For
  /// small requests that must end in bounded time whatever the peer does:
  /// the etcd client sets its timeout here.
  std::chrono::milliseconds total_timeout{0};
  /// Connecting fails after this long (total_timeout, when shorter, wins).
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(5)};
  /// PEM CA bundle; empty: the system's.
  std::string ca_bundle;
  /// true: libcurl's own reading of http_proxy, https_proxy, all_proxy,
  /// no_proxy; false: always connect directly (the etcd client, like
  /// torch's etcd rendezvous and dtrain's own earlier transport).
  bool use_proxy = true;
  /// Not owned; must outlive perform(). When set, curl_transport() hands a
  /// 2xx answer's body to it and leaves HttpResponse::body empty; other
  /// answers' bodies (S3's XML errors) still go to HttpResponse::body. A
  /// transport may also ignore it and return the body as usual (the tests'
  /// scripted transports do): callers handle both.
  BodySink* body_sink = nullptr;
};

struct HttpResponse {
  int status = 0;
  /// Names lower-cased.
  std::map<std::string, std::string> headers;
  std::string body;

  /// The header's value, or "" when absent (`name` lower-case).
  std::string header(const std::string& name) const;
};

/// No response came: connection refused or reset, DNS, TLS, timeout. The
/// message is "<METHOD> <url>: <reason>".
class TransportError : public std::runtime_error {
 public:
  TransportError(const std::string& message, bool timed_out, std::string reason = "",
                 bool unreachable = false)
      : std::runtime_error(message),
        timed_out(timed_out),
        reason(reason.empty() ? message : std::move(reason)),
        unreachable(unreachable) {}
  /// A deadline passed (idle, total or connect).
  bool timed_out;
  /// The cause alone, as libcurl words it ("Failed to connect to 127.0.0.1
  /// port 2379 after 0 ms: Couldn't connect to server (Connection refused)");
  /// the whole message when the thrower gave none.
  std::string reason;
  /// No connection was made and nothing was sent: the name did not resolve
  /// or the connection was refused (a connect timeout is `timed_out`).
  bool unreachable;
};

/// Performs HTTP requests. Thread-safe; perform() blocks for at most the
/// request's timeout and throws TransportError when no response came.
class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  virtual HttpResponse perform(const HttpRequest& request) = 0;
};

/// libcurl, reusing connections (HTTP keep-alive, TLS sessions) through a
/// small pool of easy handles. Proxies: HttpRequest::use_proxy.
std::shared_ptr<HttpTransport> curl_transport();

}  // namespace dtrain::http
