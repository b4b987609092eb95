// Faults between dtrain and a real S3 API: tests/objstore/fault_proxy.py
// forwards every request unchanged to moto's server (which checks SigV4) and
// injects the faults a test scripts (503 SlowDown, resets, stalls, truncated
// bodies, wrong-region answers, an object replaced between two reads). Over
// the real libcurl transport: each transient fault is retried and the read
// returns the bytes boto3 uploaded, the attempts counted in the proxy's log;
// a fault on every attempt ends after max_attempts, within a time the
// options bound, with one line; a wrong region and a replaced object end at
// once.

#include <gtest/gtest.h>

#include <random>

#include "dtrain/object_store.h"
#include "objstore/sigv4.h"
#include "peer.h"

namespace dtrain {
namespace {

using nlohmann::json;
using testing::FaultProxy;
using Clock = std::chrono::steady_clock;

long long ms(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

/// The fault each logged request got, in order ("none": forwarded as it was).
std::vector<std::string> faults_of(const std::vector<json>& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) out.push_back(e["fault"].is_null() ? "none" : e["fault"]);
  return out;
}

class S3FaultProxy : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (moto_) return;
    const std::string venv = testing::s3_test_venv();
    if (!venv.empty()) moto_ = std::make_unique<testing::MotoServer>(venv);
  }
  static void TearDownTestSuite() { moto_.reset(); }

  void SetUp() override {
    if (!moto_) GTEST_SKIP() << testing::kNoVenv;
    ASSERT_TRUE(moto_->failure.empty()) << moto_->failure;
  }

  /// Small bounds, so that every fault costs about a second at most.
  static S3Options options(const FaultProxy& proxy) {
    S3Options o;
    o.endpoint = proxy.endpoint();
    o.credentials =
        static_credentials({moto_->key, moto_->secret, "", std::nullopt, "the test's IAM user"});
    o.request_timeout = std::chrono::milliseconds(1000);
    o.connect_timeout = std::chrono::milliseconds(2000);
    o.max_attempts = 3;
    o.base_backoff = std::chrono::milliseconds(50);
    o.max_backoff = std::chrono::milliseconds(200);
    return o;
  }

  /// The most `attempts` attempts may take: each ends within request_timeout
  /// of its last byte (checked about once a second), with at most
  /// max_backoff between them; 2 s more for the proxy and moto.
  static Clock::duration bound(const S3Options& o, int attempts) {
    return attempts * (o.request_timeout + std::chrono::seconds(1)) +
           (attempts - 1) * o.max_backoff + std::chrono::seconds(2);
  }

  /// `size` pseudo-random bytes uploaded by boto3 to `bucket`/`key`.
  static std::string upload(const std::string& bucket, const std::string& key, size_t size) {
    std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(bucket + key)));
    std::string body(size, '\0');
    for (auto& c : body) c = static_cast<char>(rng());
    moto_->peer("put", bucket, {}, json{{key, objstore::hex(body)}});
    return body;
  }

  static json boto3_get(const std::string& bucket, const std::string& key) {
    return moto_->peer("get", bucket, {key});
  }

  static inline std::unique_ptr<testing::MotoServer> moto_;
};

/// A bucket name for a fault ("reset_mid_body" -> "proxy-reset-mid-body").
std::string bucket_for(std::string fault) {
  for (auto& c : fault) c = c == '_' ? '-' : c;
  return "proxy-" + fault;
}

// ---- transient faults: retried, the right bytes -------------------------------

class S3FaultProxyTransient : public S3FaultProxy,
                              public ::testing::WithParamInterface<std::string> {};

