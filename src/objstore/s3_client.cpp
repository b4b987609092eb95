#include <algorithm>
#include <cstdint>
#include <cstring>

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

namespace {

// Note [Range into place]
// The body of a GET goes straight to the caller's memory (Note [Body into
// place]): a growable buffer (std::string, std::vector<uint8_t>) or a fixed
// one of the range's length. A store that ignores Range answers 200 (any
// 2xx but 206) with the whole object: the sink then drops the bytes before
// the range and keeps at most its length. Bytes beyond a fixed buffer are counted, not
// stored, so get_into's size check names a store that sent too much.
class RangeSink : public http::BodySink {
 public:
  RangeSink(const GetOptions& options, bool ranged) : options_(options), ranged_(ranged) {}
  void start(int status, int64_t content_length) override {
    received_ = 0;
    kept_ = 0;
    // Any 2xx but 206 carries the whole object (200 from a store that
    // ignores Range; the fuzzer sends the others).
    const bool whole = ranged_ && status != 206;
    skip_ = whole ? options_.offset : 0;
    limit_ = whole && options_.length ? *options_.length : UINT64_MAX;
    limit_ = std::min(limit_, capacity());
    const uint64_t length = content_length < 0 ? 0 : static_cast<uint64_t>(content_length);
    begin(std::min(length - std::min(length, skip_), limit_));
  }
  void append(const char* data, size_t n) override {
    const uint64_t at = received_;
    received_ += n;
    if (at + n <= skip_) return;
    const uint64_t drop = at < skip_ ? skip_ - at : 0;
    const uint64_t take = std::min<uint64_t>(n - drop, limit_ - kept_);
    if (take > 0) store(kept_, data + drop, static_cast<size_t>(take));
    kept_ += take;
  }
  /// Body bytes received (the whole object's for a 200 to a ranged GET).
  uint64_t received() const { return received_; }
  /// Bytes placed.
  uint64_t kept() const { return kept_; }

 protected:
  virtual uint64_t capacity() const { return UINT64_MAX; }
  /// A body of about `expected` bytes begins: drop what is held.
  virtual void begin(uint64_t expected) = 0;
  /// Bytes `at`.. of the range (`at` = the bytes kept so far).
  virtual void store(uint64_t at, const char* data, size_t n) = 0;

 private:
  const GetOptions& options_;
  const bool ranged_;
  uint64_t received_ = 0;
  uint64_t kept_ = 0;
  uint64_t skip_ = 0;
  uint64_t limit_ = UINT64_MAX;
};

constexpr uint64_t kMaxReserve = uint64_t{64} << 20;  // as Note [Body buffer]

template <typename Buffer>
class GrowingSink final : public RangeSink {
 public:
  /// `out` empty: it stays so when no 2xx body starts.
  GrowingSink(const GetOptions& options, bool ranged, Buffer& out)
      : RangeSink(options, ranged), out_(out) {}

 private:
  void begin(uint64_t expected) override {
    // clear() keeps the capacity, so a recycled buffer is not reallocated;
    // one that must grow takes a quarter more, so that a pool of them soon
    // holds most objects of a dataset without growing again.
    out_.clear();
    if (expected > out_.capacity() && expected <= kMaxReserve) {
      out_.reserve(static_cast<size_t>(std::min(kMaxReserve, expected + expected / 4)));
    }
  }
  void store(uint64_t, const char* data, size_t n) override {
    using T = typename Buffer::value_type;
    const T* p = reinterpret_cast<const T*>(data);
    out_.insert(out_.end(), p, p + n);  // no zero-fill first, as resize would do
  }
  Buffer& out_;
};

// The range's bytes back to back into the caller's spans (a span with a
// null dst receives and drops its bytes). `at` only grows within a body, so
// the span it falls in is found by walking forward from the last one.
class SpansSink final : public RangeSink {
 public:
  SpansSink(const GetOptions& options, bool ranged, const std::vector<GetSpan>& spans)
      : RangeSink(options, ranged), spans_(spans) {
    for (const GetSpan& s : spans_) capacity_ += s.length;
  }

