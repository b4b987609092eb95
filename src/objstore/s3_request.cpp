#include "objstore/s3_request.h"

#include <cmath>
#include <random>
#include <thread>

#include "common/printable.h"
#include "common/strings.h"
#include "objstore/xml.h"

namespace dtrain::objstore {

using Clock = std::chrono::system_clock;

Endpoint parse_endpoint(const std::string& url) {
  auto sep = url.find("://");
  Endpoint out;
  if (sep != std::string::npos) out.scheme = url.substr(0, sep);
  std::string rest = sep == std::string::npos ? "" : url.substr(sep + 3);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if ((out.scheme != "http" && out.scheme != "https") || rest.empty() ||
      rest.find('/') != std::string::npos) {
    throw InvalidArgument(cat("S3 endpoint '", url, "' is not http(s)://host[:port]",
                              "; fix: correct AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL"));
  }
  const std::string default_port = out.scheme == "http" ? ":80" : ":443";
  if (rest.size() > default_port.size() &&
      rest.compare(rest.size() - default_port.size(), default_port.size(), default_port) == 0) {
    rest.resize(rest.size() - default_port.size());
  }
  out.authority = rest;
  return out;
}

std::string effective_endpoint(const S3Options& options) {
  return options.endpoint.empty() ? cat("https://s3.", options.region, ".amazonaws.com")
                                  : options.endpoint;
}

namespace {

// A bucket that can be a DNS label under https (no dots: the wildcard
// certificate covers one level).
bool virtual_host_ok(const std::string& bucket, const std::string& scheme) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  for (char c : bucket) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
              (c == '.' && scheme == "http");
    if (!ok) return false;
  }
  return bucket.front() != '-' && bucket.back() != '-';
}

}  // namespace

HttpRequest sign_s3_request(const S3Options& options, const S3Call& call,
                            const Credentials& credentials, Clock::time_point now,
                            SigningKeys* keys) {
  const Endpoint endpoint = parse_endpoint(effective_endpoint(options));
  bool virtual_host = false;
  switch (options.addressing) {
    case S3Addressing::kAuto:
      virtual_host = options.endpoint.empty() && virtual_host_ok(call.bucket, endpoint.scheme);
      break;
    case S3Addressing::kVirtual:
      virtual_host = !call.bucket.empty();
      break;
    case S3Addressing::kPath:
      break;
  }
  std::string host = endpoint.authority;
  std::string path = "/";
  if (virtual_host) {
    host = call.bucket + "." + host;
    path += uri_encode(call.key, true);
  } else if (!call.bucket.empty()) {
    path += call.bucket;
    if (!call.key.empty()) path += "/" + uri_encode(call.key, true);
  }
  const std::string date = amz_date(now);
  SignableRequest signable;
  signable.method = call.method;
  signable.canonical_uri = path;
  signable.query = call.query;
  signable.payload_hash = call.body.empty() ? kEmptyPayloadSha256 : sha256_hex(call.body);
  signable.headers = call.headers;
  signable.headers.emplace_back("host", host);
  signable.headers.emplace_back("x-amz-date", date);
  signable.headers.emplace_back("x-amz-content-sha256", signable.payload_hash);
  if (!credentials.session_token.empty()) {
    signable.headers.emplace_back("x-amz-security-token", credentials.session_token);
  }
  HttpRequest request;
  request.method = call.method;
  const std::string query = canonical_query(call.query);
  request.url = cat(endpoint.scheme, "://", host, path, query.empty() ? "" : "?", query);
  std::string signature = authorization(signable, credentials, options.region, "s3", date, keys);
  request.headers = std::move(signable.headers);
  request.headers.emplace_back("Authorization", std::move(signature));
  request.body = call.body;
  request.body_sink = call.body_sink;
  request.timeout = options.request_timeout;
  request.connect_timeout = options.connect_timeout;
  request.ca_bundle = options.ca_bundle;
  return request;
}

