// dtrain's requests against botocore's: the same S3 calls (keys with '=',
// '+', spaces, ':', UTF-8; ListObjectsV2 with prefixes and continuation
// tokens; ranges; conditional puts; session tokens; both addressing styles)
// built and signed by botocore at a fixed date (tests/objstore/s3_peer.py
// sign) and by dtrain's client through a capturing transport at the same
// date: URL, Authorization and every signed header must agree.

#include <gtest/gtest.h>

#include <algorithm>

#include "objstore/s3_request.h"
#include "peer.h"

namespace dtrain::objstore {
namespace {

using nlohmann::json;

bool has_range(const HttpRequest& request) {
  for (const auto& header : request.headers) {
    if (header.first == "Range") return true;
  }
  return false;
}

// Records the last request and answers what the operation expects.
class Capture : public HttpTransport {
 public:
  HttpResponse perform(const HttpRequest& request) override {
    last = request;
    body_copy = std::string(request.body);
    HttpResponse r{200, {{"etag", "\"e\""}, {"content-length", "10"}}, std::string(10, 'x')};
    if (request.url.find("list-type=2") != std::string::npos) {
      r.body = "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>";
    } else if (request.method == "GET" && has_range(request)) {
      r.status = 206;
      r.headers["content-range"] = "bytes 5-14/100";
      r.body = std::string(10, 'x');
    }
    return r;
  }
  HttpRequest last;
  std::string body_copy;
};

// "path?b=2&a=1" -> "path?a=1&b=2": botocore keeps its parameter order,
// dtrain sends the canonical (sorted) one; the server sees the same set.
std::string sorted_url(const std::string& url) {
  auto q = url.find('?');
  if (q == std::string::npos) return url;
  std::vector<std::string> items;
  std::string rest = url.substr(q + 1);
  size_t start = 0;
  while (start <= rest.size()) {
    size_t amp = rest.find('&', start);
    if (amp == std::string::npos) amp = rest.size();
    std::string item = rest.substr(start, amp - start);
    if (item.find('=') == std::string::npos) item += "=";
    items.push_back(item);
    start = amp + 1;
  }
  std::sort(items.begin(), items.end());
  std::string out = url.substr(0, q + 1);
  for (size_t i = 0; i < items.size(); ++i) out += (i ? "&" : "") + items[i];
  return out;
}

struct Case {
  std::string name;
  json botocore;                          // op, params, endpoint, addressing, ...
  std::function<void(S3Client&)> dtrain;  // the same call through dtrain
  S3Options options;
};

TEST(BotocoreSignatures, DtrainSignsEveryRequestExactlyAsBotocoreDoes) {
  const std::string venv = testing::s3_test_venv();
  if (venv.empty()) GTEST_SKIP() << testing::kNoVenv;
  const std::string date = "20261125T120000Z";
  const auto when = std::chrono::system_clock::from_time_t(1795608000);  // that date
  Credentials plain{"AKIAEXAMPLEKEY01", "wJalr/XUtn+FEMI=K7MDENG", "", std::nullopt, "test"};
  Credentials temporary = plain;
  temporary.session_token = "FQoGZXIvYXdz/abc+def==";

  S3Options local;
  local.endpoint = "http://127.0.0.1:9000";
  S3Options aws;
  aws.region = "eu-central-1";
  aws.addressing = S3Addressing::kVirtual;

  const std::string tricky = "dir/k=1+2 \xc3\xa9t\xc3\xa9/x:y~z.bin";
  std::vector<Case> cases = {
      {"list with prefix and continuation token",
       {{"op", "list_objects_v2"},
        {"params",
         {{"Bucket", "bkt"},
          {"Prefix", "a b/\xc3\xa9=+:"},
          {"ContinuationToken", "1/abc+=:x y"},
          {"MaxKeys", 7}}}},
       [](S3Client& c) { c.list_objects_page("bkt", "a b/\xc3\xa9=+:", "1/abc+=:x y", 7); },
       local},
      {"list with a delimiter and no prefix",
       {{"op", "list_objects_v2"},
        {"params", {{"Bucket", "bkt"}, {"Delimiter", "/"}, {"MaxKeys", 1000}}}},
       [](S3Client& c) { c.list_objects_page("bkt", "", "", 1000, "/"); },
       local},
      {"ranged get of a key with = + space : and UTF-8",
       {{"op", "get_object"},
        {"params", {{"Bucket", "bkt"}, {"Key", tricky}, {"Range", "bytes=5-14"}}}},
       [tricky](S3Client& c) {
         GetOptions o;
         o.offset = 5;
         o.length = 10;
         c.get_object("bkt", tricky, o);
       },
       local},
      {"get pinned to an ETag",
       {{"op", "get_object"},
        {"params", {{"Bucket", "bkt"}, {"Key", "a/b"}, {"IfMatch", "\"e\""}}}},
       [](S3Client& c) {
         GetOptions o;
         o.if_match = "\"e\"";
         c.get_object("bkt", "a/b", o);
       },
       local},
      {"head",
       {{"op", "head_object"}, {"params", {{"Bucket", "bkt"}, {"Key", "with space/\xc3\xbc.jpg"}}}},
       [](S3Client& c) { c.head_object("bkt", "with space/\xc3\xbc.jpg"); },
       local},
      {"conditional put with Content-MD5",
       {{"op", "put_object"},
        {"params",
         {{"Bucket", "bkt"},
          {"Key", "a=b+c d.bin"},
          {"Body", "68656c6c6f"},
          {"ContentType", "application/octet-stream"},
          {"ContentMD5", "XUFAKrxLKna5cZ2REBfFkg=="},
          {"IfNoneMatch", "*"}}}},
       [](S3Client& c) {
         PutOptions o;
         o.if_none_match = true;
         c.put_object("bkt", "a=b+c d.bin", "hello", o);
       },
       local},
      {"virtual-hosted get on AWS with a session token",
       {{"op", "get_object"},
        {"params", {{"Bucket", "my-bucket"}, {"Key", "train/0001.tar"}}},
        {"addressing", "virtual"},
        {"region", "eu-central-1"},
        {"token", temporary.session_token}},
       [](S3Client& c) { c.get_object("my-bucket", "train/0001.tar"); },
       aws},
  };

  json requests = json::array();
  for (const auto& c : cases) {
    json r = c.botocore;
    r["date"] = date;
    r["access_key"] = plain.access_key_id;
    r["secret"] = plain.secret_access_key;
    if (!c.options.endpoint.empty()) r["endpoint"] = c.options.endpoint;
    requests.push_back(r);
  }
  json expected = testing::run_peer(venv, "sign", requests);
  ASSERT_EQ(expected.size(), cases.size());

  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    auto capture = std::make_shared<Capture>();
    S3Options options = cases[i].options;
    options.credentials =
        static_credentials(cases[i].botocore.contains("token") ? temporary : plain);
    // The client signs at the fixed date too.
    auto client = make_s3_client(options, capture, [when] { return when; });
    cases[i].dtrain(*client);
    std::map<std::string, std::string> headers;
    for (const auto& [name, value] : capture->last.headers) {
      std::string lower = name;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      headers[lower] = value;
    }
    EXPECT_EQ(sorted_url(capture->last.url), sorted_url(expected[i]["url"]));
    EXPECT_EQ(headers["authorization"], expected[i]["authorization"]);
    for (const auto& [name, value] : expected[i]["signed"].items()) {
      EXPECT_EQ(headers[name], value.get<std::string>()) << "header " << name;
    }
  }
}

}  // namespace
}  // namespace dtrain::objstore