 private:
  uint64_t capacity() const override { return capacity_; }
  void begin(uint64_t) override {
    span_ = 0;
    span_at_ = 0;
  }
  void store(uint64_t at, const char* data, size_t n) override {
    while (n > 0) {  // at + n <= capacity_ (RangeSink keeps no more)
      while (at >= span_at_ + spans_[span_].length) span_at_ += spans_[span_++].length;
      const GetSpan& s = spans_[span_];
      const uint64_t into = at - span_at_;
      const auto take = static_cast<size_t>(std::min<uint64_t>(n, s.length - into));
      if (s.dst != nullptr) std::memcpy(static_cast<char*>(s.dst) + into, data, take);
      at += take, data += take, n -= take;
    }
  }
  const std::vector<GetSpan>& spans_;
  uint64_t capacity_ = 0;
  size_t span_ = 0;       // the span holding byte span_at_ ..
  uint64_t span_at_ = 0;  // .. its first byte's place in the range
};

}  // namespace

// `sink_base` is always a RangeSink (the header cannot name it).
GetResult S3Client::get_into(const std::string& bucket, const std::string& key,
                             const GetOptions& options, http::BodySink& sink_base) {
  auto& sink = static_cast<RangeSink&>(sink_base);
  S3Call call{"GetObject", "GET", bucket, key};
  const bool ranged = options.offset > 0 || options.length.has_value();
  if (ranged) {
    call.headers.emplace_back("Range", options.length ? cat("bytes=", options.offset, "-",
                                                            options.offset + *options.length - 1)
                                                      : cat("bytes=", options.offset, "-"));
  }
  if (!options.if_match.empty()) call.headers.emplace_back("If-Match", options.if_match);
  call.body_sink = &sink;
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
    if (sink.received() != expected) {
      throw DataError(cat("S3 GetObject s3://", bucket, "/", key, ": got ", sink.received(),
                          " bytes at offset ", options.offset, ", expected ", expected, " of ",
                          result.object_size, "; fix: check the store (a truncated answer)"));
    }
  } else {
    // Not ranged, or a store that ignores Range and sends everything: the
    // sink kept the range (Note [Range into place]).
    result.object_size = sink.received();
  }
  result.bytes = sink.kept();
  return result;
}

GetResult S3Client::get_object(const std::string& bucket, const std::string& key,
                               const GetOptions& options) {
  if (options.length && *options.length == 0) return {};
  const bool ranged = options.offset > 0 || options.length.has_value();
  std::string data;
  GrowingSink<std::string> sink(options, ranged, data);
  GetResult result = get_into(bucket, key, options, sink);
  result.data = std::move(data);
  return result;
}

GetResult S3Client::get_object(const std::string& bucket, const std::string& key,
                               const GetOptions& options, std::vector<uint8_t>& out) {
  out.clear();
  if (options.length && *options.length == 0) return {};
  const bool ranged = options.offset > 0 || options.length.has_value();
  GrowingSink<std::vector<uint8_t>> sink(options, ranged, out);
  return get_into(bucket, key, options, sink);
}

GetResult S3Client::get_object(const std::string& bucket, const std::string& key,
                               const GetOptions& options, void* dst) {
  if (!options.length) {
    throw InvalidArgument(cat("S3 GetObject s3://", bucket, "/", key,
                              ": reading into fixed memory needs GetOptions::length"));
  }
  return get_object(bucket, key, options, std::vector<GetSpan>{{dst, *options.length}});
}

GetResult S3Client::get_object(const std::string& bucket, const std::string& key,
                               const GetOptions& options, const std::vector<GetSpan>& spans) {
  uint64_t total = 0;
  for (const GetSpan& s : spans) total += s.length;
  if (options.length && *options.length != total) {
    throw InvalidArgument(cat("S3 GetObject s3://", bucket, "/", key, ": GetOptions::length ",
                              *options.length, " is not the spans' total, ", total));
  }
  if (total == 0) return {};
  GetOptions ranged = options;
  ranged.length = total;
  SpansSink sink(ranged, true, spans);
  return get_into(bucket, key, ranged, sink);
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
