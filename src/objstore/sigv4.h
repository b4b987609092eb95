#pragma once
// AWS Signature Version 4 over OpenSSL's SHA-256 and HMAC (Note [SigV4] in
// sigv4.cpp), and the small encoders S3 requests need.

#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrain/object_store.h"

namespace dtrain::objstore {

using Pairs = std::vector<std::pair<std::string, std::string>>;

/// Lower-case hex SHA-256 of `data` (public: dtrain/object_store.h).
using dtrain::sha256_hex;
/// Raw (32-byte) HMAC-SHA256 of `data` under `key`.
std::string hmac_sha256(std::string_view key, std::string_view data);
/// Lower-case hex of raw bytes.
std::string hex(std::string_view bytes);
/// Raw (16-byte) MD5 of `data`.
std::string md5(std::string_view data);
/// Base64 (with padding) of the raw MD5 of `data`: a Content-MD5 value.
std::string md5_base64(std::string_view data);

/// RFC 3986 percent-encoding as SigV4 wants it: unreserved characters
/// (A-Z a-z 0-9 - _ . ~) stay, every other byte becomes %XX (upper-case hex);
/// `/` stays when keep_slash (object keys in a path).
std::string uri_encode(std::string_view text, bool keep_slash);
/// Decodes %XX; with plus_is_space also '+' as ' ' (S3's encoding-type=url
/// listings are form-encoded: botocore decodes them with unquote_plus).
/// Malformed escapes stay as they are.
std::string uri_decode(std::string_view text, bool plus_is_space = false);

/// "YYYYMMDDTHHMMSSZ" of `time` in UTC.
std::string amz_date(std::chrono::system_clock::time_point time);

/// What SigV4 signs of a request.
struct SignableRequest {
  std::string method;
  /// The path as sent, already percent-encoded ("/bucket/a%20b"). S3 does not
  /// encode it a second time (other services do; not needed here).
  std::string canonical_uri = "/";
  /// Query parameters, NOT encoded; canonical_query() encodes and sorts them.
  Pairs query;
  /// Headers to sign, including host and x-amz-date, as sent.
  Pairs headers;
  /// Hex SHA-256 of the body, or "UNSIGNED-PAYLOAD".
  std::string payload_hash;
};

/// "k1=v1&k2=v2": each key and value RFC 3986-encoded, sorted by encoded key
/// then value. Also the query string dtrain sends, so the two never differ.
std::string canonical_query(const Pairs& query);

/// The canonical request (method, URI, query, headers, signed headers,
/// payload hash, joined by newlines).
std::string canonical_request(const SignableRequest& request);

/// "host;range;x-amz-date": the request's header names, lower-case, sorted.
std::string signed_headers(const SignableRequest& request);

/// The SigV4 signing key of a secret, day ("YYYYMMDD"), region and
/// service, remembered for the last ones asked (Note [Signing key once a
/// day]). Thread-safe.
class SigningKeys {
 public:
  std::string get(const std::string& secret, const std::string& day, const std::string& region,
                  const std::string& service);

 private:
  std::mutex mu_;
  std::string secret_, day_, region_, service_, key_;
};

/// The Authorization header value for `request` at `date` ("YYYYMMDDTHHMMSSZ";
/// the request's x-amz-date must be the same). `keys` (optional) remembers
/// the signing key between requests.
std::string authorization(const SignableRequest& request, const Credentials& credentials,
                          const std::string& region, const std::string& service,
                          const std::string& date, SigningKeys* keys = nullptr);

/// Hex SHA-256 of an empty payload (a GET's, a HEAD's).
inline constexpr const char* kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

}  // namespace dtrain::objstore
