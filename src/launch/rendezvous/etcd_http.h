#pragma once
// HTTP/1.1 as the etcd client (etcd_client.h) needs it: one POST of a JSON
// body on a fresh connection ("Connection: close"), bounded by one deadline,
// and a parser for the response (Content-Length, chunked, or delimited by the
// end of the connection). Not a general HTTP client: no redirects, no TLS, no
// keep-alive. Error messages name "etcd at host:port".

#include <chrono>
#include <string>
#include <string_view>

namespace dtrain::detail {

/// One HTTP response: the status code and the (de-chunked) body.
struct HttpResponse {
  int status = 0;
  std::string body;
};

/// "host:port", as messages name the etcd server.
inline std::string host_port(const std::string& host, int port) {
  return host + ":" + std::to_string(port);
}

/// POSTs `body` (Content-Type: application/json) to http://host:port`path`
/// with "Connection: close" and returns the response. Connect, send and
/// receive together take at most `timeout`. Throws StoreError when the server
/// cannot be reached or breaks the connection, and TimeoutError when the
/// deadline passes; both messages name host:port and `what` (the operation).
HttpResponse http_post(const std::string& host, int port, const std::string& path,
                       const std::string& body, std::chrono::milliseconds timeout,
                       const std::string& what);

/// Parses a complete HTTP/1.1 response (status line, headers, body delimited
/// by Content-Length, chunked encoding or the end of the data). Returns false
/// when `raw` is not complete yet or is malformed (`*error` says which: empty
/// when more data is needed). Exposed for tests.
bool parse_http_response(std::string_view raw, bool at_eof, HttpResponse* out, std::string* error);

}  // namespace dtrain::detail
