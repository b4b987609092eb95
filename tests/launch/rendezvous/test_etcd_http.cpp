// The etcd client's HTTP/1.1 response parser (etcd_http.h) on raw bytes: no
// server needed.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "launch/rendezvous/etcd_http.h"

namespace dtrain::detail {
namespace {

using ::testing::HasSubstr;

TEST(HttpResponseParser, ReadsContentLengthBodyOnlyOnceComplete) {
  HttpResponse r;
  std::string error;
  std::string raw = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel";
  EXPECT_FALSE(parse_http_response(raw, false, &r, &error));
  EXPECT_EQ(error, "");
  EXPECT_FALSE(parse_http_response(raw, true, &r, &error));
  EXPECT_THAT(error, HasSubstr("Content-Length"));
  ASSERT_TRUE(parse_http_response(raw + "lo", false, &r, &error));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello");
}

TEST(HttpResponseParser, DecodesChunkedBodyWithTrailers) {
  // What etcd's gateway sends for an error: chunked, with a gRPC trailer.
  std::string raw =
      "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\nTrailer: Grpc-Trailer-X\r\n\r\n"
      "4\r\n{\"a\"\r\na;ext=1\r\n:12345678}\r\n0\r\nGrpc-Trailer-X: y\r\n";
  HttpResponse r;
  std::string error;
  EXPECT_FALSE(parse_http_response(raw, false, &r, &error));  // trailers not ended
  ASSERT_TRUE(parse_http_response(raw + "\r\n", false, &r, &error)) << error;
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, "{\"a\":12345678}");
}

TEST(HttpResponseParser, ReadsBodyUntilCloseWithoutLengthAndSkipsInterimReplies) {
  std::string raw = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\nX: y\r\n\r\nabc";
  HttpResponse r;
  std::string error;
  EXPECT_FALSE(parse_http_response(raw, false, &r, &error));
  ASSERT_TRUE(parse_http_response(raw, true, &r, &error));
  EXPECT_EQ(r.body, "abc");
}

TEST(HttpResponseParser, SkipsHundredsOfThousandsOfInterimHeadsWithoutExhaustingTheStack) {
  // 200,000 "100 Continue" heads (3.4 MB, under the 64 MiB reply limit) once
  // recursed once per head: far past an 8 MiB stack.
  std::string raw;
  for (int i = 0; i < 200000; ++i) raw += "HTTP/1.1 100 Continue\r\n\r\n";
  raw += "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
  HttpResponse r;
  std::string error;
  ASSERT_TRUE(parse_http_response(raw, true, &r, &error)) << error;
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "{}");
}

TEST(HttpResponseParser, RejectsNonHttpAndBadChunks) {
  HttpResponse r;
  std::string error;
  EXPECT_FALSE(parse_http_response("SSH-2.0-OpenSSH\r\n\r\n", false, &r, &error));
  EXPECT_THAT(error, HasSubstr("not an HTTP"));
  EXPECT_FALSE(parse_http_response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                                   false, &r, &error));
  EXPECT_THAT(error, HasSubstr("chunk size"));
}

// ---- errors without etcd ----

/// A loopback port with nothing listening.
}  // namespace
}  // namespace dtrain::detail
