// Signature V4 against AWS's published examples: the SigV4 test suite's
// get-vanilla cases and the S3 developer guide's signed GET/list examples
// (secret, date and expected signature as published; each was also checked
// against botocore's signer when this test was written).

#include <gtest/gtest.h>

#include "objstore/s3_request.h"
#include "objstore/sigv4.h"

namespace dtrain::objstore {
namespace {

const char* kEmptySha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

Credentials suite_credentials() {
  return {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "", std::nullopt, "test"};
}

Credentials s3_doc_credentials() {
  return {"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "", std::nullopt,
          "test"};
}

TEST(SigV4, GetVanillaFromAwsTestSuiteGivesThePublishedSignature) {
  SignableRequest r{"GET",
                    "/",
                    {},
                    {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}},
                    kEmptySha};
  EXPECT_EQ(
      canonical_request(r),
      "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" +
          std::string(kEmptySha));
  EXPECT_EQ(authorization(r, suite_credentials(), "us-east-1", "service", "20150830T123600Z"),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

// Note [Signing key once a day]: a remembered key signs as a fresh one, and
// a new day, secret or region derives a new one.
TEST(SigV4, ARememberedSigningKeySignsAsAFreshOneAcrossDaysSecretsAndRegions) {
  SignableRequest r{"GET",
                    "/",
                    {},
                    {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}},
                    kEmptySha};
  SigningKeys keys;
  Credentials other = suite_credentials();
  other.secret_access_key = "another-secret";
  const struct {
    Credentials credentials;
    const char* region;
    const char* date;
  } cases[] = {{suite_credentials(), "us-east-1", "20150830T123600Z"},
               {suite_credentials(), "us-east-1", "20150830T123600Z"},
               {suite_credentials(), "us-east-1", "20150831T000000Z"},
               {other, "us-east-1", "20150831T000000Z"},
               {other, "eu-west-2", "20150831T000000Z"},
               {suite_credentials(), "us-east-1", "20150830T123600Z"}};
  for (const auto& c : cases) {
    EXPECT_EQ(authorization(r, c.credentials, c.region, "service", c.date, &keys),
              authorization(r, c.credentials, c.region, "service", c.date))
        << c.region << " " << c.date;
  }
  EXPECT_NE(authorization(r, suite_credentials(), "us-east-1", "service", "20150830T123600Z", &keys)
                .find("Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
            std::string::npos);
}

TEST(SigV4, GetVanillaQueryOrderKeyCaseSortsTheQuery) {
  SignableRequest r{"GET",
                    "/",
                    {{"Param2", "value2"}, {"Param1", "value1"}},
                    {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}},
                    kEmptySha};
  EXPECT_EQ(canonical_query(r.query), "Param1=value1&Param2=value2");
  EXPECT_NE(authorization(r, suite_credentials(), "us-east-1", "service", "20150830T123600Z")
                .find("Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
            std::string::npos);
}

TEST(SigV4, S3GuideGetObjectExampleIsSignedAsPublishedByTheClient) {
  S3Options options;
  options.endpoint = "https://s3.amazonaws.com";
  options.addressing = S3Addressing::kVirtual;
  S3Call call{"GetObject", "GET", "examplebucket", "test.txt", {}, {{"Range", "bytes=0-9"}}};
  auto when = std::chrono::system_clock::from_time_t(1369353600);  // 2013-05-24T00:00:00Z
  HttpRequest request = sign_s3_request(options, call, s3_doc_credentials(), when);
  EXPECT_EQ(request.url, "https://examplebucket.s3.amazonaws.com/test.txt");
  std::string auth;
  for (const auto& [name, value] : request.headers) {
    if (name == "Authorization") auth = value;
  }
  EXPECT_EQ(auth,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4, S3GuideListObjectsExampleGivesThePublishedSignature) {
  SignableRequest r{"GET",
                    "/",
                    {{"prefix", "J"}, {"max-keys", "2"}},
                    {{"Host", "examplebucket.s3.amazonaws.com"},
                     {"x-amz-date", "20130524T000000Z"},
                     {"x-amz-content-sha256", kEmptySha}},
                    kEmptySha};
  EXPECT_NE(authorization(r, s3_doc_credentials(), "us-east-1", "s3", "20130524T000000Z")
                .find("Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"),
            std::string::npos);
}

TEST(SigV4, UriEncodingKeepsOnlyUnreservedCharactersAndSlashesInKeys) {
  EXPECT_EQ(uri_encode("a b+c=d/e:f~g_h-i.j", true), "a%20b%2Bc%3Dd/e%3Af~g_h-i.j");
  EXPECT_EQ(uri_encode("a/b", false), "a%2Fb");
  EXPECT_EQ(uri_encode("\xc3\xa9", true), "%C3%A9");
  EXPECT_EQ(uri_decode("a%20b%2Fc%C3%A9+"), "a b/c\xc3\xa9+");
  EXPECT_EQ(uri_decode("a+b%2Bc", true), "a b+c");
}

TEST(SigV4, CanonicalQuerySortsByEncodedKeyThenValueAndEncodesEmptyValues) {
  EXPECT_EQ(canonical_query({{"uploads", ""}, {"b", "2"}, {"b", "1"}, {"a=b", "x/y:z"}}),
            "a%3Db=x%2Fy%3Az&b=1&b=2&uploads=");
}

TEST(SigV4, HeaderValuesAreTrimmedAndTheirInnerSpacesCollapsed) {
  SignableRequest r{"GET", "/", {}, {{"X-Odd", "  a   b  "}, {"host", "h"}}, kEmptySha};
  EXPECT_NE(canonical_request(r).find("x-odd:a b\n"), std::string::npos);
  EXPECT_EQ(signed_headers(r), "host;x-odd");
}

TEST(SigV4, ContentMd5IsTheBase64OfTheDigest) {
  EXPECT_EQ(md5_base64("hello"), "XUFAKrxLKna5cZ2REBfFkg==");
  EXPECT_EQ(sha256_hex(""), kEmptySha);
}

TEST(S3Addressing, CustomEndpointsArePathStyleAndAwsIsVirtualHosted) {
  Credentials c = s3_doc_credentials();
  auto now = std::chrono::system_clock::now();
  S3Options aws;
  aws.region = "eu-west-1";
  S3Call call{"GetObject", "GET", "bucket", "dir/a b", {}};
  EXPECT_EQ(sign_s3_request(aws, call, c, now).url,
            "https://bucket.s3.eu-west-1.amazonaws.com/dir/a%20b");
  S3Options minio;
  minio.endpoint = "http://127.0.0.1:9000/";
  EXPECT_EQ(sign_s3_request(minio, call, c, now).url, "http://127.0.0.1:9000/bucket/dir/a%20b");
  minio.addressing = S3Addressing::kVirtual;
  EXPECT_EQ(sign_s3_request(minio, call, c, now).url, "http://bucket.127.0.0.1:9000/dir/a%20b");
  S3Options https_default_port;
  https_default_port.endpoint = "https://minio.example:443";
  EXPECT_EQ(sign_s3_request(https_default_port, call, c, now).url,
            "https://minio.example/bucket/dir/a%20b");
}

TEST(S3Addressing, SessionTokenIsSentAndSigned) {
  Credentials c = s3_doc_credentials();
  c.session_token = "tok/en+=";
  S3Options options;
  HttpRequest r = sign_s3_request(options, {"HeadObject", "HEAD", "b", "k"}, c,
                                  std::chrono::system_clock::now());
  bool token = false;
  std::string auth;
  for (const auto& [name, value] : r.headers) {
    token |= name == "x-amz-security-token" && value == "tok/en+=";
    if (name == "Authorization") auth = value;
  }
  EXPECT_TRUE(token);
  EXPECT_NE(auth.find("x-amz-security-token"), std::string::npos);
}

}  // namespace
}  // namespace dtrain::objstore
