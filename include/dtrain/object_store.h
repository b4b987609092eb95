#pragma once
// Object storage: an S3 REST client (AWS S3 and S3-compatible stores such as
// MinIO and Ceph RGW) over libcurl, with Signature V4 built by dtrain over
// OpenSSL (docs/object_store.md). Torch-free: target dtrain_objstore.
//
// Errors: every failure is an ObjectStoreError (or a subclass) whose message
// is one line naming the operation, s3://bucket/key, the HTTP status and the
// fix; InvalidArgument for bad options, URIs and half-set credentials.
//
/// Example:
/// ```
/// size_t bytes_under(const std::string& location) {
///   dtrain::S3Uri uri = dtrain::S3Uri::parse(location);  // "s3://bucket/train/"
///   dtrain::S3Client s3(dtrain::s3_options_from_env());  // AWS_* as the AWS SDKs read them
///   size_t total = 0;
///   for (const auto& object : s3.list_objects(uri.bucket, uri.key)) {
///     total += s3.get_object(uri.bucket, object.key).data.size();
///   }
///   return total;
/// }
/// ```

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/errors.h"

namespace dtrain::http {
class BodySink;  // src/http/http.h
}  // namespace dtrain::http

namespace dtrain {

// ---- errors -----------------------------------------------------------------

/// A request to the object store failed. `status` is the HTTP status (0 when
/// no response came: connection refused, reset, timeout), `code` S3's error
/// code (NoSuchKey, AccessDenied, ...; empty when the body had none).
class ObjectStoreError : public Error {
 public:
  ObjectStoreError(const std::string& message, int status, std::string code, std::string bucket,
                   std::string key)
      : Error(message),
        status(status),
        code(std::move(code)),
        bucket(std::move(bucket)),
        key(std::move(key)) {}
  int status;
  std::string code;
  std::string bucket;
  std::string key;
};

/// 404: the bucket (code NoSuchBucket) or key (NoSuchKey, or a HEAD's 404).
class ObjectNotFoundError : public ObjectStoreError {
 public:
  using ObjectStoreError::ObjectStoreError;
};

/// 403: the credentials were refused (AccessDenied, SignatureDoesNotMatch,
/// InvalidAccessKeyId, ExpiredToken).
class AccessDeniedError : public ObjectStoreError {
 public:
  using ObjectStoreError::ObjectStoreError;
};

/// The bucket lives in another region (301, or 400 with x-amz-bucket-region).
/// `region` is that region when the store named it.
class WrongRegionError : public ObjectStoreError {
 public:
  WrongRegionError(const std::string& message, int status, std::string code, std::string bucket,
                   std::string key, std::string region)
      : ObjectStoreError(message, status, std::move(code), std::move(bucket), std::move(key)),
        region(std::move(region)) {}
  std::string region;
};

/// 412: a conditional request's condition failed: a put with
/// `if_none_match` found an object already there, or a read with `if_match`
/// found the object replaced (its ETag changed).
class PreconditionFailedError : public ObjectStoreError {
 public:
  using ObjectStoreError::ObjectStoreError;
};

// ---- locations ----------------------------------------------------------------

/// `s3://bucket/prefix` split into its parts.
struct S3Uri {
  std::string bucket;
  /// The rest after "bucket/", without the leading slash; may be empty.
  std::string key;

  /// Parses "s3://bucket[/key]". Throws InvalidArgument (one line naming the
  /// text and the fix) for another scheme or a missing/invalid bucket name.
  static S3Uri parse(std::string_view uri);
  /// True when `location` starts with "s3://" (a location to hand to parse()).
  static bool is_s3(std::string_view location);
  /// Where a location is accepted: true for "s3://...", false for a local
  /// path, and InvalidArgument (one line, as parse()) for any other
  /// "scheme://", so "gs://b/x" is refused instead of becoming a folder.
  static bool is_s3_location(std::string_view location);
  std::string str() const;
};

// ---- credentials --------------------------------------------------------------

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  /// Empty for long-term keys.
  std::string session_token;
  /// When temporary credentials stop working; nullopt for long-term keys.
  std::optional<std::chrono::system_clock::time_point> expiration;
  /// Where they came from ("environment", "profile dev in /root/.aws/credentials",
  /// "web identity (STS)", ...): error messages name it.
  std::string source;
};

/// Something that hands out credentials. Implementations are thread-safe;
/// credentials() may block on the network for at most the provider's own
/// timeout and throws ObjectStoreError/InvalidArgument when it cannot produce
/// any. Providers of temporary credentials refresh them before they expire.
class CredentialsProvider {
 public:
  virtual ~CredentialsProvider() = default;
  virtual Credentials credentials() = 0;
};

