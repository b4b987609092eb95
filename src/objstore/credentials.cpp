#include "objstore/credentials.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <ctime>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/fd.h"
#include "common/printable.h"
#include "common/strings.h"
#include "objstore/sigv4.h"
#include "objstore/xml.h"

extern char** environ;

namespace dtrain::objstore {

// Note [Credential chain]
// The order of botocore's default chain, minus what dtrain does not
// support (SSO, assume-role from a source profile): environment keys, web
// identity (environment, then profile), the profile's static keys, its
// credential_process, container credentials, EC2 instance metadata. The
// first source that is *configured* is chosen when the options are made;
// sources that need the network fetch lazily, at the first request, so
// making options never blocks. Temporary credentials go through
// refreshing_credentials(), which fetches again before they expire.

using Clock = std::chrono::system_clock;

std::optional<Clock::time_point> parse_iso8601(const std::string& text) {
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6) {
    return std::nullopt;
  }
  std::string_view rest = std::string_view(text).substr(static_cast<size_t>(consumed));
  if (!rest.empty() && rest.front() == '.') {
    size_t i = 1;
    while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) ++i;
    rest.remove_prefix(i);
  }
  if (rest != "Z" && rest != "+00:00" && rest != "") return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return Clock::from_time_t(timegm(&tm));
}

namespace {

class StaticProvider : public CredentialsProvider {
 public:
  explicit StaticProvider(Credentials credentials) : credentials_(std::move(credentials)) {}
  Credentials credentials() override { return credentials_; }

 private:
  Credentials credentials_;
};

class RefreshingProvider : public CredentialsProvider {
 public:
  explicit RefreshingProvider(std::function<Credentials()> fetch) : fetch_(std::move(fetch)) {}

  Credentials credentials() override {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      const auto now = Clock::now();
      if (cached_ && !needs_refresh(now)) return *cached_;
      if (!fetching_) break;
      // Another caller is fetching: use what we have while it is valid.
      if (cached_ && (!cached_->expiration || now < *cached_->expiration)) return *cached_;
      if (!cv_.wait_for(lock, std::chrono::seconds(60), [this] { return !fetching_; })) {
        throw Error("credentials: another thread's fetch did not finish in 60 s");
      }
    }
    fetching_ = true;
    lock.unlock();
    try {
      Credentials fresh = fetch_();
      lock.lock();
      fetched_at_ = Clock::now();
      cached_ = std::move(fresh);
      fetching_ = false;
      cv_.notify_all();
      return *cached_;
    } catch (...) {
      if (!lock.owns_lock()) lock.lock();
      fetching_ = false;
      cv_.notify_all();
      // An early refresh that failed: the cached credentials still work
      // until they expire (the next call tries again).
      if (cached_ && cached_->expiration && Clock::now() < *cached_->expiration) return *cached_;
      throw;
    }
  }

 private:
  bool needs_refresh(Clock::time_point now) const {
    if (!cached_->expiration) return false;
    const auto lifetime = *cached_->expiration - fetched_at_;
    const auto window = std::min<Clock::duration>(std::chrono::minutes(5), lifetime / 2);
    return now >= *cached_->expiration - window;
  }

  std::function<Credentials()> fetch_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::optional<Credentials> cached_;
  Clock::time_point fetched_at_;
  bool fetching_ = false;
};

// Credentials from a JSON object with the given field names.
Credentials from_json(const std::string& text, const char* token_field, const std::string& source) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // The body is never quoted: it may hold a secret key.
    throw InvalidArgument(cat(source, ": the answer (", text.size(),
                              " bytes) is not JSON: a syntax error at byte ", e.byte,
                              "; fix: check that it is an AWS credentials source"));
  }
  auto field = [&json](const char* name) {
    auto it = json.find(name);
    return it != json.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  Credentials out;
  out.access_key_id = field("AccessKeyId");
  out.secret_access_key = field("SecretAccessKey");
  out.session_token = field(token_field);
  out.source = source;
  if (out.access_key_id.empty() || out.secret_access_key.empty()) {
    throw InvalidArgument(cat(source, ": the answer has no AccessKeyId/SecretAccessKey",
                              "; fix: check that it is an AWS credentials source"));
  }
  std::string expiration = field("Expiration");
  if (!expiration.empty()) {
    out.expiration = parse_iso8601(expiration);
    if (!out.expiration) {
      throw InvalidArgument(cat(source, ": Expiration '", expiration, "' is not ISO 8601 UTC"));
    }
  }
  return out;
}