namespace {

std::string location(const S3Call& call) {
  return call.key.empty() ? cat("s3://", call.bucket) : cat("s3://", call.bucket, "/", call.key);
}

bool retryable_status(int status, const std::string& code) {
  return status == 500 || status == 502 || status == 503 || status == 504 || status == 429 ||
         (status == 400 && code == "RequestTimeout");
}

std::string mask_key(const std::string& key_id) {
  return key_id.size() <= 8 ? key_id : key_id.substr(0, 8) + "...";
}

// Note [One-line S3 errors]
// Every failure names the operation, s3://bucket/key, the HTTP status and
// S3's code, then "; fix: ..." with what the user changes. Bodies are S3's
// XML <Error>; anything else (an HTML page from a web server that is not an
// S3 endpoint, a proxy's error page) is named as such.
[[noreturn]] void throw_for(const S3Options& options, const S3Call& call,
                            const HttpResponse& response, const Credentials& credentials) {
  std::string code;
  std::string message;
  const auto xml = parse_xml(response.body);
  if (xml && xml->name == "Error") {
    code = xml->child_text("Code");
    message = xml->child_text("Message");
  }
  const std::string where = cat("S3 ", call.operation, " ", location(call), ": HTTP ",
                                response.status, code.empty() ? "" : " " + printable(code));
  const std::string endpoint = effective_endpoint(options);
  // Note [The bucket's region]: S3 names it in x-amz-bucket-region; an
  // AuthorizationHeaderMalformed body also names it in <Region>, which is
  // used when the header is missing (botocore's S3RegionRedirector reads the
  // header, then the body). tests/objstore/test_fault_proxy.cpp answers both.
  std::string bucket_region = response.header("x-amz-bucket-region");
  if (bucket_region.empty() && xml && xml->name == "Error") {
    bucket_region = xml->child_text("Region");
  }
  if (response.status == 301 || response.status == 307 ||
      (response.status == 400 && !bucket_region.empty() && bucket_region != options.region) ||
      code == "AuthorizationHeaderMalformed" || code == "PermanentRedirect") {
    throw WrongRegionError(
        cat(where, ": bucket '", call.bucket, "' is in ",
            bucket_region.empty() ? "another region" : "region " + printable(bucket_region),
            ", not ", options.region, "; fix: set AWS_REGION=",
            bucket_region.empty() ? "<the bucket's region>" : printable(bucket_region)),
        response.status, code, call.bucket, call.key, bucket_region);
  }
  const bool s3_body = xml && xml->name == "Error";
  if (!s3_body && response.status != 404 && response.status != 403 && response.status != 412 &&
      !response.body.empty()) {
    const std::string type = response.header("content-type");
    throw ObjectStoreError(
        cat(where, ": ", endpoint, " answered with ", type.empty() ? "a body" : printable(type),
            " that is not S3's XML, so it is not an S3 endpoint",
            "; fix: point AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL) at an S3 API"),
        response.status, code, call.bucket, call.key);
  }
  switch (response.status) {
    case 404:
      if (code == "NoSuchBucket") {
        throw ObjectNotFoundError(cat(where, ": no bucket '", call.bucket, "' at ", endpoint,
                                      "; fix: check the bucket name, the endpoint and the region"),
                                  404, code, call.bucket, call.key);
      }
      throw ObjectNotFoundError(
          cat(where, ": no object '", call.key, "' in bucket '", call.bucket, "'",
              code.empty() ? " (or no such bucket)" : "",
              "; fix: check the key and prefix (aws s3 ls s3://", call.bucket, "/)"),
          404, code, call.bucket, call.key);
    case 403:
      throw AccessDeniedError(
          cat(where, ": ", endpoint, " refused the credentials from ", credentials.source, " (key ",
              mask_key(credentials.access_key_id), ")",
              code == "SignatureDoesNotMatch"  ? ": the secret key does not match the key id"
              : code == "InvalidAccessKeyId"   ? ": the key id is unknown"
              : code == "ExpiredToken"         ? ": the session token has expired"
              : code == "RequestTimeTooSkewed" ? ": the clock is off"
                                               : ": access denied",
              "; fix: check the secret (AWS_SECRET_ACCESS_KEY or the profile's), the clock, and "
              "that the key may ",
              call.operation, " on arn:aws:s3:::", call.bucket, call.key.empty() ? "" : "/",
              call.key),
          403, code, call.bucket, call.key);
    case 412:
      throw PreconditionFailedError(
          cat(where, ": ",
              call.method == "GET" || call.method == "HEAD"
                  ? "the object was replaced (its ETag changed) while it was being read; fix: "
                    "rerun against data that is not rewritten during training"
                  : "an object already exists at this key (If-None-Match: *); fix: write to a new "
                    "key or delete the old object first"),
          412, code.empty() ? "PreconditionFailed" : code, call.bucket, call.key);
    default:
      break;
  }
  throw ObjectStoreError(
      cat(where, message.empty() ? "" : ": " + printable(message, 200),
          "; fix: see S3's error code ", code.empty() ? "(none)" : printable(code)),
      response.status, code, call.bucket, call.key);
}

std::chrono::milliseconds backoff(const S3Options& options, int retry, std::mt19937_64& rng) {
  // Note [Full jitter]: uniform in [0, min(cap, base * 2^(retry-1))], as in
  // AWS's "Exponential Backoff And Jitter"; spreads retries of many ranks.
  const double ceiling = std::min<double>(
      static_cast<double>(options.max_backoff.count()),
      static_cast<double>(options.base_backoff.count()) * std::pow(2.0, retry - 1));
  std::uniform_real_distribution<double> pick(0.0, ceiling);
  return std::chrono::milliseconds(static_cast<long long>(pick(rng)));
}

}  // namespace
}  // namespace dtrain::objstore