/// Always the same credentials.
std::shared_ptr<CredentialsProvider> static_credentials(Credentials credentials);

/// Reads the environment as one map from name to value (std::getenv by default).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// ---- the client ---------------------------------------------------------------

/// How the bucket goes into the URL.
enum class S3Addressing {
  /// Virtual-hosted for AWS's own endpoints, path-style for a custom
  /// endpoint (MinIO, Ceph RGW and moto expect it).
  kAuto,
  kPath,     ///< https://endpoint/bucket/key
  kVirtual,  ///< https://bucket.endpoint/key
};

struct S3Options {
  /// The region requests are signed for.
  std::string region = "us-east-1";
  /// Scheme, host and optional port, e.g. "http://127.0.0.1:9000". Empty:
  /// AWS's endpoint for the region, https://s3.<region>.amazonaws.com.
  std::string endpoint;
  S3Addressing addressing = S3Addressing::kAuto;
  /// Required. s3_options_from_env() fills it with the SDKs' default chain.
  std::shared_ptr<CredentialsProvider> credentials;
  /// PEM bundle of the CAs to trust (AWS_CA_BUNDLE); empty: the system's.
  std::string ca_bundle;
  /// Proxies come from libcurl's own reading of http_proxy, https_proxy,
  /// HTTPS_PROXY, all_proxy and no_proxy.

  /// An attempt fails when no byte has moved either way for this long
  /// (checked about once a second): an idle deadline, not a total one, so
  /// that large bodies (checkpoints) are not cut off.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(5)};
  /// Attempts per request (1 = no retry). Retried: 5xx (503 SlowDown
  /// included), 429, S3's RequestTimeout, and dropped/refused/timed-out
  /// connections.
  int max_attempts = 5;
  /// Backoff before retry n (n = 1, 2, ...): uniform in [0, min(max_backoff,
  /// base_backoff * 2^(n-1))] ("full jitter").
  std::chrono::milliseconds base_backoff{100};
  std::chrono::milliseconds max_backoff{std::chrono::seconds(5)};
  /// put_object() uses a multipart upload for bodies at or above this size.
  size_t multipart_threshold = size_t{64} << 20;
  /// Size of each part but the last (S3's minimum is 5 MiB).
  size_t part_size = size_t{16} << 20;
};

/// One object of a listing or a HEAD.
struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  /// The ETag with its quotes, as S3 sends it ("\"9bb5...\"").
  std::string etag;
  std::string last_modified;
};

/// Lower-case hex SHA-256 of `data`: SigV4's payload hash, and the name the
/// data cache (DataCacheOptions, dtrain/data.h) gives an object's copy.
std::string sha256_hex(std::string_view data);

/// The ETag S3 gives an object stored by one PutObject without SSE-KMS: the
/// quoted lower-case hex MD5 of its bytes. Multipart and KMS-encrypted
/// objects have other ETags.
std::string single_part_etag(std::string_view data);

/// The ETag S3 gives the object S3Client::put_object stores from `data`
/// with `options` (no SSE-KMS): single_part_etag below
/// options.multipart_threshold, else the multipart form, the quoted hex MD5
/// of the parts' MD5s followed by "-<parts>" (parts of options.part_size).
std::string put_object_etag(std::string_view data, const S3Options& options);

/// One page of ListObjectsV2.
struct ListPage {
  std::vector<ObjectInfo> objects;
  /// With a delimiter: the "folders" (CommonPrefixes).
  std::vector<std::string> common_prefixes;
  /// Non-empty when more pages follow: pass it to the next call.
  std::string next_continuation_token;
};

struct GetOptions {
  /// First byte to read.
  uint64_t offset = 0;
  /// Bytes to read from offset; nullopt: to the end.
  std::optional<uint64_t> length;
  /// Sent as If-Match: a replaced object (another ETag) fails with
  /// PreconditionFailedError instead of mixing two versions. Empty: none.
  std::string if_match;
};

struct GetResult {
  /// The body (the range asked for); empty for the forms that place it in
  /// the caller's memory.
  std::string data;
  /// Bytes of the body placed: data.size(), or what the other forms wrote.
  uint64_t bytes = 0;
  std::string etag;
  /// The whole object's size (from Content-Range or Content-Length).
  uint64_t object_size = 0;
};

