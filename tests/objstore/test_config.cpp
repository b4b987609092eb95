// Options from the environment and the shared files, credential sources,
// refresh, and s3:// locations: what AWS's SDKs would resolve, one-line
// errors for what they would refuse.

#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "objstore/credentials.h"

namespace dtrain::objstore {
namespace {

namespace fs = std::filesystem;

struct Env {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [vars = vars](const std::string& name) -> std::optional<std::string> {
      auto it = vars.find(name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }
};

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/dtrain-objstore-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

Env isolated(const TempDir& dir) {
  // No ~/.aws of the machine running the test, no instance metadata.
  return Env{{{"HOME", dir.path.string()}, {"AWS_EC2_METADATA_DISABLED", "true"}}};
}

TEST(S3Config, EnvironmentKeysRegionAndEndpointAreUsedAsTheSdksUseThem) {
  TempDir dir;
  Env env = isolated(dir);
  env.vars["AWS_ACCESS_KEY_ID"] = "AKID";
  env.vars["AWS_SECRET_ACCESS_KEY"] = "SECRET";
  env.vars["AWS_SESSION_TOKEN"] = "TOKEN";
  env.vars["AWS_DEFAULT_REGION"] = "eu-west-1";
  env.vars["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9000";
  env.vars["AWS_CA_BUNDLE"] = "/etc/ssl/ca.pem";
  S3Options options = s3_options_from_env(env.lookup());
  EXPECT_EQ(options.region, "eu-west-1");
  EXPECT_EQ(options.endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(options.ca_bundle, "/etc/ssl/ca.pem");
  Credentials c = options.credentials->credentials();
  EXPECT_EQ(c.access_key_id, "AKID");
  EXPECT_EQ(c.session_token, "TOKEN");
  env.vars["AWS_REGION"] = "us-west-2";                       // wins over AWS_DEFAULT_REGION
  env.vars["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:9001";  // wins over AWS_ENDPOINT_URL
  options = s3_options_from_env(env.lookup());
  EXPECT_EQ(options.region, "us-west-2");
  EXPECT_EQ(options.endpoint, "http://127.0.0.1:9001");
}

TEST(S3Config, HalfSetKeysAreRefusedWithOneLineNamingTheMissingVariable) {
  TempDir dir;
  Env env = isolated(dir);
  env.vars["AWS_ACCESS_KEY_ID"] = "AKID";
  std::string m = message_of([&] { s3_options_from_env(env.lookup()); });
  EXPECT_EQ(m,
            "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not; fix: set both, or neither "
            "to use a profile or role");
}

TEST(S3Config, ProfilesComeFromTheSharedFilesWithConfigRegion) {
  TempDir dir;
  Env env = isolated(dir);
  env.vars["AWS_SHARED_CREDENTIALS_FILE"] =
      dir.write("creds",
                "[default]\naws_access_key_id = DEF\naws_secret_access_key = DEFS\n"
                "[dev]\naws_access_key_id=DEV\naws_secret_access_key=DEVS\n");
  env.vars["AWS_CONFIG_FILE"] =
      dir.write("config",
                "[profile dev]\nregion = ap-northeast-1\ns3 =\n  addressing_style = path\n"
                "endpoint_url = http://127.0.0.1:7000\n");
  S3Options options = s3_options_from_env(env.lookup());
  EXPECT_EQ(options.credentials->credentials().access_key_id, "DEF");
  env.vars["AWS_PROFILE"] = "dev";
  options = s3_options_from_env(env.lookup());
  Credentials c = options.credentials->credentials();
  EXPECT_EQ(c.access_key_id, "DEV");
  EXPECT_NE(c.source.find("profile dev"), std::string::npos) << c.source;
  EXPECT_EQ(options.region, "ap-northeast-1");
  EXPECT_EQ(options.endpoint, "http://127.0.0.1:7000");
  EXPECT_EQ(options.addressing, S3Addressing::kPath);
  env.vars["AWS_PROFILE"] = "nope";
  EXPECT_NE(message_of([&] {
              s3_options_from_env(env.lookup());
            }).find("AWS_PROFILE=nope names a profile"),
            std::string::npos);
}

TEST(S3Config, CredentialProcessOutputIsParsedAndItsFailureNamed) {
  TempDir dir;
  Env env = isolated(dir);
  std::string script =
      dir.write("creds.sh",
                "echo '{\"Version\": 1, \"AccessKeyId\": \"PROC\", \"SecretAccessKey\": \"PS\", "
                "\"SessionToken\": \"PT\", \"Expiration\": \"2099-01-01T00:00:00Z\"}'\n");
  env.vars["AWS_CONFIG_FILE"] =
      dir.write("config", "[default]\ncredential_process = sh " + script + "\n");
  Credentials c = s3_options_from_env(env.lookup()).credentials->credentials();
  EXPECT_EQ(c.access_key_id, "PROC");
  EXPECT_EQ(c.session_token, "PT");
  ASSERT_TRUE(c.expiration);
  EXPECT_EQ(std::chrono::system_clock::to_time_t(*c.expiration), 4070908800);
  env.vars["AWS_CONFIG_FILE"] =
      dir.write("config2", "[default]\ncredential_process = sh -c 'exit 3'\n");
  std::string m = message_of([&] { s3_options_from_env(env.lookup()).credentials->credentials(); });
  EXPECT_NE(m.find("exited with status 3"), std::string::npos) << m;
}

TEST(S3Config, AMalformedCredentialProcessAnswerIsRefusedWithoutQuotingTheSecret) {
  TempDir dir;
  std::string script = dir.write(
      "bad.sh", "echo '{\"AccessKeyId\": \"AKID\", \"SecretAccessKey\": \"TOPSECRET\",}'\n");
  std::string m = message_of([&] { process_credentials("sh " + script, "test"); });
  EXPECT_NE(m.find("is not JSON"), std::string::npos) << m;
  EXPECT_EQ(m.find("TOPSECRET"), std::string::npos) << m;
  EXPECT_EQ(m.find("AKID"), std::string::npos) << m;
}

TEST(S3Config, ACredentialProcessThatKeepsRunningAfterMoreThanAMebibyteEndsWithinItsTimeout) {
  TempDir dir;
  // Writes 2 MiB, then would run for a minute with stdout closed, in a child
  // of its shell (whose pid it leaves in sleep.pid).
  const std::string pid_file = (dir.path / "sleep.pid").string();
  std::string script = dir.write("big.sh",
                                 "head -c 2097152 /dev/zero | tr '\\0' x; exec >&-; "
                                 "sleep 60 & echo $! > " +
                                     pid_file + "; wait\n");
  const auto start = std::chrono::steady_clock::now();
  std::string m = message_of(
      [&] { process_credentials("sh " + script, "test", std::chrono::milliseconds(2000)); });
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(10)) << m;
  EXPECT_FALSE(m.empty());
  // The timeout ended what the command started too (its process group).
  std::ifstream in(pid_file);
  pid_t sleeper = 0;
  ASSERT_TRUE(in >> sleeper) << "the script did not start its child";
  // Gone, or dead and waiting for its new parent (init) to reap it.
  const auto dead = [sleeper] {
    if (kill(sleeper, 0) != 0 && errno == ESRCH) return true;
    std::ifstream stat("/proc/" + std::to_string(sleeper) + "/stat");
    std::string pid, comm, state;
    return stat >> pid >> comm >> state && state == "Z";
  };
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = dead();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "the credential process's child " << sleeper << " outlived its timeout";
}

TEST(S3Config, NoCredentialsAnywhereIsOneLineWithTheFix) {
  TempDir dir;
  std::string m = message_of([&] { s3_options_from_env(isolated(dir).lookup()); });
  EXPECT_NE(m.find("no AWS credentials"), std::string::npos) << m;
  EXPECT_NE(m.find("fix: set AWS_ACCESS_KEY_ID"), std::string::npos) << m;
}

TEST(S3Config, WebIdentityNeedsBothTheRoleAndTheTokenFile) {
  TempDir dir;
  Env env = isolated(dir);
  env.vars["AWS_ROLE_ARN"] = "arn:aws:iam::1:role/r";
  EXPECT_NE(message_of([&] {
              s3_options_from_env(env.lookup());
            }).find("AWS_ROLE_ARN is set without AWS_WEB_IDENTITY_TOKEN_FILE"),
            std::string::npos);
}

TEST(S3Config, MalformedEndpointAndAddressingStyleAreRefused) {
  TempDir dir;
  Env env = isolated(dir);
  env.vars["AWS_ACCESS_KEY_ID"] = "A";
  env.vars["AWS_SECRET_ACCESS_KEY"] = "S";
  env.vars["AWS_ENDPOINT_URL_S3"] = "minio:9000";
  EXPECT_NE(
      message_of([&] { s3_options_from_env(env.lookup()); }).find("is not http(s)://host[:port]"),
      std::string::npos);
  env.vars.erase("AWS_ENDPOINT_URL_S3");
  env.vars["AWS_S3_ADDRESSING_STYLE"] = "dns";
  EXPECT_NE(
      message_of([&] { s3_options_from_env(env.lookup()); }).find("AWS_S3_ADDRESSING_STYLE='dns'"),
      std::string::npos);
}

TEST(S3Config, TemporaryCredentialsAreFetchedAgainBeforeTheyExpire) {
  int fetches = 0;
  auto provider = refreshing_credentials([&fetches] {
    ++fetches;
    return Credentials{"K" + std::to_string(fetches), "S", "T",
                       std::chrono::system_clock::now() + std::chrono::milliseconds(800), "test"};
  });
  EXPECT_EQ(provider->credentials().access_key_id, "K1");
  EXPECT_EQ(provider->credentials().access_key_id, "K1");       // cached
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // past half its life
  Credentials c = provider->credentials();
  EXPECT_EQ(c.access_key_id, "K2");
  EXPECT_EQ(fetches, 2);
  auto forever = refreshing_credentials([&fetches] {
    ++fetches;
    return Credentials{"L", "S", "", std::nullopt, "test"};
  });
  forever->credentials();
  forever->credentials();
  EXPECT_EQ(fetches, 3);
}

TEST(S3Config, Iso8601TimesParseWithFractionsAndOffsets) {
  EXPECT_EQ(std::chrono::system_clock::to_time_t(*parse_iso8601("2026-11-25T21:00:00Z")),
            1795640400);
  EXPECT_EQ(std::chrono::system_clock::to_time_t(*parse_iso8601("2026-11-25T21:00:00.123+00:00")),
            1795640400);
  EXPECT_FALSE(parse_iso8601("tomorrow"));
}

TEST(S3Uri, LocationsParseAndBadOnesSayWhatIsWrong) {
  S3Uri uri = S3Uri::parse("s3://bucket/a/b/");
  EXPECT_EQ(uri.bucket, "bucket");
  EXPECT_EQ(uri.key, "a/b/");
  EXPECT_EQ(uri.str(), "s3://bucket/a/b/");
  EXPECT_EQ(S3Uri::parse("s3://bucket").key, "");
  EXPECT_TRUE(S3Uri::is_s3("s3://x"));
  EXPECT_FALSE(S3Uri::is_s3("/data/s3://x"));
  EXPECT_TRUE(S3Uri::is_s3_location("s3://b/p"));
  EXPECT_FALSE(S3Uri::is_s3_location("/data/run"));
  EXPECT_EQ(message_of([] { S3Uri::is_s3_location("gs://b/p"); }),
            "'gs://b/p' is not an s3:// location (unknown scheme 'gs'); fix: write "
            "s3://<bucket>/<prefix>, or a local path");
  EXPECT_EQ(message_of([] { S3Uri::parse("s3://"); }),
            "'s3://' names no bucket; fix: write s3://<bucket>/<prefix>");
  EXPECT_EQ(message_of([] { S3Uri::parse("s3:///prefix"); }),
            "'s3:///prefix' names no bucket; fix: write s3://<bucket>/<prefix>");
  EXPECT_EQ(message_of([] { S3Uri::parse("gs://bucket/x"); }),
            "'gs://bucket/x' is not an s3:// location (unknown scheme 'gs'); fix: write "
            "s3://<bucket>/<prefix>, or a local path");
}

}  // namespace
}  // namespace dtrain::objstore