std::string read_token(const std::string& path, const char* what) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    throw InvalidArgument(cat(what, ": cannot read the token file ", path,
                              "; fix: mount it or correct the variable naming it"));
  }
  std::string token = text.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  return token;
}

std::string form_encode(const Pairs& pairs) { return canonical_query(pairs); }

bool is_true(std::string value) {
  for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return value == "true";
}

HttpResponse checked(HttpTransport& http, const HttpRequest& request, const std::string& what) {
  HttpResponse response;
  try {
    response = http.perform(request);
  } catch (const TransportError& e) {
    throw ObjectStoreError(cat(what, ": no answer from ", request.url, ": ", e.what(),
                               "; fix: check the endpoint and the network"),
                           0, "", "", "");
  }
  if (response.status / 100 != 2) {
    std::string message;
    if (auto xml = parse_xml(response.body)) {
      const XmlElement* error = xml->name == "Error" ? &*xml : xml->child("Error");
      if (error) {
        message = cat(" ", printable(error->child_text("Code")), ": ",
                      printable(error->child_text("Message"), 200));
      }
    }
    throw ObjectStoreError(cat(what, ": HTTP ", response.status, " from ", request.url, message,
                               "; fix: check the role, token and endpoint"),
                           response.status, "", "", "");
  }
  return response;
}

}  // namespace

std::shared_ptr<CredentialsProvider> refreshing_credentials(std::function<Credentials()> fetch) {
  return std::make_shared<RefreshingProvider>(std::move(fetch));
}

