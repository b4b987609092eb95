#include "common/strings.h"
#include "objstore/aws_env.h"
#include "objstore/credentials.h"
#include "objstore/s3_request.h"

namespace dtrain {

bool S3Uri::is_s3(std::string_view location) { return location.rfind("s3://", 0) == 0; }

bool S3Uri::is_s3_location(std::string_view location) {
  if (is_s3(location)) return true;
  if (location.find("://") != std::string_view::npos) parse(location);  // throws: another scheme
  return false;
}

S3Uri S3Uri::parse(std::string_view uri) {
  const auto sep = uri.find("://");
  if (sep == std::string_view::npos || uri.substr(0, sep) != "s3") {
    throw InvalidArgument(cat(
        "'", uri, "' is not an s3:// location",
        sep == std::string_view::npos ? "" : cat(" (unknown scheme '", uri.substr(0, sep), "')"),
        "; fix: write s3://<bucket>/<prefix>, or a local path"));
  }
  std::string_view rest = uri.substr(sep + 3);
  const auto slash = rest.find('/');
  S3Uri out;
  out.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) out.key = std::string(rest.substr(slash + 1));
  if (out.bucket.empty()) {
    throw InvalidArgument(cat("'", uri, "' names no bucket; fix: write s3://<bucket>/<prefix>"));
  }
  for (char c : out.bucket) {
    if (static_cast<unsigned char>(c) <= ' ' || c == '?' || c == '#' || c == '\\') {
      throw InvalidArgument(cat("'", uri, "': '", out.bucket,
                                "' is not a bucket name; fix: write s3://<bucket>/<prefix>"));
    }
  }
  return out;
}

std::string S3Uri::str() const {
  return key.empty() ? "s3://" + bucket : "s3://" + bucket + "/" + key;
}

S3Options s3_options_from_env(const EnvLookup& lookup) {
  const objstore::AwsEnv env = objstore::read_aws_env(lookup);
  const objstore::Profile profile = objstore::load_profile(env);
  S3Options options;
  // Region: AWS_REGION, AWS_DEFAULT_REGION, the profile's, us-east-1.
  options.region = env.region.value_or(env.default_region.value_or(profile.get("region")));
  if (options.region.empty()) options.region = "us-east-1";
  // Endpoint: the S3-specific one first, then the global one, then the profile's.
  std::string endpoint = env.endpoint_url_s3.value_or(env.endpoint_url.value_or(""));
  if (endpoint.empty()) endpoint = profile.get("s3.endpoint_url");
  if (endpoint.empty()) endpoint = profile.get("endpoint_url");
  options.endpoint = endpoint;
  if (!endpoint.empty()) objstore::parse_endpoint(endpoint);  // one line when malformed
  std::string style = env.addressing_style.value_or(profile.get("s3.addressing_style"));
  if (style == "path") {
    options.addressing = S3Addressing::kPath;
  } else if (style == "virtual") {
    options.addressing = S3Addressing::kVirtual;
  } else if (!style.empty() && style != "auto") {
    throw InvalidArgument(cat("AWS_S3_ADDRESSING_STYLE='", style,
                              "' is not path, virtual or auto; fix: use one of those"));
  }
  options.ca_bundle = env.ca_bundle.value_or(profile.get("ca_bundle"));
  options.credentials =
      objstore::default_credentials(env, profile, options.region, objstore::curl_transport());
  return options;
}

namespace objstore {

std::unique_ptr<S3Client> make_s3_client(
    S3Options options, std::shared_ptr<HttpTransport> http,
    std::function<std::chrono::system_clock::time_point()> clock) {
  auto impl = std::make_unique<S3Client::Impl>();
  if (clock) impl->clock = std::move(clock);
  impl->options = std::move(options);
  impl->http = std::move(http);
  return std::make_unique<S3Client>(std::move(impl));
}

}  // namespace objstore
}  // namespace dtrain
