#include "objstore/aws_env.h"

#include <cstdlib>
#include <fstream>

#include "common/strings.h"

namespace dtrain::objstore {

// Note [AWS configuration]
// dtrain resolves region, endpoint and credentials the way AWS's SDKs do
// (botocore, the AWS CLI, the C++ SDK), so a job configured for `aws s3`
// works unchanged. read_aws_env() is the one reader of AWS_* variables; the
// rest (s3_options_from_env, the providers) take its AwsEnv. Precedence per
// setting: environment, then the profile in the shared files, then the
// default. Empty variables count as unset, as in botocore.

namespace {

std::string trim(std::string_view text) {
  size_t b = text.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  size_t e = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(b, e - b + 1));
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string home_path(const AwsEnv& env, const std::string& rest) {
  return env.home.value_or("") + rest;
}

}  // namespace

AwsEnv read_aws_env(const EnvLookup& lookup) {
  EnvLookup env = lookup ? lookup : [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (!value) return std::nullopt;
    return std::string(value);
  };
  auto get = [&env](const char* name) -> std::optional<std::string> {
    auto value = env(name);
    if (!value || value->empty()) return std::nullopt;
    return value;
  };
  AwsEnv out;
  out.access_key_id = get("AWS_ACCESS_KEY_ID");
  out.secret_access_key = get("AWS_SECRET_ACCESS_KEY");
  out.session_token = get("AWS_SESSION_TOKEN");
  out.profile = get("AWS_PROFILE");
  out.credentials_file = get("AWS_SHARED_CREDENTIALS_FILE");
  out.config_file = get("AWS_CONFIG_FILE");
  out.region = get("AWS_REGION");
  out.default_region = get("AWS_DEFAULT_REGION");
  out.endpoint_url_s3 = get("AWS_ENDPOINT_URL_S3");
  out.endpoint_url_sts = get("AWS_ENDPOINT_URL_STS");
  out.endpoint_url = get("AWS_ENDPOINT_URL");
  out.addressing_style = get("AWS_S3_ADDRESSING_STYLE");
  out.ca_bundle = get("AWS_CA_BUNDLE");
  out.role_arn = get("AWS_ROLE_ARN");
  out.role_session_name = get("AWS_ROLE_SESSION_NAME");
  out.web_identity_token_file = get("AWS_WEB_IDENTITY_TOKEN_FILE");
  out.container_full_uri = get("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  out.container_relative_uri = get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  out.container_token = get("AWS_CONTAINER_AUTHORIZATION_TOKEN");
  out.container_token_file = get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  out.ec2_metadata_disabled = get("AWS_EC2_METADATA_DISABLED");
  out.ec2_metadata_endpoint = get("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  out.home = get("HOME");
  return out;
}

IniFile read_ini(const std::string& path) {
  IniFile ini;
  std::ifstream in(path);
  if (!in) return ini;  // a missing file is an empty one, as in the SDKs
  std::string line;
  std::string section;
  std::string parent;  // the key of an open nested block ("s3 =")
  while (std::getline(in, line)) {
    std::string text = trim(line);
    if (text.empty() || text[0] == '#' || text[0] == ';') continue;
    if (text.front() == '[' && text.back() == ']') {
      section = trim(std::string_view(text).substr(1, text.size() - 2));
      ini[section];
      parent.clear();
      continue;
    }
    auto eq = text.find('=');
    if (eq == std::string::npos || section.empty()) continue;
    std::string key = lower(trim(std::string_view(text).substr(0, eq)));
    std::string value = trim(std::string_view(text).substr(eq + 1));
    const bool indented = line[0] == ' ' || line[0] == '\t';
    if (indented && !parent.empty()) {
      ini[section][parent + "." + key] = value;
    } else {
      ini[section][key] = value;
      parent = value.empty() ? key : "";
    }
  }
  return ini;
}

std::string Profile::get(const std::string& key) const {
  auto it = values.find(key);
  return it == values.end() ? std::string() : it->second;
}

Profile load_profile(const AwsEnv& env) {
  Profile profile;
  profile.name = env.profile.value_or("default");
  const std::string credentials_path =
      env.credentials_file.value_or(home_path(env, "/.aws/credentials"));
  const std::string config_path = env.config_file.value_or(home_path(env, "/.aws/config"));
  IniFile config = read_ini(config_path);
  const std::string config_section = profile.name == "default" && !config.count("profile default")
                                         ? "default"
                                         : "profile " + profile.name;
  if (auto it = config.find(config_section); it != config.end()) {
    profile.values = it->second;
    profile.config_source = cat(config_path, " [", config_section, "]");
    profile.exists = true;
  }
  IniFile credentials = read_ini(credentials_path);
  if (auto it = credentials.find(profile.name); it != credentials.end()) {
    for (const auto& [key, value] : it->second) profile.values[key] = value;
    profile.credentials_source = cat(credentials_path, " [", profile.name, "]");
    profile.exists = true;
  }
  return profile;
}

}  // namespace dtrain::objstore