TEST_P(S3FaultProxyTransient, IsRetriedAndTheReadsReturnTheBytesBoto3Uploaded) {
  const std::string fault = GetParam();
  const std::string bucket = bucket_for(fault), key = "shards/shard-0.tar";
  const std::string body = upload(bucket, key, 48 << 10);
  // The whole object's first two attempts, and the ranged read's first.
  FaultProxy proxy(*moto_, json::array({{{"op", "GetObject"},
                                         {"key", "shards/*"},
                                         {"on", {1, 2, 4}},
                                         {"fault", fault},
                                         {"seconds", 30}}}));
  ASSERT_NE(proxy.port(), 0) << "fault_proxy.py did not start";
  S3Client s3(options(proxy));

  const auto start = Clock::now();
  GetResult whole = s3.get_object(bucket, key);
  const auto took = Clock::now() - start;
  EXPECT_EQ(whole.data, body);
  json theirs = boto3_get(bucket, key);
  EXPECT_EQ(sha256_hex(whole.data), theirs["sha256"]);
  EXPECT_EQ(whole.etag, theirs["etag"]);
  auto seen = proxy.requests("GetObject", key);
  EXPECT_EQ(faults_of(seen), (std::vector<std::string>{fault, fault, "none"}));
  EXPECT_EQ(seen.back()["status"], 200);
  EXPECT_LT(took, bound(s3.options(), 3)) << ms(took) << " ms";

  // A ranged read pinned to the ETag, as the data loader makes: one retry.
  GetOptions range;
  range.offset = 1000;
  range.length = 20000;
  range.if_match = whole.etag;
  GetResult part = s3.get_object(bucket, key, range);
  EXPECT_EQ(part.data, body.substr(1000, 20000));
  EXPECT_EQ(part.object_size, body.size());
  seen = proxy.requests("GetObject", key);
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[3]["fault"], fault);
  EXPECT_EQ(seen[4]["fault"], nullptr);
  EXPECT_EQ(seen[4]["status"], 206);
  EXPECT_EQ(seen[4]["range"], "bytes=1000-20999");
  EXPECT_EQ(seen[4]["if_match"], whole.etag);
}

INSTANTIATE_TEST_SUITE_P(Faults, S3FaultProxyTransient,
                         ::testing::Values("slowdown", "reset", "reset_mid_body", "stall",
                                           "stall_mid_body", "truncate"),
                         [](const auto& info) { return info.param; });

// ---- the bounds: a fault on every attempt --------------------------------------

struct Exhausted {
  std::string fault;
  /// How the one-line error goes on after "S3 GetObject s3://bucket/key: ".
  std::string says;
  /// The cause it names further on (libcurl's words, or the idle deadline).
  std::string cause;
};

void PrintTo(const Exhausted& e, std::ostream* os) { *os << e.fault; }

class S3FaultProxyExhausted : public S3FaultProxy,
                              public ::testing::WithParamInterface<Exhausted> {};

TEST_P(S3FaultProxyExhausted, EndsAfterMaxAttemptsWithOneLineWithinTheOptionsBound) {
  const std::string fault = GetParam().fault;
  const std::string bucket = bucket_for(fault), key = "shards/shard-1.tar";
  upload(bucket, key, 48 << 10);
  FaultProxy proxy(*moto_, json::array({{{"op", "GetObject"}, {"fault", fault}}}));
  ASSERT_NE(proxy.port(), 0) << "fault_proxy.py did not start";
  S3Client s3(options(proxy));
  const auto start = Clock::now();
  try {
    s3.get_object(bucket, key);
    FAIL() << "a read answered " << fault << " on every attempt succeeded";
  } catch (const ObjectStoreError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("S3 GetObject s3://" + bucket + "/" + key + ": " + GetParam().says, 0), 0u)
        << m;
    EXPECT_NE(m.find(GetParam().cause), std::string::npos) << m;
    EXPECT_NE(m.find("; fix: "), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_EQ(e.bucket, bucket);
    EXPECT_EQ(e.key, key);
  }
  const auto took = Clock::now() - start;
  EXPECT_LT(took, bound(s3.options(), 3)) << ms(took) << " ms";
  if (fault == "stall") {
    EXPECT_GE(took, 3 * s3.options().request_timeout) << ms(took) << " ms";
  }
  EXPECT_EQ(faults_of(proxy.requests("GetObject", key)),
            (std::vector<std::string>{fault, fault, fault}));
}