Credentials process_credentials(const std::string& command, const std::string& source,
                                std::chrono::milliseconds timeout) {
  const std::string what = cat("credential_process '", command, "' (", source, ")");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(cat(what, ": pipe failed"));
  detail::Fd read_end(fds[0]);
  detail::Fd write_end(fds[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDOUT_FILENO);
  // Note [The credential process's group]: the command runs in a process
  // group of its own, so that a timeout kills what it started too (a shell's
  // children would otherwise outlive it, holding our caller's stderr open).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  pid_t pid = -1;
  int rc = posix_spawn(&pid, "/bin/sh", &actions, &attr, const_cast<char**>(argv), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw InvalidArgument(cat(what, ": cannot start /bin/sh"));
  write_end.reset();
  std::string output;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{read_end.get(), POLLIN, 0};
    int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buf[4096];
    ssize_t n = read(read_end.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output.append(buf, static_cast<size_t>(n));
    if (output.size() > (1 << 20)) break;
  }
  // The child may still be running (output past 1 MiB, or stdout closed
  // early): close our end and wait for it until the same deadline only.
  read_end.reset();
  int status = 0;
  for (;;) {
    if (timed_out) kill(-pid, SIGKILL);  // the whole group
    const pid_t done = waitpid(pid, &status, timed_out ? 0 : WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR)) break;
    if (done == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        timed_out = true;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
  if (!timed_out && output.size() > (1 << 20)) {
    throw InvalidArgument(cat(what, ": answered more than 1 MiB; fix: check the command"));
  }
  if (timed_out) {
    throw InvalidArgument(
        cat(what, ": no answer in ", timeout.count(), " ms; fix: check the command"));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw InvalidArgument(cat(what, ": exited with status ",
                              WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                              "; fix: run it by hand and check its output"));
  }
  return from_json(output, "SessionToken", what);
}

Credentials web_identity_credentials(HttpTransport& http, const std::string& sts_endpoint,
                                     const std::string& role_arn, const std::string& token_file,
                                     const std::string& session_name) {
  const std::string what = cat("web identity (role ", role_arn, ")");
  const std::string body =
      form_encode({{"Action", "AssumeRoleWithWebIdentity"},
                   {"Version", "2011-06-15"},
                   {"RoleArn", role_arn},
                   {"RoleSessionName", session_name},
                   {"WebIdentityToken", read_token(token_file, what.c_str())}});
  HttpRequest request;
  request.method = "POST";
  request.url = sts_endpoint + "/";
  request.headers = {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
                     {"Accept", "application/xml"}};
  request.body = body;
  request.timeout = std::chrono::seconds(30);
  HttpResponse response = checked(http, request, what);
  auto xml = parse_xml(response.body);
  const XmlElement* result = xml ? xml->child("AssumeRoleWithWebIdentityResult") : nullptr;
  const XmlElement* creds = result ? result->child("Credentials") : nullptr;
  if (!creds) {
    throw ObjectStoreError(cat(what, ": ", request.url, " did not answer with STS credentials",
                               "; fix: point AWS_ENDPOINT_URL_STS at STS"),
                           response.status, "", "", "");
  }
  Credentials out;
  out.access_key_id = creds->child_text("AccessKeyId");
  out.secret_access_key = creds->child_text("SecretAccessKey");
  out.session_token = creds->child_text("SessionToken");
  out.expiration = parse_iso8601(creds->child_text("Expiration"));
  out.source = cat("web identity (STS ", sts_endpoint, ", role ", role_arn, ")");
  if (out.access_key_id.empty() || out.secret_access_key.empty() || !out.expiration) {
    throw ObjectStoreError(
        cat(what, ": STS's answer lacks AccessKeyId, SecretAccessKey or Expiration"),
        response.status, "", "", "");
  }
  return out;
}

Credentials container_credentials(HttpTransport& http, const std::string& uri,
                                  const std::string& token, const std::string& token_file) {
  const std::string what = cat("container credentials (", uri, ")");
  HttpRequest request;
  request.url = uri;
  request.timeout = std::chrono::seconds(5);
  request.connect_timeout = std::chrono::seconds(2);
  std::string authorization = token_file.empty() ? token : read_token(token_file, what.c_str());
  if (!authorization.empty()) request.headers.emplace_back("Authorization", authorization);
  HttpResponse response = checked(http, request, what);
  return from_json(response.body, "Token", what);
}

// Note [No instance metadata, or a failing one]
// The instance metadata service is the last source, asked on every machine
// that has no other: off EC2 nothing answers its address, which means "no
// credentials anywhere", a configuration error (InvalidArgument, not
// retried). Once it has answered, an error from it (503 while it is busy,
// a request that timed out) is a failure of the moment: an ObjectStoreError,
// which S3Client retries like the request itself (S3Client::Impl::execute).
// An instance without a role answers 404 (or nothing) for the role list:
// configuration again.
Credentials imds_credentials(HttpTransport& http, const std::string& endpoint) {
  const std::string what = cat("EC2 instance metadata (", endpoint, ")");
  HttpRequest request;
  request.timeout = std::chrono::seconds(2);
  request.connect_timeout = std::chrono::seconds(1);
  request.method = "PUT";
  request.url = endpoint + "/latest/api/token";
  request.headers = {{"X-aws-ec2-metadata-token-ttl-seconds", "21600"}};
  std::string token;
  try {
    token = checked(http, request, what).body;
  } catch (const ObjectStoreError& e) {
    if (e.status != 0) throw;  // it answered: a failing service, retried
    throw InvalidArgument(
        cat("no AWS credentials: none in the environment, no web identity, no profile keys, no "
            "container credentials, and no EC2 instance metadata (",
            e.what(), "); fix: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or AWS_PROFILE"));
  }
  request.method = "GET";
  request.headers = {{"X-aws-ec2-metadata-token", token}};
  request.url = endpoint + "/latest/meta-data/iam/security-credentials/";
  std::string role;
  try {
    role = first_line(checked(http, request, what).body);
  } catch (const ObjectStoreError& e) {
    if (e.status != 404) throw;
  }
  if (role.empty())
    throw InvalidArgument(cat(what, ": the instance has no IAM role; fix: attach one"));
  request.url += role;
  return from_json(checked(http, request, what).body, "Token", cat(what, " role ", role));
}

std::shared_ptr<CredentialsProvider> default_credentials(const AwsEnv& env, const Profile& profile,
                                                         const std::string& region,
                                                         std::shared_ptr<HttpTransport> http) {
  // 1. The environment's keys; half of a pair is a mistake, not "unset".
  if (env.access_key_id.has_value() != env.secret_access_key.has_value()) {
    throw InvalidArgument(env.access_key_id ? "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY "
                                              "is not; fix: set both, or neither "
                                              "to use a profile or role"
                                            : "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID "
                                              "is not; fix: set both, or neither "
                                              "to use a profile or role");
  }
  if (env.access_key_id) {
    return static_credentials({*env.access_key_id, *env.secret_access_key,
                               env.session_token.value_or(""), std::nullopt,
                               "environment (AWS_ACCESS_KEY_ID)"});
  }
  // 2. Web identity: environment, then profile.
  std::string role_arn = env.role_arn.value_or("");
  std::string token_file = env.web_identity_token_file.value_or("");
  if (role_arn.empty() && token_file.empty()) {
    role_arn = profile.get("role_arn");
    token_file = profile.get("web_identity_token_file");
    if (token_file.empty()) role_arn.clear();  // role_arn + source_profile: not supported here
  }
  if (!role_arn.empty() || !token_file.empty()) {
    if (role_arn.empty() || token_file.empty()) {
      throw InvalidArgument(cat(role_arn.empty() ? "AWS_WEB_IDENTITY_TOKEN_FILE" : "AWS_ROLE_ARN",
                                " is set without ",
                                role_arn.empty() ? "AWS_ROLE_ARN" : "AWS_WEB_IDENTITY_TOKEN_FILE",
                                "; fix: set both (EKS's service-account role sets both)"));
    }
    std::string sts = env.endpoint_url_sts.value_or(
        env.endpoint_url.value_or(cat("https://sts.", region, ".amazonaws.com")));
    std::string session = env.role_session_name.value_or(profile.get("role_session_name"));
    if (session.empty()) session = cat("dtrain-", std::time(nullptr));
    return refreshing_credentials([http, sts, role_arn, token_file, session] {
      return web_identity_credentials(*http, sts, role_arn, token_file, session);
    });
  }
  // 3. The profile's keys, then its credential_process.
  const std::string key = profile.get("aws_access_key_id");
  const std::string secret = profile.get("aws_secret_access_key");
  const std::string where =
      cat("profile ", profile.name, " in ",
          profile.credentials_source.empty() ? profile.config_source : profile.credentials_source);
  if (!key.empty() || !secret.empty()) {
    if (key.empty() || secret.empty()) {
      throw InvalidArgument(cat(
          where, " has ", key.empty() ? "aws_secret_access_key" : "aws_access_key_id", " without ",
          key.empty() ? "aws_access_key_id" : "aws_secret_access_key", "; fix: set both"));
    }
    return static_credentials({key, secret, profile.get("aws_session_token"), std::nullopt, where});
  }
  if (std::string command = profile.get("credential_process"); !command.empty()) {
    return refreshing_credentials([command, where] { return process_credentials(command, where); });
  }
  if (env.profile && !profile.exists) {
    throw InvalidArgument(cat("AWS_PROFILE=", *env.profile, " names a profile that is in neither ",
                              env.credentials_file.value_or("~/.aws/credentials"), " nor ",
                              env.config_file.value_or("~/.aws/config"),
                              "; fix: correct AWS_PROFILE or add the profile"));
  }
  // 4. Container credentials.
  std::string uri = env.container_full_uri.value_or("");
  if (uri.empty() && env.container_relative_uri)
    uri = "http://169.254.170.2" + *env.container_relative_uri;
  if (!uri.empty()) {
    std::string token = env.container_token.value_or("");
    std::string file = env.container_token_file.value_or("");
    return refreshing_credentials(
        [http, uri, token, file] { return container_credentials(*http, uri, token, file); });
  }
  // 5. EC2 instance metadata.
  if (is_true(env.ec2_metadata_disabled.value_or(""))) {
    throw InvalidArgument(
        "no AWS credentials: none in the environment (AWS_ACCESS_KEY_ID), no web identity, no "
        "profile keys, no container credentials, and AWS_EC2_METADATA_DISABLED=true; fix: set "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or AWS_PROFILE");
  }
  std::string imds = env.ec2_metadata_endpoint.value_or("http://169.254.169.254");
  while (!imds.empty() && imds.back() == '/') imds.pop_back();
  return refreshing_credentials([http, imds] { return imds_credentials(*http, imds); });
}

}  // namespace dtrain::objstore

namespace dtrain {

std::shared_ptr<CredentialsProvider> static_credentials(Credentials credentials) {
  return std::make_shared<objstore::StaticProvider>(std::move(credentials));
}

}  // namespace dtrain
