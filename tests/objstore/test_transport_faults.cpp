// Faults on a real connection (tests/objstore/fault_server.py), through
// libcurl: resets, truncated bodies, stalls, 503 SlowDown are retried within
// their bounds; an HTML server and a wrong-region redirect end with one line.
// Needs only python3 (no venv).

#include <gtest/gtest.h>

#include "dtrain/object_store.h"
#include "peer.h"

namespace dtrain {
namespace {

struct FaultServer {
  int port = testing::free_port();
  testing::ChildProcess process;
  explicit FaultServer(const std::string& script)
      : process({"/usr/bin/python3", DTRAIN_SOURCE_DIR "/tests/objstore/fault_server.py",
                 std::to_string(port), script}) {}
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port); }
  int requests() const { return std::stoi(testing::http_get(port, "/__count")); }
};

S3Options options_for(const FaultServer& server, int attempts) {
  S3Options o;
  o.endpoint = server.endpoint();
  o.credentials = static_credentials({"AKID", "SECRET", "", std::nullopt, "the test"});
  o.max_attempts = attempts;
  o.base_backoff = std::chrono::milliseconds(10);
  o.max_backoff = std::chrono::milliseconds(50);
  o.request_timeout = std::chrono::milliseconds(1500);
  return o;
}

std::string expected_body() {
  std::string body;
  for (int r = 0; r < 40; ++r) {
    for (int i = 0; i < 256; ++i) body += static_cast<char>(i);
  }
  return body;
}

TEST(S3TransportFaults, ResetsTruncationsStallsAndSlowDownAreRetriedToTheWholeObject) {
  FaultServer server("reset,truncate,stall,slowdown");
  ASSERT_TRUE(testing::wait_for_port(server.port, 30));
  S3Client s3(options_for(server, 5));
  const auto start = std::chrono::steady_clock::now();
  GetResult got = s3.get_object("bucket", "shard-0.tar");
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(got.data, expected_body());
  EXPECT_EQ(server.requests(), 5);
  // The stall cost one request timeout (1.5 s), not the server's 30 s.
  EXPECT_LT(took, std::chrono::seconds(10));
}

// Note [Body into place] over libcurl: a truncated answer's bytes are
// dropped when the retry's answer starts, so the caller's buffer holds the
// second answer only (and nothing of what it held before).
TEST(S3TransportFaults, ATruncatedBodyReadIntoCallerMemoryIsReplacedByTheRetrysWholeBody) {
  FaultServer server("truncate");
  ASSERT_TRUE(testing::wait_for_port(server.port, 30));
  S3Client s3(options_for(server, 3));
  std::vector<uint8_t> out(100000, 'x');
  GetResult got = s3.get_object("bucket", "shard-0.tar", {}, out);
  EXPECT_EQ(std::string(out.begin(), out.end()), expected_body());
  EXPECT_EQ(got.bytes, expected_body().size());
  EXPECT_EQ(server.requests(), 2);
}

// The fault server ignores Range, as some S3-compatible stores do: it
// answers 200 with the whole object, and each form keeps only the range.
TEST(S3TransportFaults, ARangeFromAStoreThatIgnoresRangeIsCutOutInEachForm) {
  FaultServer server("");
  ASSERT_TRUE(testing::wait_for_port(server.port, 30));
  S3Client s3(options_for(server, 2));
  GetOptions range;
  range.offset = 1000;
  range.length = 3000;
  const std::string want = expected_body().substr(1000, 3000);
  EXPECT_EQ(s3.get_object("bucket", "k", range).data, want);
  std::vector<uint8_t> grown;
  EXPECT_EQ(s3.get_object("bucket", "k", range, grown).object_size, expected_body().size());
  EXPECT_EQ(std::string(grown.begin(), grown.end()), want);
  std::string fixed(3000, '\0');
  EXPECT_EQ(s3.get_object("bucket", "k", range, fixed.data()).bytes, 3000u);
  EXPECT_EQ(fixed, want);
  range.offset = 10000;  // 240 bytes left of the 10,240
  std::string tail(3000, '\0');
  EXPECT_EQ(s3.get_object("bucket", "k", range, tail.data()).bytes, 240u);
  EXPECT_EQ(tail.substr(0, 240), expected_body().substr(10000));
}

// One GET scattered into spans (a run of samples into each sample's
// buffer): each span gets its bytes and a gap is dropped, also when the
// store ignores Range, and a truncated answer's bytes are placed again from
// the retry's start.
TEST(S3TransportFaults, ARangeIntoSpansFillsEachSpanAlsoFromAWholeObjectAndAfterATruncation) {
  FaultServer server("truncate");
  ASSERT_TRUE(testing::wait_for_port(server.port, 30));
  S3Client s3(options_for(server, 3));
  GetOptions range;
  range.offset = 4000;  // the truncated answer ends at 5120, inside the first span
  std::string a(1500, 'x'), b(1200, 'x');
  const GetResult got =
      s3.get_object("bucket", "k", range, {{a.data(), 1500}, {nullptr, 300}, {b.data(), 1200}});
  EXPECT_EQ(server.requests(), 2);
  EXPECT_EQ(got.bytes, 3000u);
  EXPECT_EQ(a, expected_body().substr(4000, 1500));
  EXPECT_EQ(b, expected_body().substr(5800, 1200));
  range.length = 10;
  EXPECT_THROW(s3.get_object("bucket", "k", range, {{a.data(), 1500}}), InvalidArgument);
}

TEST(S3TransportFaults, AStalledServerEndsAfterTheBoundedAttemptsNamingTheTimeout) {
  FaultServer server("stall,stall,stall");
  ASSERT_TRUE(testing::wait_for_port(server.port, 30));
  S3Client s3(options_for(server, 2));
  const auto start = std::chrono::steady_clock::now();
  try {
    s3.get_object("bucket", "k");
    FAIL() << "a stalled server gave an answer";
  } catch (const ObjectStoreError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("S3 GetObject s3://bucket/k: no answer after 2 attempts (timed out"),
              std::string::npos)
        << m;
    EXPECT_EQ(m.find('\n'), std::string::npos);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
}

TEST(S3TransportFaults, AWebServerThatIsNotS3IsNamedAsSuch) {
  FaultServer server("html,html");
  ASSERT_TRUE(testing::wait_for_port(server.port, 30));
  S3Client s3(options_for(server, 3));
  try {
    s3.list_objects("bucket", "train/");
    FAIL() << "an HTML page was taken for a listing";
  } catch (const ObjectStoreError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("text/html"), std::string::npos) << m;
    EXPECT_NE(m.find("not an S3 endpoint; fix: point AWS_ENDPOINT_URL_S3"), std::string::npos) << m;
  }
}

TEST(S3TransportFaults, AWrongRegionRedirectNamesTheRegionToSet) {
  FaultServer server("redirect");
  ASSERT_TRUE(testing::wait_for_port(server.port, 30));
  S3Client s3(options_for(server, 3));
  try {
    s3.head_object("bucket", "k");
    FAIL();
  } catch (const WrongRegionError& e) {
    EXPECT_EQ(e.region, "eu-west-2");
    EXPECT_EQ(std::string(e.what()),
              "S3 HeadObject s3://bucket/k: HTTP 301: bucket 'bucket' is in region eu-west-2, not "
              "us-east-1; fix: set AWS_REGION=eu-west-2");
  }
  EXPECT_EQ(server.requests(), 1);  // not retried
}

}  // namespace
}  // namespace dtrain