INSTANTIATE_TEST_SUITE_P(
    Faults, S3FaultProxyExhausted,
    ::testing::Values(
        Exhausted{"slowdown", "HTTP 503 SlowDown after 3 attempts",
                  "; fix: the store is overloaded"},
        Exhausted{"reset", "no answer after 3 attempts (", ": Recv failure: Connection reset"},
        Exhausted{"reset_mid_body", "no answer after 3 attempts (",
                  ": Recv failure: Connection reset"},
        Exhausted{"stall",
                  "no answer after 3 attempts (timed out: ", ": no byte moved for 1000 ms)"},
        Exhausted{"stall_mid_body",
                  "no answer after 3 attempts (timed out: ", ": no byte moved for 1000 ms)"},
        Exhausted{"truncate", "no answer after 3 attempts (",
                  ": transfer closed with 24576 bytes remaining to read)"}),
    [](const auto& info) { return info.param.fault; });

// ---- answers that end at once ------------------------------------------------

TEST_F(S3FaultProxy, AWrongRegionRedirectEndsAtOnceNamingTheRegionAndTheFix) {
  const std::string bucket = "proxy-redirect", key = "shards/shard-2.tar";
  upload(bucket, key, 100);
  FaultProxy proxy(*moto_, json::array({{{"fault", "redirect"}, {"region", "eu-west-2"}}}));
  ASSERT_NE(proxy.port(), 0) << "fault_proxy.py did not start";
  S3Client s3(options(proxy));
  try {
    s3.get_object(bucket, key);
    FAIL() << "a 301 was read as the object";
  } catch (const WrongRegionError& e) {
    EXPECT_EQ(e.region, "eu-west-2");
    EXPECT_EQ(std::string(e.what()),
              "S3 GetObject s3://proxy-redirect/shards/shard-2.tar: HTTP 301 PermanentRedirect: "
              "bucket 'proxy-redirect' is in region eu-west-2, not us-east-1; fix: set "
              "AWS_REGION=eu-west-2");
  }
  try {
    s3.head_object(bucket, key);  // a HEAD's 301 has no body: the header says
    FAIL() << "a 301 was read as the object's size";
  } catch (const WrongRegionError& e) {
    EXPECT_EQ(std::string(e.what()),
              "S3 HeadObject s3://proxy-redirect/shards/shard-2.tar: HTTP 301: bucket "
              "'proxy-redirect' is in region eu-west-2, not us-east-1; fix: set "
              "AWS_REGION=eu-west-2");
  }
  EXPECT_EQ(proxy.requests("GetObject", key).size(), 1u);  // not retried
  EXPECT_EQ(proxy.requests("HeadObject", key).size(), 1u);
}

TEST_F(S3FaultProxy, ARequestSignedForTheWrongRegionEndsAtOnceNamingTheRegionAndTheFix) {
  const std::string bucket = "proxy-wrong-region", key = "data/train/a.jpg";
  upload(bucket, key, 100);
  FaultProxy proxy(*moto_, json::array({{{"fault", "wrong_region"}, {"region", "ap-south-1"}}}));
  ASSERT_NE(proxy.port(), 0) << "fault_proxy.py did not start";
  S3Client s3(options(proxy));
  try {
    s3.list_objects(bucket, "data/train/");
    FAIL() << "a 400 AuthorizationHeaderMalformed was read as a listing";
  } catch (const WrongRegionError& e) {
    EXPECT_EQ(e.region, "ap-south-1");
    EXPECT_EQ(std::string(e.what()),
              "S3 ListObjectsV2 s3://proxy-wrong-region: HTTP 400 AuthorizationHeaderMalformed: "
              "bucket 'proxy-wrong-region' is in region ap-south-1, not us-east-1; fix: set "
              "AWS_REGION=ap-south-1");
  }
  EXPECT_EQ(proxy.requests("ListObjectsV2", "data/train/").size(), 1u);  // not retried
}