/// Part of a GET's body (S3Client::get_object into spans): `length` bytes
/// to `dst`; with dst null they are received and dropped.
struct GetSpan {
  void* dst = nullptr;
  uint64_t length = 0;
};

struct PutOptions {
  /// Sent as If-None-Match: * : fails with PreconditionFailedError when the
  /// key already exists, so a writer never replaces an object.
  bool if_none_match = false;
  std::string content_type = "application/octet-stream";
};

struct PutResult {
  std::string etag;
  /// Parts uploaded; 0 for a single PutObject.
  int parts = 0;
};

/// An S3 client. Thread-safe: calls may run concurrently from many threads.
/// Each HTTP request makes at most max_attempts attempts, each ended by
/// connect_timeout or request_timeout without progress, with backoff
/// between them; a multipart put makes one such request per part plus two,
/// a listing one per page, and fetching credentials (STS, container, IMDS)
/// has its own deadlines. Connections are pooled and reused.
class S3Client {
 public:
  /// Throws InvalidArgument when options are incomplete (no credentials
  /// provider, a malformed endpoint).
  explicit S3Client(S3Options options);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  const S3Options& options() const;

  /// One ListObjectsV2 page (max_keys <= 1000).
  ListPage list_objects_page(const std::string& bucket, const std::string& prefix,
                             const std::string& continuation_token = "", int max_keys = 1000,
                             const std::string& delimiter = "");
  /// Every object under `prefix`, following continuation tokens.
  std::vector<ObjectInfo> list_objects(const std::string& bucket, const std::string& prefix,
                                       int page_size = 1000);
  ObjectInfo head_object(const std::string& bucket, const std::string& key);
  GetResult get_object(const std::string& bucket, const std::string& key,
                       const GetOptions& options = {});
  /// The same, received straight into `out` (replaced; its capacity is
  /// reused, nothing is zeroed or copied twice): GetResult::data stays empty.
  GetResult get_object(const std::string& bucket, const std::string& key, const GetOptions& options,
                       std::vector<uint8_t>& out);
  /// The same into `dst`, which holds options.length bytes (required;
  /// InvalidArgument without it). GetResult::bytes says how many came: fewer
  /// than asked when the object ends first.
  GetResult get_object(const std::string& bucket, const std::string& key, const GetOptions& options,
                       void* dst);
  /// The same into `spans`, back to back from options.offset: one GET
  /// scattered into the caller's buffers (a run of neighbouring samples
  /// into each sample's own, for instance). options.length, when set, must
  /// be the spans' total (InvalidArgument otherwise).
  GetResult get_object(const std::string& bucket, const std::string& key, const GetOptions& options,
                       const std::vector<GetSpan>& spans);
  /// PutObject with Content-MD5; a multipart upload (each part with its
  /// Content-MD5) at or above options().multipart_threshold, aborted when
  /// any step fails.
  PutResult put_object(const std::string& bucket, const std::string& key, std::string_view data,
                       const PutOptions& options = {});
  /// Deleting a missing key succeeds (S3's semantics).
  void delete_object(const std::string& bucket, const std::string& key);

  /// Internal (src/objstore/s3_request.h): tests swap in a faulty transport.
  struct Impl;
  explicit S3Client(std::unique_ptr<Impl> impl);

 private:
  GetResult get_into(const std::string& bucket, const std::string& key, const GetOptions& options,
                     http::BodySink& sink);
  std::unique_ptr<Impl> impl_;
};

/// S3Options the way AWS's SDKs resolve them from the environment and the
/// shared config files: region from AWS_REGION, AWS_DEFAULT_REGION or the
/// profile's `region`; endpoint from AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL
/// or the profile's `endpoint_url`; AWS_S3_ADDRESSING_STYLE (path|virtual|
/// auto); AWS_CA_BUNDLE; credentials from the default chain: environment
/// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), web
/// identity (AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE, or the profile's
/// role_arn + web_identity_token_file), the profile (AWS_PROFILE, default
/// "default") in AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials) and
/// AWS_CONFIG_FILE (~/.aws/config) with static keys or credential_process,
/// container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI or _RELATIVE_URI
/// with AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE)), then EC2 instance metadata
/// (IMDSv2; AWS_EC2_METADATA_DISABLED=true skips it). The first source that
/// is configured is used; the network ones are asked lazily, at the first
/// request. Throws InvalidArgument (one line) for half-set keys, a missing
/// profile, or malformed values.
S3Options s3_options_from_env(const EnvLookup& env = {});

}  // namespace dtrain
