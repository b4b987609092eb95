#pragma once
// One S3 request: its URL, its signature, and the client's internals that
// tests reach (a transport of their own, signing at a fixed time).

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "dtrain/object_store.h"
#include "http/http.h"
#include "objstore/sigv4.h"

namespace dtrain::objstore {

// The HTTP stack (src/http/http.h) under the names the object store uses.
using http::curl_transport;
using http::HttpRequest;
using http::HttpResponse;
using http::HttpTransport;
using http::TransportError;

/// An S3 operation before it is addressed and signed.
struct S3Call {
  S3Call(std::string operation, std::string method, std::string bucket, std::string key,
         Pairs query = {}, Pairs headers = {}, std::string_view body = {})
      : operation(std::move(operation)),
        method(std::move(method)),
        bucket(std::move(bucket)),
        key(std::move(key)),
        query(std::move(query)),
        headers(std::move(headers)),
        body(body) {}
  std::string operation;  ///< "GetObject", ...: named in errors
  std::string method;
  std::string bucket;
  std::string key;
  Pairs query;    ///< not encoded
  Pairs headers;  ///< besides host, x-amz-*: Range, Content-MD5, If-None-Match, ...
  std::string_view body;
  /// Not owned: where a 2xx answer's body goes (HttpRequest::body_sink).
  /// execute() also hands it a body that a transport returned in
  /// HttpResponse::body, so the caller sees one place whatever the transport.
  http::BodySink* body_sink = nullptr;
};

/// The endpoint's parts ("http://127.0.0.1:9000" -> http, 127.0.0.1:9000).
struct Endpoint {
  std::string scheme;
  std::string authority;  ///< host[:port], the default port dropped
};
/// Throws InvalidArgument naming `url` when it is not scheme://host[:port].
Endpoint parse_endpoint(const std::string& url);

/// The endpoint `options` mean (their own, or AWS's for the region).
std::string effective_endpoint(const S3Options& options);

/// `call` addressed (path-style or virtual-hosted) and signed at `now`.
/// `keys` (optional) remembers the signing key between requests.
HttpRequest sign_s3_request(const S3Options& options, const S3Call& call,
                            const Credentials& credentials,
                            std::chrono::system_clock::time_point now, SigningKeys* keys = nullptr);

/// PutObject as a multipart upload (objstore/multipart.cpp): parts of
/// options.part_size with Content-MD5 each, aborted when any step fails.
PutResult multipart_upload(S3Client::Impl& client, const std::string& bucket,
                           const std::string& key, std::string_view data,
                           const PutOptions& options);

/// A client over `http` (tests: a faulty transport), signing at `clock()`
/// (default: now).
std::unique_ptr<S3Client> make_s3_client(
    S3Options options, std::shared_ptr<HttpTransport> http,
    std::function<std::chrono::system_clock::time_point()> clock = {});

}  // namespace dtrain::objstore

namespace dtrain {

struct S3Client::Impl {
  S3Options options;
  std::shared_ptr<objstore::HttpTransport> http;
  /// The time requests are signed at (tests fix it).
  std::function<std::chrono::system_clock::time_point()> clock = std::chrono::system_clock::now;
  /// Note [Signing key once a day].
  objstore::SigningKeys signing_keys;
  /// Performs `call` with retries; returns a 2xx (or 206) response, throws
  /// the typed error otherwise. `attempts_used` (optional) says how many ran.
  objstore::HttpResponse execute(const objstore::S3Call& call, int* attempts_used = nullptr);
};

}  // namespace dtrain
