// Fuzz target: the HTTP/1.1 response parser of the etcd client
// (src/launch/rendezvous/etcd_http.h): status line, headers, Content-Length,
// chunked encoding, end-of-connection bodies.
//
// Checks beyond "no crash": with at_eof false the parser either finishes,
// asks for more (no error), or names an error; a complete response parses the
// same when the connection has also ended.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "launch/rendezvous/etcd_http.h"

using dtrain::detail::HttpResponse;
using dtrain::detail::parse_http_response;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view raw(reinterpret_cast<const char*>(data), size);
  HttpResponse open_response, eof_response;
  std::string open_error, eof_error;
  const bool open_done = parse_http_response(raw, false, &open_response, &open_error);
  const bool eof_done = parse_http_response(raw, true, &eof_response, &eof_error);
  if (!eof_done && eof_error.empty()) {
    dtrain::fuzz::fail("at the end of the connection the parser still asks for more data");
  }
  if (open_done && (!eof_done || eof_response.status != open_response.status ||
                    eof_response.body != open_response.body)) {
    dtrain::fuzz::fail("a complete response parses differently once the connection ends");
  }
  return 0;
}
