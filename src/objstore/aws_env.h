#pragma once
// AWS_* -> values: the only place dtrain reads the AWS environment (Note
// [AWS configuration] in aws_env.cpp), and the shared config files' parser.

#include <map>
#include <optional>
#include <string>

#include "dtrain/object_store.h"

namespace dtrain::objstore {

/// Every AWS_* variable dtrain reads, as set (nullopt: unset or empty).
struct AwsEnv {
  std::optional<std::string> access_key_id;            // AWS_ACCESS_KEY_ID
  std::optional<std::string> secret_access_key;        // AWS_SECRET_ACCESS_KEY
  std::optional<std::string> session_token;            // AWS_SESSION_TOKEN
  std::optional<std::string> profile;                  // AWS_PROFILE
  std::optional<std::string> credentials_file;         // AWS_SHARED_CREDENTIALS_FILE
  std::optional<std::string> config_file;              // AWS_CONFIG_FILE
  std::optional<std::string> region;                   // AWS_REGION
  std::optional<std::string> default_region;           // AWS_DEFAULT_REGION
  std::optional<std::string> endpoint_url_s3;          // AWS_ENDPOINT_URL_S3
  std::optional<std::string> endpoint_url_sts;         // AWS_ENDPOINT_URL_STS
  std::optional<std::string> endpoint_url;             // AWS_ENDPOINT_URL
  std::optional<std::string> addressing_style;         // AWS_S3_ADDRESSING_STYLE
  std::optional<std::string> ca_bundle;                // AWS_CA_BUNDLE
  std::optional<std::string> role_arn;                 // AWS_ROLE_ARN
  std::optional<std::string> role_session_name;        // AWS_ROLE_SESSION_NAME
  std::optional<std::string> web_identity_token_file;  // AWS_WEB_IDENTITY_TOKEN_FILE
  std::optional<std::string> container_full_uri;       // AWS_CONTAINER_CREDENTIALS_FULL_URI
  std::optional<std::string> container_relative_uri;   // AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
  std::optional<std::string> container_token;          // AWS_CONTAINER_AUTHORIZATION_TOKEN
  std::optional<std::string> container_token_file;     // AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE
  std::optional<std::string> ec2_metadata_disabled;    // AWS_EC2_METADATA_DISABLED
  std::optional<std::string> ec2_metadata_endpoint;    // AWS_EC2_METADATA_SERVICE_ENDPOINT
  std::optional<std::string> home;                     // HOME (for ~/.aws)
};

/// Reads the variables above through `env` (the process environment when empty).
AwsEnv read_aws_env(const EnvLookup& env);

/// An INI file as the AWS CLI writes it: section -> key -> value. Keys are
/// lower-cased; `#`/`;` lines are comments; indented lines (nested
/// sub-sections such as `s3 =`) are kept as "parent.key". A missing file
/// gives an empty map; an unreadable one throws InvalidArgument.
using IniFile = std::map<std::string, std::map<std::string, std::string>>;
IniFile read_ini(const std::string& path);

/// One profile's settings: the credentials file's [name] over the config
/// file's [profile name] ([default] for "default").
struct Profile {
  std::string name;
  std::map<std::string, std::string> values;
  /// Where each came from, for messages: "<file> [section]".
  std::string credentials_source;
  std::string config_source;
  bool exists = false;
  std::string get(const std::string& key) const;
};

/// The profile AWS_PROFILE names (or "default") from the shared files
/// (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE, or ~/.aws/...).
Profile load_profile(const AwsEnv& env);

}  // namespace dtrain::objstore
