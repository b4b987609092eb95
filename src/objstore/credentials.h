#pragma once
// Credential providers, one small class per source behind
// dtrain::CredentialsProvider (Note [Credential chain] in credentials.cpp).

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "http/http.h"
#include "objstore/aws_env.h"

namespace dtrain::objstore {

// The HTTP stack (src/http/http.h) under the names the object store uses.
using http::curl_transport;
using http::HttpRequest;
using http::HttpResponse;
using http::HttpTransport;
using http::TransportError;

/// Parses ISO 8601 UTC ("2026-11-25T21:00:00Z", fractions and "+00:00"
/// allowed); nullopt when malformed.
std::optional<std::chrono::system_clock::time_point> parse_iso8601(const std::string& text);

/// Caches what `fetch` returns and fetches again before expiry: once less
/// than min(5 min, half the credentials' lifetime) is left. One caller
/// fetches at a time and no lock is held while it does; others keep using
/// the cached credentials while they are still valid, or wait (bounded) for
/// the fetch. Long-term credentials (no expiration) are fetched once.
std::shared_ptr<CredentialsProvider> refreshing_credentials(std::function<Credentials()> fetch);

/// Runs `command` through /bin/sh (the profile's credential_process) and
/// parses its JSON (Version 1). Throws InvalidArgument naming the command
/// when it fails, times out (`timeout`) or prints something else.
Credentials process_credentials(const std::string& command, const std::string& source,
                                std::chrono::milliseconds timeout = std::chrono::seconds(30));

/// STS AssumeRoleWithWebIdentity with the token in `token_file` (re-read at
/// every fetch: EKS rotates it). `sts_endpoint`: e.g. https://sts.us-east-1.amazonaws.com.
Credentials web_identity_credentials(HttpTransport& http, const std::string& sts_endpoint,
                                     const std::string& role_arn, const std::string& token_file,
                                     const std::string& session_name);

/// Container credentials (ECS, EKS Pod Identity): GET `uri` with the
/// Authorization token from `token` or `token_file` (re-read each time).
Credentials container_credentials(HttpTransport& http, const std::string& uri,
                                  const std::string& token, const std::string& token_file);

/// EC2 instance metadata, IMDSv2 (a session token from PUT /latest/api/token).
Credentials imds_credentials(HttpTransport& http, const std::string& endpoint);

/// The default chain over `env` and its profile: see s3_options_from_env.
/// Also returns the profile (its region and endpoint_url are used too).
std::shared_ptr<CredentialsProvider> default_credentials(const AwsEnv& env, const Profile& profile,
                                                         const std::string& region,
                                                         std::shared_ptr<HttpTransport> http);

}  // namespace dtrain::objstore