TEST_F(S3FaultProxy, ARegionNamedOnlyInTheErrorBodyIsTheRegionToSet) {
  const std::string bucket = "proxy-region-body", key = "shards/shard-4.tar";
  upload(bucket, key, 100);
  // AuthorizationHeaderMalformed's <Region>, without x-amz-bucket-region.
  FaultProxy proxy(
      *moto_,
      json::array(
          {{{"fault", "wrong_region"}, {"region", "eu-central-1"}, {"region_header", false}}}));
  ASSERT_NE(proxy.port(), 0) << "fault_proxy.py did not start";
  S3Client s3(options(proxy));
  try {
    s3.get_object(bucket, key);
    FAIL() << "a 400 AuthorizationHeaderMalformed was read as the object";
  } catch (const WrongRegionError& e) {
    EXPECT_EQ(e.region, "eu-central-1");
    EXPECT_EQ(std::string(e.what()),
              "S3 GetObject s3://proxy-region-body/shards/shard-4.tar: HTTP 400 "
              "AuthorizationHeaderMalformed: bucket 'proxy-region-body' is in region "
              "eu-central-1, not us-east-1; fix: set AWS_REGION=eu-central-1");
  }
  EXPECT_EQ(proxy.requests("GetObject", key).size(), 1u);  // not retried
}

TEST_F(S3FaultProxy, AnObjectReplacedBetweenTwoRangedReadsFailsWithPreconditionFailed) {
  const std::string bucket = "proxy-replace", key = "shards/shard-3.tar";
  const std::string body = upload(bucket, key, 64 << 10);
  // Before the second GET reaches moto, the proxy rewrites the object.
  FaultProxy proxy(*moto_, json::array({{{"op", "GetObject"}, {"on", {2}}, {"fault", "replace"}}}));
  ASSERT_NE(proxy.port(), 0) << "fault_proxy.py did not start";
  S3Client s3(options(proxy));
  const ObjectInfo listed = s3.list_objects(bucket, "shards/").at(0);
  GetOptions first;
  first.length = 32 << 10;
  first.if_match = listed.etag;
  EXPECT_EQ(s3.get_object(bucket, key, first).data, body.substr(0, 32 << 10));
  GetOptions second = first;
  second.offset = 32 << 10;
  try {
    s3.get_object(bucket, key, second);
    FAIL() << "the second half of a replaced object was read";
  } catch (const PreconditionFailedError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("S3 GetObject s3://proxy-replace/shards/shard-3.tar: HTTP 412", 0), 0u) << m;
    EXPECT_NE(m.find("replaced"), std::string::npos) << m;
  }
  auto seen = proxy.requests("GetObject", key);
  EXPECT_EQ(faults_of(seen), (std::vector<std::string>{"none", "replace"}));  // not retried
  EXPECT_EQ(seen.back()["status"], 412);
  // The object is boto3's new one, every byte inverted.
  std::string inverted = body;
  for (auto& c : inverted) c = static_cast<char>(~c);
  EXPECT_EQ(boto3_get(bucket, key)["sha256"], sha256_hex(inverted));
  EXPECT_NE(boto3_get(bucket, key)["etag"], listed.etag);
}

// ---- other operations --------------------------------------------------------