namespace dtrain {

using objstore::HttpResponse;
using objstore::S3Call;
using objstore::TransportError;

HttpResponse S3Client::Impl::execute(const S3Call& call, int* attempts_used) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  const int attempts = std::max(1, options.max_attempts);
  for (int attempt = 1;; ++attempt) {
    if (attempts_used) *attempts_used = attempt;
    // A credentials source that fails on the network (STS, the container
    // endpoint) is retried like the request itself.
    Credentials credentials;
    try {
      credentials = options.credentials->credentials();
    } catch (const ObjectStoreError& e) {
      if (attempt >= attempts) {
        throw ObjectStoreError(
            cat("S3 ", call.operation, " ", objstore::location(call), ": no credentials after ",
                attempt, " attempts (", e.what(), ")"),
            e.status, e.code, call.bucket, call.key);
      }
      std::this_thread::sleep_for(objstore::backoff(options, attempt, rng));
      continue;
    }
    const objstore::HttpRequest request =
        objstore::sign_s3_request(options, call, credentials, clock(), &signing_keys);
    try {
      HttpResponse response = http->perform(request);
      if (response.status / 100 == 2) {
        if (call.body_sink && !response.body.empty()) {  // a transport that kept it
          call.body_sink->start(response.status, static_cast<int64_t>(response.body.size()));
          call.body_sink->append(response.body.data(), response.body.size());
          response.body.clear();
        }
        return response;
      }
      std::string code;
      if (auto xml = objstore::parse_xml(response.body); xml && xml->name == "Error") {
        code = xml->child_text("Code");
      }
      if (!objstore::retryable_status(response.status, code) || attempt >= attempts) {
        if (objstore::retryable_status(response.status, code)) {
          throw ObjectStoreError(
              cat("S3 ", call.operation, " ", objstore::location(call), ": HTTP ", response.status,
                  code.empty() ? "" : " " + printable(code), " after ", attempt,
                  " attempts; fix: the store is overloaded or failing: retry later, or raise "
                  "S3Options::max_attempts"),
              response.status, code, call.bucket, call.key);
        }
        objstore::throw_for(options, call, response, credentials);
      }
    } catch (const TransportError& e) {
      if (attempt >= attempts) {
        throw ObjectStoreError(
            cat("S3 ", call.operation, " ", objstore::location(call), ": no answer after ", attempt,
                " attempts (", e.timed_out ? "timed out: " : "", e.what(), ")",
                "; fix: check that ", objstore::effective_endpoint(options),
                " is reachable (proxy, AWS_ENDPOINT_URL_S3), or raise the request timeout"),
            0, "", call.bucket, call.key);
      }
    }
    std::this_thread::sleep_for(objstore::backoff(options, attempt, rng));
  }
}

}  // namespace dtrain
