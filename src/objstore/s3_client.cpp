#include <algorithm>

#include "common/printable.h"
#include "common/strings.h"
#include "objstore/s3_request.h"
#include "objstore/sigv4.h"
#include "objstore/xml.h"

namespace dtrain {

using objstore::HttpResponse;
using objstore::S3Call;
using objstore::XmlElement;

namespace {

[[noreturn]] void not_s3(const S3Options& options, const S3Call& call, const HttpResponse& response,
                         const char* expected) {
  const std::string type = response.header("content-type");
  throw ObjectStoreError(
      cat("S3 ", call.operation, " s3://", call.bucket, "/", call.key, ": HTTP ", response.status,
          " from ", objstore::effective_endpoint(options), " with ",
          type.empty() ? "a body" : printable(type), " that is not S3's ", expected,
          ", so it is not an S3 endpoint; fix: point AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL) at "
          "an S3 API"),
      response.status, "", call.bucket, call.key);
}

XmlElement parse_or_throw(const S3Options& options, const S3Call& call,
                          const HttpResponse& response, const char* root) {
  auto xml = objstore::parse_xml(response.body);
  if (!xml) not_s3(options, call, response, root);
  if (xml->name == "Error") {
    // S3 may answer 200 and fail in the body (CompleteMultipartUpload).
    throw ObjectStoreError(
        cat("S3 ", call.operation, " s3://", call.bucket, "/", call.key, ": HTTP ", response.status,
            " ", printable(xml->child_text("Code")), ": ",
            printable(xml->child_text("Message"), 200), "; fix: retry the upload"),
        response.status, xml->child_text("Code"), call.bucket, call.key);
  }
  if (xml->name != root) not_s3(options, call, response, root);
  return std::move(*xml);
}

// Note [Sizes S3 sends]
// A listing's <Size>, a HEAD's Content-Length and a 206's Content-Range total
// are byte counts: anything else (empty, signed, junk after the digits) is not
// S3's answer and is refused, never read as 0 (a silent wrong size).
uint64_t byte_count(const S3Options& options, const S3Call& call, const HttpResponse& response,
                    const std::string& text, const char* what) {
  long long value = 0;
  if (text.empty() || text[0] < '0' || text[0] > '9' || !parse_int(text, &value) || value < 0) {
    not_s3(options, call, response,
           cat("answer: ", what, " '", printable(text), "' is not a byte count").c_str());
  }
  return static_cast<uint64_t>(value);
}

}  // namespace

S3Client::S3Client(S3Options options) : S3Client(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->http = objstore::curl_transport();
  if (!impl_->options.credentials) {
    throw InvalidArgument(
        "S3Options::credentials is empty; fix: use s3_options_from_env() or static_credentials()");
  }
  objstore::parse_endpoint(objstore::effective_endpoint(impl_->options));  // throws when malformed
  if (impl_->options.part_size < (size_t{5} << 20)) {
    throw InvalidArgument(cat("S3Options::part_size ", impl_->options.part_size,
                              " is below S3's minimum part of 5 MiB; fix: raise it"));
  }
}

S3Client::S3Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
S3Client::~S3Client() = default;

const S3Options& S3Client::options() const { return impl_->options; }

ListPage S3Client::list_objects_page(const std::string& bucket, const std::string& prefix,
                                     const std::string& continuation_token, int max_keys,
                                     const std::string& delimiter) {
  S3Call call{"ListObjectsV2", "GET", bucket, "", {{"list-type", "2"}, {"encoding-type", "url"}}};
  if (!prefix.empty()) call.query.emplace_back("prefix", prefix);
  if (!continuation_token.empty())
    call.query.emplace_back("continuation-token", continuation_token);
  if (!delimiter.empty()) call.query.emplace_back("delimiter", delimiter);
  call.query.emplace_back("max-keys", std::to_string(std::clamp(max_keys, 1, 1000)));
  HttpResponse response = impl_->execute(call);
  call.key = prefix;  // errors name the prefix listed
  XmlElement xml = parse_or_throw(impl_->options, call, response, "ListBucketResult");
  // encoding-type=url: keys come form-encoded (XML 1.0 cannot carry every
  // byte a key may hold; AWS writes a space as '+', a '+' as %2B); decode
  // them back as botocore does (unquote_plus).
  const bool encoded = xml.child_text("EncodingType") == "url";
  auto decode = [encoded](const std::string& text) {
    return encoded ? objstore::uri_decode(text, true) : text;
  };
  ListPage page;
  for (const XmlElement* contents : xml.all("Contents")) {
    page.objects.push_back(
        {decode(contents->child_text("Key")),
         byte_count(impl_->options, call, response, contents->child_text("Size"), "<Size>"),
         contents->child_text("ETag"), contents->child_text("LastModified")});
  }
  for (const XmlElement* common : xml.all("CommonPrefixes")) {
    page.common_prefixes.push_back(decode(common->child_text("Prefix")));
  }
  if (xml.child_text("IsTruncated") == "true") {
    page.next_continuation_token = xml.child_text("NextContinuationToken");
    if (page.next_continuation_token.empty()) {
      not_s3(impl_->options, call, response, "ListBucketResult (truncated without a token)");
    }
  }
  return page;
}

std::vector<ObjectInfo> S3Client::list_objects(const std::string& bucket, const std::string& prefix,
                                               int page_size) {
  std::vector<ObjectInfo> all;
  std::string token;
  do {
    ListPage page = list_objects_page(bucket, prefix, token, page_size);
    std::move(page.objects.begin(), page.objects.end(), std::back_inserter(all));
    if (!page.next_continuation_token.empty() && page.next_continuation_token == token) {
      throw ObjectStoreError(cat("S3 ListObjectsV2 s3://", bucket, "/", prefix,
                                 ": the store repeated continuation token '", printable(token),
                                 "'; fix: the endpoint is not a conforming S3 API"),
                             200, "", bucket, prefix);
    }
    token = page.next_continuation_token;
  } while (!token.empty());
  return all;
}

ObjectInfo S3Client::head_object(const std::string& bucket, const std::string& key) {
  const S3Call call{"HeadObject", "HEAD", bucket, key};
  HttpResponse response = impl_->execute(call);
  return {key,
          byte_count(impl_->options, call, response, response.header("content-length"),
                     "Content-Length"),
          response.header("etag"), response.header("last-modified")};
}

GetResult S3Client::get_object(const std::string& bucket, const std::string& key,
                               const GetOptions& options) {
  S3Call call{"GetObject", "GET", bucket, key};
  const bool ranged = options.offset > 0 || options.length.has_value();
  if (options.length && *options.length == 0) return {};
  if (ranged) {
    call.headers.emplace_back("Range", options.length ? cat("bytes=", options.offset, "-",
                                                            options.offset + *options.length - 1)
                                                      : cat("bytes=", options.offset, "-"));
  }
  if (!options.if_match.empty()) call.headers.emplace_back("If-Match", options.if_match);
  HttpResponse response = impl_->execute(call);
  GetResult result;
  result.etag = response.header("etag");
  // Note [ETag pinning]: a store that ignores If-Match still names the
  // ETag it served; a different one means the object was replaced.
  if (!options.if_match.empty() && !result.etag.empty() && result.etag != options.if_match) {
    throw PreconditionFailedError(
        cat("S3 GetObject s3://", bucket, "/", key, ": HTTP ", response.status, ": the object was ",
            "replaced while it was being read (ETag ", printable(result.etag), ", expected ",
            options.if_match, "); fix: rerun against data that is not rewritten during training"),
        response.status, "ETagChanged", bucket, key);
  }
  if (response.status == 206) {
    const std::string range = response.header("content-range");  // "bytes 0-9/1234"
    auto slash = range.rfind('/');
    result.object_size = byte_count(impl_->options, call, response,
                                    slash == std::string::npos ? range : range.substr(slash + 1),
                                    "Content-Range's total");
    const uint64_t left =
        result.object_size > options.offset ? result.object_size - options.offset : 0;
    const uint64_t expected = std::min(options.length.value_or(left), left);
    if (response.body.size() != expected) {
      throw DataError(cat("S3 GetObject s3://", bucket, "/", key, ": got ", response.body.size(),
                          " bytes at offset ", options.offset, ", expected ", expected, " of ",
                          result.object_size, "; fix: check the store (a truncated answer)"));
    }
    result.data = std::move(response.body);
  } else if (ranged) {
    // A store that ignores Range sends everything: cut the range out.
    result.object_size = response.body.size();
    const uint64_t begin = std::min<uint64_t>(options.offset, response.body.size());
    result.data = response.body.substr(begin, options.length.value_or(std::string::npos));
  } else {
    result.object_size = response.body.size();
    result.data = std::move(response.body);
  }
  return result;
}

PutResult S3Client::put_object(const std::string& bucket, const std::string& key,
                               std::string_view data, const PutOptions& options) {
  if (data.size() >= impl_->options.multipart_threshold) {
    return objstore::multipart_upload(*impl_, bucket, key, data, options);
  }
  S3Call call{"PutObject", "PUT", bucket, key};
  call.headers = {{"Content-Type", options.content_type},
                  {"Content-MD5", objstore::md5_base64(data)}};
  if (options.if_none_match) call.headers.emplace_back("If-None-Match", "*");
  call.body = data;
  int attempts = 0;
  try {
    HttpResponse response = impl_->execute(call, &attempts);
    return {response.header("etag"), 0};
  } catch (const PreconditionFailedError&) {
    // Note [Conditional put retried]: when an attempt's answer was lost and
    // the retry finds "already exists", the object there may be ours: its
    // ETag (the MD5 of a single-part upload) says.
    if (attempts > 1) {
      ObjectInfo there = head_object(bucket, key);
      if (there.etag == "\"" + objstore::hex(objstore::md5(data)) + "\"") return {there.etag, 0};
    }
    throw;
  }
}

void S3Client::delete_object(const std::string& bucket, const std::string& key) {
  impl_->execute({"DeleteObject", "DELETE", bucket, key});
}

std::string single_part_etag(std::string_view data) {
  return "\"" + objstore::hex(objstore::md5(data)) + "\"";
}

std::string put_object_etag(std::string_view data, const S3Options& options) {
  if (data.size() < options.multipart_threshold) return single_part_etag(data);
  // The parts as multipart.cpp cuts them (one empty part for no bytes).
  std::string digests;
  int parts = 0;
  for (size_t offset = 0; offset < data.size() || parts == 0; offset += options.part_size) {
    digests += objstore::md5(data.substr(offset, options.part_size));
    ++parts;
  }
  return cat("\"", objstore::hex(objstore::md5(digests)), "-", parts, "\"");
}

}  // namespace dtrain