TEST_F(S3FaultProxy, AConditionalPutWhoseAnswerWasLostIsRetriedAndFindsItsOwnObject) {
  const std::string bucket = "proxy-put", key = "ckpt/checkpoint-00000100.pt";
  upload(bucket, "other", 1);  // makes the bucket
  // moto stores the first attempt; its answer never reaches the client, whose
  // retry meets If-None-Match's 412, and the HEAD shows the object is ours.
  FaultProxy proxy(*moto_,
                   json::array({{{"op", "PutObject"}, {"on", {1}}, {"fault", "lose_answer"}}}));
  ASSERT_NE(proxy.port(), 0) << "fault_proxy.py did not start";
  S3Client s3(options(proxy));
  const std::string body(100000, 'c');
  PutOptions once;
  once.if_none_match = true;
  PutResult put = s3.put_object(bucket, key, body, once);
  EXPECT_EQ(put.etag, single_part_etag(body));
  auto seen = proxy.requests("PutObject", key);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0]["fault"], "lose_answer");
  EXPECT_EQ(seen[1]["status"], 412);
  EXPECT_EQ(proxy.requests("HeadObject", key).size(), 1u);
  EXPECT_EQ(boto3_get(bucket, key)["sha256"], sha256_hex(body));
  // Another body at the key is still refused.
  EXPECT_THROW(s3.put_object(bucket, key, "another", once), PreconditionFailedError);
}

TEST_F(S3FaultProxy, ASlowDownOnAListingPageIsRetriedAndTheListingIsWhole) {
  const std::string bucket = "proxy-list";
  json uploads = json::object();
  for (int i = 0; i < 10; ++i) uploads["train/" + std::to_string(100 + i)] = "00";
  moto_->peer("put", bucket, {}, uploads);
  FaultProxy proxy(*moto_,
                   json::array({{{"op", "ListObjectsV2"}, {"on", {2, 3}}, {"fault", "slowdown"}}}));
  ASSERT_NE(proxy.port(), 0) << "fault_proxy.py did not start";
  S3Client s3(options(proxy));
  auto listed = s3.list_objects(bucket, "train/", 4);  // pages of 4, 4, 2
  ASSERT_EQ(listed.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(listed[i].key, "train/" + std::to_string(100 + i));
  EXPECT_EQ(faults_of(proxy.requests("ListObjectsV2", "train/")),
            (std::vector<std::string>{"none", "slowdown", "slowdown", "none", "none"}));
}

TEST_F(S3FaultProxy, AMultipartUploadWhosePartAndCompleteAnswersWereLostIsStoredWhole) {
  const std::string bucket = "proxy-multipart", key = "ckpt/checkpoint-00000200.pt";
  upload(bucket, "other", 1);  // makes the bucket
  // moto acts on each request whose answer the proxy drops: the part is
  // stored twice (the same bytes), the Complete's retry finds the upload
  // completed (moto answers it 200 again).
  FaultProxy proxy(
      *moto_,
      json::array({{{"op", "UploadPart"}, {"on", {2}}, {"fault", "lose_answer"}},
                   {{"op", "CompleteMultipartUpload"}, {"on", {1}}, {"fault", "lose_answer"}}}));
  ASSERT_NE(proxy.port(), 0) << "fault_proxy.py did not start";
  S3Options o = options(proxy);
  o.multipart_threshold = 6 << 20;
  o.part_size = 5 << 20;
  S3Client s3(o);
  std::string body((11 << 20) + 7, '\0');  // 3 parts
  std::mt19937 rng(11);
  for (auto& c : body) c = static_cast<char>(rng());
  PutOptions once;
  once.if_none_match = true;
  PutResult put = s3.put_object(bucket, key, body, once);
  EXPECT_EQ(put.parts, 3);
  EXPECT_EQ(put.etag, put_object_etag(body, o));
  EXPECT_EQ(faults_of(proxy.requests("UploadPart", key)),
            (std::vector<std::string>{"none", "lose_answer", "none", "none"}));
  EXPECT_EQ(faults_of(proxy.requests("CompleteMultipartUpload", key)),
            (std::vector<std::string>{"lose_answer", "none"}));
  json theirs = boto3_get(bucket, key);
  EXPECT_EQ(theirs["sha256"], sha256_hex(body));
  EXPECT_EQ(theirs["etag"], put.etag);
  EXPECT_EQ(moto_->peer("uploads", bucket), 0);  // nothing left unfinished
}

}  // namespace
}  // namespace dtrain
