#pragma once
// A minimal etcd v3 client over etcd's JSON gateway (grpc-gateway): each call
// is one HTTP POST of a JSON body to http://host:port/v3/<service>/<method>,
// through dtrain's one HTTP stack (src/http/http.h: libcurl, connections kept
// alive between calls). Only what the rendezvous needs: single-key range /
// put / delete, a compare-and-put transaction, and leases. Verified against
// etcd 3.4 (the first release serving /v3/ rather than /v3beta/ or /v3alpha/).
//
//   EtcdClient etcd("127.0.0.1", 2379, std::chrono::seconds(10));
//   etcd.put("/dtrain/a", "1");
//   std::optional<std::string> v = etcd.get("/dtrain/a");   // "1"
//
// Keys and values are arbitrary bytes (base64 on the wire).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "http/http.h"

namespace dtrain::detail {

/// Standard base64 with padding.
std::string base64_encode(std::string_view bytes);
/// Inverse of base64_encode; nullopt on characters outside the alphabet or a
/// bad length.
std::optional<std::string> base64_decode(std::string_view text);

/// A lease as etcd granted it: etcd may raise the TTL to its minimum
/// (1.5 x election timeout, i.e. 2 s with default settings).
struct EtcdLease {
  int64_t id = 0;
  int64_t ttl_seconds = 0;
};

/// Talks to one etcd endpoint. Thread-safe: calls may run at once from several
/// threads; they share a pool of kept-alive connections (copies of a client
/// share it too). Every call is bounded by `timeout` in total (connect, send
/// and receive) and throws StoreError (unreachable, connection broken, etcd
/// error response, malformed reply) or TimeoutError (the deadline passed);
/// messages name "etcd at host:port", the operation and the key. Proxy
/// variables (http_proxy, ...) are not used: etcd is reached directly.
class EtcdClient {
 public:
  /// How a request reaches etcd: POST `body` to `path` and return the reply,
  /// throwing StoreError/TimeoutError naming `what`. The default is an HTTP
  /// POST to http://host:port`path` over http::curl_transport(); tests and
  /// fuzz/etcd_json.cpp pass recorded replies.
  using Transport = std::function<http::HttpResponse(
      const std::string& path, const std::string& body, const std::string& what)>;

  EtcdClient(std::string host, int port, std::chrono::milliseconds timeout,
             Transport transport = nullptr);

  /// "etcd at 127.0.0.1:2379".
  std::string describe() const;
  const std::string& host() const { return host_; }
  int port() const { return port_; }

  /// The value at `key`, nullopt when absent.
  std::optional<std::string> get(const std::string& key);

  /// Writes `value` at `key`.
  void put(const std::string& key, const std::string& value);
  /// Writes `value` at `key` attached to `lease` (the key is deleted when the
  /// lease ends). Returns false, writing nothing, when the lease no longer
  /// exists.
  bool put_leased(const std::string& key, const std::string& value, int64_t lease);

  /// One transaction: if `key` holds `expected` (nullopt: `key` is absent)
  /// then put `value` and return true; else return false and store the value
  /// now at `key` in `*current` (when not null; nullopt: absent).
  bool compare_and_put(const std::string& key, const std::optional<std::string>& expected,
                       const std::string& value, std::optional<std::string>* current);

  /// Deletes `key`; returns whether it existed.
  bool erase(const std::string& key);

  /// Grants a lease of `ttl_seconds` (>= 1).
  EtcdLease grant_lease(int64_t ttl_seconds);
  /// Renews `lease` once; returns its TTL from now in seconds, or 0 when the
  /// lease no longer exists (expired or revoked).
  int64_t keep_alive(int64_t lease);
  /// Revokes `lease`, deleting the keys attached to it; false when it no
  /// longer existed.
  bool revoke_lease(int64_t lease);

 private:
  /// POSTs `request` to /v3/`method` and returns the parsed reply. Turns
  /// transport failures, HTTP errors and etcd's {"error": ...} replies into
  /// StoreError naming `what`. `*not_found` (when not null) is set instead of
  /// throwing for gRPC code 5 (NotFound: e.g. an unknown lease).
  nlohmann::json call(const std::string& method, const nlohmann::json& request,
                      const std::string& what, bool* not_found = nullptr);
  /// The default Transport: POSTs `body` to http://host:port`path` through
  /// http_, turning http::TransportError into StoreError / TimeoutError.
  http::HttpResponse post(const std::string& path, const std::string& body,
                          const std::string& what);

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  Transport transport_;                        // null: post()
  std::shared_ptr<http::HttpTransport> http_;  // null when transport_ is set
};

}  // namespace dtrain::detail
