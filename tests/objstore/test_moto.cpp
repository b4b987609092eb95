// dtrain against a real S3 API on loopback: moto's server, checking SigV4
// against an IAM user's key (INITIAL_NO_AUTH_ACTION_COUNT), with boto3 as
// the independent client on the other side of every check.

#include <gtest/gtest.h>

#include <random>

#include "dtrain/object_store.h"
#include "objstore/sigv4.h"
#include "peer.h"

namespace dtrain {
namespace {

using nlohmann::json;

class MotoS3 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string venv = testing::s3_test_venv();
    if (!venv.empty()) moto_ = std::make_unique<testing::MotoServer>(venv);
  }
  static void TearDownTestSuite() { moto_.reset(); }

  void SetUp() override {
    if (!moto_) GTEST_SKIP() << testing::kNoVenv;
    ASSERT_TRUE(moto_->failure.empty()) << moto_->failure;
  }

  S3Options options(const std::string& secret = "") const {
    S3Options o;
    o.endpoint = moto_->endpoint;
    o.credentials = static_credentials({moto_->key, secret.empty() ? moto_->secret : secret, "",
                                        std::nullopt, "the test's IAM user"});
    o.max_attempts = 2;
    o.base_backoff = std::chrono::milliseconds(10);
    o.multipart_threshold = 8 << 20;
    o.part_size = 5 << 20;
    return o;
  }

  json peer(const std::string& command, const std::string& bucket, const std::string& rest = "",
            const json& input = nullptr) const {
    return moto_->peer(command, bucket,
                       rest.empty() ? std::vector<std::string>{} : std::vector<std::string>{rest},
                       input);
  }

  static std::string body_of(const std::string& key, size_t size) {
    std::string out;
    while (out.size() < size) out += key + "|";
    out.resize(size);
    return out;
  }
  static std::string to_hex(const std::string& bytes) { return objstore::hex(bytes); }

  static inline std::unique_ptr<testing::MotoServer> moto_;
};

const std::vector<std::string> kTrickyKeys = {
    "data/a=b.bin",        "data/c+d.bin",
    "data/with space.bin", "data/\xc3\xbc/\xc3\xa9t\xc3\xa9.bin",
    "data/x:y.bin",        "data/deep/n/k~1.bin",
    "data/empty.bin",      "data/%25literal.bin",
};

TEST_F(MotoS3, ObjectsUploadedByBoto3AreListedPageByPageAndReadByDtrain) {
  json uploads = json::object();
  std::vector<std::string> keys = kTrickyKeys;
  for (int i = 0; i < 23; ++i) keys.push_back("data/n/" + std::to_string(1000 + i));
  for (const auto& key : keys) {
    uploads[key] = to_hex(body_of(key, key == "data/empty.bin" ? 0 : 100 + key.size() * 37));
  }
  uploads["other/not-listed"] = "00";
  peer("put", "listing", "", uploads);

  S3Client s3(options());
  auto listed = s3.list_objects("listing", "data/", 4);  // 8 pages of 4
  std::vector<std::string> names;
  for (const auto& o : listed) names.push_back(o.key);
  json boto_keys = peer("list", "listing", "data/");
  EXPECT_EQ(names, boto_keys.get<std::vector<std::string>>());
  ASSERT_EQ(listed.size(), keys.size());
  for (const auto& object : listed) {
    const std::string expected =
        body_of(object.key, object.key == "data/empty.bin" ? 0 : 100 + object.key.size() * 37);
    EXPECT_EQ(object.size, expected.size()) << object.key;
    GetResult whole = s3.get_object("listing", object.key);
    EXPECT_EQ(whole.data, expected) << object.key;
    EXPECT_EQ(whole.etag, object.etag) << object.key;
    EXPECT_EQ(s3.head_object("listing", object.key).size, expected.size());
    if (expected.size() > 20) {
      GetOptions range;
      range.offset = 7;
      range.length = 13;
      GetResult part = s3.get_object("listing", object.key, range);
      EXPECT_EQ(part.data, expected.substr(7, 13)) << object.key;
      EXPECT_EQ(part.object_size, expected.size());
    }
  }
  // Delimiter: the "folders" under data/.
  ListPage page = s3.list_objects_page("listing", "data/", "", 1000, "/");
  EXPECT_EQ(page.common_prefixes,
            (std::vector<std::string>{"data/deep/", "data/n/", "data/\xc3\xbc/"}));
}

