// Retries, bounds and the one-line errors, with a scripted transport in
// place of the network (the HttpTransport seam).

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <mutex>

#include "objstore/s3_request.h"
#include "objstore/sigv4.h"

namespace dtrain::objstore {
namespace {

// Answers each request with the next scripted step; records what was asked.
class ScriptedTransport : public HttpTransport {
 public:
  using Step = std::function<HttpResponse(const HttpRequest&)>;
  void then(Step step) { steps_.push_back(std::move(step)); }
  void then_status(int status, std::string body = "",
                   std::map<std::string, std::string> headers = {}) {
    then([=](const HttpRequest&) { return HttpResponse{status, headers, body}; });
  }
  void then_reset() {
    then([](const HttpRequest&) -> HttpResponse {
      throw TransportError("Recv failure: Connection reset by peer", false);
    });
  }
  HttpResponse perform(const HttpRequest& request) override {
    std::lock_guard<std::mutex> lock(mutex_);
    requests.push_back(request.method + " " + request.url);
    if (steps_.empty()) return HttpResponse{200, {{"etag", "\"e\""}}, ""};
    Step step = steps_.front();
    steps_.pop_front();
    return step(request);
  }
  std::vector<std::string> requests;

 private:
  std::mutex mutex_;
  std::deque<Step> steps_;
};

std::string s3_error(const std::string& code, const std::string& message = "m") {
  return "<?xml version=\"1.0\"?><Error><Code>" + code + "</Code><Message>" + message +
         "</Message></Error>";
}

struct Fixture {
  std::shared_ptr<ScriptedTransport> http = std::make_shared<ScriptedTransport>();
  std::unique_ptr<S3Client> client;
  explicit Fixture(int attempts = 4) {
    S3Options options;
    options.endpoint = "http://127.0.0.1:9";
    options.credentials =
        static_credentials({"AKIDTEST1234", "secret", "", std::nullopt, "the test"});
    options.max_attempts = attempts;
    options.base_backoff = std::chrono::milliseconds(1);
    options.max_backoff = std::chrono::milliseconds(5);
    options.multipart_threshold = 12 << 20;
    options.part_size = 5 << 20;
    client = make_s3_client(options, http);
  }
};

template <typename E>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(S3Faults, SlowDownAndResetsAreRetriedUntilAnAnswerComes) {
  Fixture f;
  f.http->then_status(503, s3_error("SlowDown"));
  f.http->then_reset();
  f.http->then_status(500, s3_error("InternalError"));
  f.http->then_status(200, "abc", {{"etag", "\"x\""}});
  EXPECT_EQ(f.client->get_object("b", "k").data, "abc");
  EXPECT_EQ(f.http->requests.size(), 4u);
}

TEST(S3Faults, RetriesAreBoundedAndTheLastErrorIsNamedOnOneLine) {
  Fixture f(3);
  for (int i = 0; i < 5; ++i) f.http->then_status(503, s3_error("SlowDown"));
  std::string m = message_of<ObjectStoreError>([&] { f.client->get_object("b", "k"); });
  EXPECT_EQ(f.http->requests.size(), 3u);
  EXPECT_NE(m.find("S3 GetObject s3://b/k: HTTP 503 SlowDown after 3 attempts"), std::string::npos)
      << m;
  EXPECT_NE(m.find("fix:"), std::string::npos);
  EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST(S3Faults, DroppedConnectionsEndAsOneLineNamingTheEndpoint) {
  Fixture f(2);
  f.http->then_reset();
  f.http->then_reset();
  std::string m = message_of<ObjectStoreError>([&] { f.client->head_object("b", "k"); });
  EXPECT_NE(m.find("no answer after 2 attempts"), std::string::npos) << m;
  EXPECT_NE(m.find("http://127.0.0.1:9"), std::string::npos) << m;
}

TEST(S3Faults, MissingKeyAndBucketAreNotRetriedAndSayWhichIsMissing) {
  Fixture f;
  f.http->then_status(404, s3_error("NoSuchKey"));
  std::string m = message_of<ObjectNotFoundError>([&] { f.client->get_object("b", "dir/k"); });
  EXPECT_EQ(f.http->requests.size(), 1u);
  EXPECT_NE(
      m.find("S3 GetObject s3://b/dir/k: HTTP 404 NoSuchKey: no object 'dir/k' in bucket 'b'"),
      std::string::npos)
      << m;
  f.http->then_status(404, s3_error("NoSuchBucket"));
  m = message_of<ObjectNotFoundError>([&] { f.client->list_objects("nobucket", "p/"); });
  EXPECT_NE(m.find("no bucket 'nobucket'"), std::string::npos) << m;
}

TEST(S3Faults, ForbiddenNamesTheCredentialsSourceButNotTheSecret) {
  Fixture f;
  f.http->then_status(403, s3_error("SignatureDoesNotMatch"));
  std::string m = message_of<AccessDeniedError>([&] { f.client->get_object("b", "k"); });
  EXPECT_NE(m.find("HTTP 403 SignatureDoesNotMatch"), std::string::npos) << m;
  EXPECT_NE(m.find("the test"), std::string::npos) << m;
  EXPECT_NE(m.find("s3://b/k"), std::string::npos) << m;
  EXPECT_EQ(m.find("secret\""), std::string::npos) << m;
}

TEST(S3Faults, WrongRegionNamesTheBucketsRegionAndTheVariableToSet) {
  Fixture f;
  f.http->then_status(301, s3_error("PermanentRedirect"), {{"x-amz-bucket-region", "eu-west-2"}});
  try {
    f.client->head_object("b", "k");
    FAIL() << "no error";
  } catch (const WrongRegionError& e) {
    EXPECT_EQ(e.region, "eu-west-2");
    EXPECT_NE(std::string(e.what()).find("fix: set AWS_REGION=eu-west-2"), std::string::npos)
        << e.what();
  }
  f.http->then_status(400, s3_error("AuthorizationHeaderMalformed"),
                      {{"x-amz-bucket-region", "ap-south-1"}});
  EXPECT_NE(message_of<WrongRegionError>([&] {
              f.client->list_objects("b", "");
            }).find("AWS_REGION=ap-south-1"),
            std::string::npos);
}

TEST(S3Faults, WithoutTheRegionHeaderTheErrorBodysRegionIsNamedElseAnotherRegion) {
  Fixture f;
  // Note [The bucket's region]: AuthorizationHeaderMalformed's <Region>.
  f.http->then_status(400,
                      "<Error><Code>AuthorizationHeaderMalformed</Code><Message>the region "
                      "'us-east-1' is wrong; expecting 'eu-central-1'</Message><Region>eu-central-1"
                      "</Region></Error>");
  try {
    f.client->get_object("b", "k");
    FAIL() << "no error";
  } catch (const WrongRegionError& e) {
    EXPECT_EQ(e.region, "eu-central-1");
    EXPECT_EQ(std::string(e.what()),
              "S3 GetObject s3://b/k: HTTP 400 AuthorizationHeaderMalformed: bucket 'b' is in "
              "region eu-central-1, not us-east-1; fix: set AWS_REGION=eu-central-1");
  }
  f.http->then_status(301);  // a HEAD's redirect with neither
  try {
    f.client->head_object("b", "k");
    FAIL() << "no error";
  } catch (const WrongRegionError& e) {
    EXPECT_EQ(e.region, "");
    EXPECT_EQ(std::string(e.what()),
              "S3 HeadObject s3://b/k: HTTP 301: bucket 'b' is in another region, not "
              "us-east-1; fix: set AWS_REGION=<the bucket's region>");
  }
  EXPECT_EQ(f.http->requests.size(), 2u);  // neither retried
}

TEST(S3Faults, AnHtmlPageIsNamedAsNotAnS3Endpoint) {
  Fixture f;
  f.http->then_status(200, "<html><body>Welcome to nginx</body></html>",
                      {{"content-type", "text/html"}});
  std::string m = message_of<ObjectStoreError>([&] { f.client->list_objects("b", "p"); });
  EXPECT_NE(m.find("not an S3 endpoint"), std::string::npos) << m;
  EXPECT_NE(m.find("text/html"), std::string::npos) << m;
  f.http->then_status(400, "<!DOCTYPE html><html><p>Bad request</html>",
                      {{"content-type", "text/html"}});
  m = message_of<ObjectStoreError>([&] { f.client->get_object("b", "k"); });
  EXPECT_NE(m.find("not an S3 endpoint"), std::string::npos) << m;
}

TEST(S3Faults, AReplacedObjectIsDetectedByItsETagEvenWhenTheStoreIgnoresIfMatch) {
  Fixture f;
  f.http->then_status(200, "new bytes", {{"etag", "\"v2\""}});
  GetOptions options;
  options.if_match = "\"v1\"";
  std::string m =
      message_of<PreconditionFailedError>([&] { f.client->get_object("b", "k", options); });
  EXPECT_NE(m.find("replaced"), std::string::npos) << m;
  f.http->then_status(412, s3_error("PreconditionFailed"));
  m = message_of<PreconditionFailedError>([&] { f.client->get_object("b", "k", options); });
  EXPECT_NE(m.find("HTTP 412"), std::string::npos) << m;
}

// Note [Range into place]: the three forms of get_object agree, also on a
// store that ignores Range, and a 206 with more or fewer bytes than the range
// is named rather than cut to size.
TEST(S3Faults, ReadsIntoCallerMemoryEqualTheStringFormAndCheckTheRangesSize) {
  Fixture f;
  const std::string object = "0123456789abcdefghij";
  GetOptions range;
  range.offset = 5;
  range.length = 10;
  for (int i = 0; i < 3; ++i) f.http->then_status(200, object, {{"etag", "\"e\""}});
  EXPECT_EQ(f.client->get_object("b", "k", range).data, "56789abcde");
  std::vector<uint8_t> grown = {'x', 'y'};
  GetResult g = f.client->get_object("b", "k", range, grown);
  EXPECT_EQ(std::string(grown.begin(), grown.end()), "56789abcde");
  EXPECT_EQ(g.bytes, 10u);
  EXPECT_EQ(g.object_size, object.size());
  EXPECT_TRUE(g.data.empty());
  char fixed[10];
  GetResult x = f.client->get_object("b", "k", range, fixed);
  EXPECT_EQ(std::string(fixed, 10), "56789abcde");
  EXPECT_EQ(x.bytes, 10u);
  // Any 2xx but 206 carries the whole object (found by fuzz/s3_xml.cpp).
  f.http->then_status(203, object, {{"etag", "\"e\""}});
  EXPECT_EQ(f.client->get_object("b", "k", range).data, "56789abcde");

  f.http->then_status(206, "56789abcdeEXTRA",
                      {{"etag", "\"e\""}, {"content-range", "bytes 5-14/20"}});
  std::string m = message_of<DataError>([&] { f.client->get_object("b", "k", range, fixed); });
  EXPECT_NE(m.find("got 15 bytes at offset 5, expected 10 of 20"), std::string::npos) << m;
  f.http->then_status(206, "56789", {{"etag", "\"e\""}, {"content-range", "bytes 5-14/20"}});
  m = message_of<DataError>([&] { f.client->get_object("b", "k", range, grown); });
  EXPECT_NE(m.find("got 5 bytes at offset 5, expected 10 of 20"), std::string::npos) << m;

  GetOptions whole;
  m = message_of<InvalidArgument>([&] { f.client->get_object("b", "k", whole, fixed); });
  EXPECT_NE(m.find("needs GetOptions::length"), std::string::npos) << m;
}

TEST(S3Faults, AFailedMultipartUploadIsAborted) {
  Fixture f;
  f.http->then_status(
      200,
      "<InitiateMultipartUploadResult><UploadId>up1</UploadId></InitiateMultipartUploadResult>");
  f.http->then_status(200, "", {{"etag", "\"p1\""}});
  f.http->then_status(400, s3_error("BadDigest"));
  std::string data(13 << 20, 'x');
  std::string m = message_of<ObjectStoreError>([&] { f.client->put_object("b", "big", data); });
  EXPECT_NE(m.find("UploadPart s3://b/big: HTTP 400 BadDigest"), std::string::npos) << m;
  ASSERT_EQ(f.http->requests.size(), 4u);
  EXPECT_EQ(f.http->requests[3], "DELETE http://127.0.0.1:9/b/big?uploadId=up1");
}

TEST(S3Faults, ACompleteThatFailsInsideA200IsReportedAndAborted) {
  Fixture f;
  f.http->then_status(
      200, "<InitiateMultipartUploadResult><UploadId>u</UploadId></InitiateMultipartUploadResult>");
  for (int i = 0; i < 3; ++i) f.http->then_status(200, "", {{"etag", "\"p\""}});
  f.http->then_status(200, s3_error("InternalError", "try again"));
  std::string data(12 << 20, 'y');
  std::string m = message_of<ObjectStoreError>([&] { f.client->put_object("b", "big", data); });
  EXPECT_NE(m.find("CompleteMultipartUpload s3://b/big: InternalError"), std::string::npos) << m;
  EXPECT_EQ(f.http->requests.back(), "DELETE http://127.0.0.1:9/b/big?uploadId=u");
}

TEST(S3Faults, AConditionalPutWhoseFirstAnswerWasLostIsNotReportedAsAConflict) {
  Fixture f;
  const std::string data = "checkpoint";
  f.http->then_reset();  // the PUT arrived, its answer did not
  f.http->then_status(412, s3_error("PreconditionFailed"));
  f.http->then_status(200, "", {{"etag", "\"" + hex(md5(data)) + "\""}, {"content-length", "10"}});
  PutOptions options;
  options.if_none_match = true;
  EXPECT_EQ(f.client->put_object("b", "ckpt", data, options).etag, "\"" + hex(md5(data)) + "\"");
  // A real conflict (first attempt) stays one.
  f.http->then_status(412, s3_error("PreconditionFailed"));
  std::string m = message_of<PreconditionFailedError>(
      [&] { f.client->put_object("b", "ckpt", data, options); });
  EXPECT_NE(m.find("already exists"), std::string::npos) << m;
}

TEST(S3Faults, ListingsFollowContinuationTokensAndDecodeUrlEncodedKeys) {
  Fixture f;
  f.http->then_status(
      200,
      "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
      "<NextContinuationToken>t/1=</NextContinuationToken><Contents><Key>a+b</Key>"
      "<Size>3</Size><ETag>\"e\"</ETag></Contents></ListBucketResult>");
  f.http->then_status(
      200,
      "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
      "<Contents><Key>c%2Bd%3De</Key><Size>4</Size></Contents></ListBucketResult>");
  auto objects = f.client->list_objects("b", "", 1);
  ASSERT_EQ(objects.size(), 2u);
  EXPECT_EQ(objects[0].key, "a b");
  EXPECT_EQ(objects[0].size, 3u);
  EXPECT_EQ(objects[1].key, "c+d=e");
  EXPECT_NE(f.http->requests[1].find("continuation-token=t%2F1%3D"), std::string::npos)
      << f.http->requests[1];
}

// Found by fuzz/s3_xml.cpp (fuzz/corpus/s3_xml/regression-size-not-a-number).
TEST(S3Faults, ASizeThatIsNotAByteCountIsRefusedNotReadAsZero) {
  Fixture f;
  f.http->then_status(200,
                      "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>k</Key>"
                      "<Size>105$</Size></Contents></ListBucketResult>");
  std::string m = message_of<ObjectStoreError>([&] { f.client->list_objects("b", "p"); });
  EXPECT_NE(m.find("<Size> '105$' is not a byte count"), std::string::npos) << m;
  f.http->then_status(200, "", {{"content-length", "-1"}});
  m = message_of<ObjectStoreError>([&] { f.client->head_object("b", "k"); });
  EXPECT_NE(m.find("Content-Length '-1' is not a byte count"), std::string::npos) << m;
  f.http->then_status(206, "", {{"content-range", "bytes 0-9/*"}});
  GetOptions range;
  range.length = 10;
  m = message_of<ObjectStoreError>([&] { f.client->get_object("b", "k", range); });
  EXPECT_NE(m.find("Content-Range's total '*' is not a byte count"), std::string::npos) << m;
}

TEST(S3Faults, ControlBytesInS3sErrorAreQuotedSoTheMessageStaysOneLine) {
  Fixture f(1);
  f.http->then_status(400, s3_error("Bad\nCode", "line 1\nline 2"),
                      {{"content-type", "application/xml"}});
  std::string m = message_of<ObjectStoreError>([&] { f.client->get_object("b", "k"); });
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_NE(m.find("line 1\\x0aline 2"), std::string::npos) << m;
  EXPECT_NE(m.find("fix: see S3's error code Bad\\x0aCode"), std::string::npos) << m;
}

}  // namespace
}  // namespace dtrain::objstore