TEST_F(MotoS3, ObjectsDtrainWritesAreReadBackByBoto3ByteForByte) {
  peer("put", "written", "", json::object());
  S3Client s3(options());
  std::mt19937 rng(7);
  std::string small(3000, '\0');
  for (auto& c : small) c = static_cast<char>(rng());
  std::string big((12 << 20) + 12345, '\0');  // 3 parts of 5 MiB, the last shorter
  for (auto& c : big) c = static_cast<char>(rng());
  PutResult one = s3.put_object("written", "ckpt/small=1 +.bin", small);
  EXPECT_EQ(one.parts, 0);
  PutResult many = s3.put_object("written", "ckpt/big \xc3\xa9.bin", big);
  EXPECT_EQ(many.parts, 3);
  json a = peer("get", "written", "ckpt/small=1 +.bin");
  EXPECT_EQ(a["size"], small.size());
  EXPECT_EQ(a["sha256"], objstore::sha256_hex(small));
  json b = peer("get", "written", "ckpt/big \xc3\xa9.bin");
  EXPECT_EQ(b["size"], big.size());
  EXPECT_EQ(b["sha256"], objstore::sha256_hex(big));
  EXPECT_EQ(b["etag"], many.etag);
  // What a checkpoint save compares with when its own upload's answer was lost.
  EXPECT_EQ(many.etag, put_object_etag(big, s3.options()));
  EXPECT_EQ(one.etag, put_object_etag(small, s3.options()));
  EXPECT_EQ(peer("uploads", "written"), 0);  // nothing left unfinished
  s3.delete_object("written", "ckpt/small=1 +.bin");
  EXPECT_THROW(s3.head_object("written", "ckpt/small=1 +.bin"), ObjectNotFoundError);
}

TEST_F(MotoS3, AConditionalPutNeverReplacesAnExistingObject) {
  peer("put", "conditional", "", json::object());
  S3Client s3(options());
  PutOptions once;
  once.if_none_match = true;
  s3.put_object("conditional", "ckpt/epoch-1", "first", once);
  try {
    s3.put_object("conditional", "ckpt/epoch-1", "second", once);
    FAIL() << "the second put replaced the object";
  } catch (const PreconditionFailedError& e) {
    EXPECT_NE(std::string(e.what()).find("HTTP 412"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s3.get_object("conditional", "ckpt/epoch-1").data, "first");
}

TEST_F(MotoS3, AnObjectReplacedBetweenReadsIsDetectedByItsETag) {
  peer("put", "replaced", "", json{{"shard-0", to_hex("version one")}});
  S3Client s3(options());
  GetResult first = s3.get_object("replaced", "shard-0");
  peer("put", "replaced", "", json{{"shard-0", to_hex("version two!")}});
  GetOptions pinned;
  pinned.if_match = first.etag;
  pinned.offset = 2;
  try {
    s3.get_object("replaced", "shard-0", pinned);
    FAIL() << "the replaced object was read";
  } catch (const PreconditionFailedError& e) {
    EXPECT_NE(std::string(e.what()).find("s3://replaced/shard-0"), std::string::npos) << e.what();
  }
}

TEST_F(MotoS3, AWrongSecretEndsWithOneLineNamingBucketKeyStatusAndFix) {
  peer("put", "secured", "", json{{"k", "00"}});
  S3Client s3(options("not-the-secret"));
  try {
    s3.get_object("secured", "k");
    FAIL() << "moto accepted a wrong secret";
  } catch (const AccessDeniedError& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.status, 403);
    EXPECT_NE(m.find("S3 GetObject s3://secured/k: HTTP 403"), std::string::npos) << m;
    EXPECT_NE(m.find("fix:"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST_F(MotoS3, MissingBucketsAndKeysAreNamed) {
  peer("put", "present", "", json::object());
  S3Client s3(options());
  try {
    s3.get_object("present", "no/such/key");
    FAIL();
  } catch (const ObjectNotFoundError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "HTTP 404 NoSuchKey: no object 'no/such/key' in bucket 'present'"),
              std::string::npos)
        << e.what();
  }
  try {
    s3.list_objects("absent-bucket", "x/");
    FAIL();
  } catch (const ObjectNotFoundError& e) {
    EXPECT_NE(std::string(e.what()).find("HTTP 404 NoSuchBucket: no bucket 'absent-bucket'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(s3.list_objects("present", "nothing/here/").empty());
}

}  // namespace
}  // namespace dtrain
