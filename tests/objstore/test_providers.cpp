// Container credentials (ECS, EKS Pod Identity) and EC2 instance metadata
// (IMDSv2) against a server of our own on loopback
// (tests/objstore/creds_server.py), through s3_options_from_env as a job
// would. Needs only python3.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "dtrain/object_store.h"
#include "peer.h"
#include "support/env.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

struct CredsServer {
  int port = testing::free_port();
  testing::ChildProcess process;
  // failures: the first requests for the role's credentials answered 503.
  explicit CredsServer(int failures = 0)
      : process({"/usr/bin/python3", DTRAIN_SOURCE_DIR "/tests/objstore/creds_server.py",
                 std::to_string(port), "Bearer pod-identity-token", std::to_string(failures)}) {}
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port) + path;
  }
};

struct Scratch {
  fs::path dir;
  Scratch() {
    char tmpl[] = "/tmp/dtrain-creds-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~Scratch() { fs::remove_all(dir); }
};

using testing::env_of;

TEST(CredentialProviders, ContainerCredentialsSendTheTokenFromItsFile) {
  CredsServer server;
  ASSERT_TRUE(testing::wait_for_port(server.port, 30));
  Scratch scratch;
  const fs::path token = scratch.dir / "token";
  std::ofstream(token) << "Bearer pod-identity-token\n";
  std::map<std::string, std::string> vars = {
      {"HOME", scratch.dir.string()},
      {"AWS_CONTAINER_CREDENTIALS_FULL_URI", server.url("/creds")},
      {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", token.string()}};
  Credentials c = s3_options_from_env(env_of(vars)).credentials->credentials();
  EXPECT_EQ(c.access_key_id, "CONTAINERKEY");
  EXPECT_EQ(c.session_token, "ctoken");
  EXPECT_TRUE(c.expiration);

  std::ofstream(token) << "Bearer stale\n";
  try {
    s3_options_from_env(env_of(vars)).credentials->credentials();
    FAIL() << "a refused token gave credentials";
  } catch (const ObjectStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("container credentials (" + server.url("/creds") +
                                         "): HTTP 401"),
              std::string::npos)
        << e.what();
  }
  // Keys in the environment come first: the container is not asked.
  vars["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  vars["AWS_SECRET_ACCESS_KEY"] = "envsecret";
  EXPECT_EQ(s3_options_from_env(env_of(vars)).credentials->credentials().access_key_id, "ENVKEY");
}

TEST(CredentialProviders, InstanceMetadataIsAskedWithAnImdsV2SessionToken) {
  CredsServer server;
  ASSERT_TRUE(testing::wait_for_port(server.port, 30));
  Scratch scratch;
  auto env = env_of(
      {{"HOME", scratch.dir.string()}, {"AWS_EC2_METADATA_SERVICE_ENDPOINT", server.url("/")}});
  Credentials c = s3_options_from_env(env).credentials->credentials();
  EXPECT_EQ(c.access_key_id, "IMDSKEY");
  EXPECT_EQ(c.session_token, "itoken");
  EXPECT_NE(c.source.find("role trainer-role"), std::string::npos) << c.source;
}

// Note [No instance metadata, or a failing one]: a service that answered and
// then failed is an ObjectStoreError, which S3Client retries; the next ask
// gets the credentials.
TEST(CredentialProviders, ABusyInstanceMetadataServiceIsARetryableErrorNotAConfigurationOne) {
  CredsServer server(1);
  ASSERT_TRUE(testing::wait_for_port(server.port, 30));
  Scratch scratch;
  auto provider =
      s3_options_from_env(env_of({{"HOME", scratch.dir.string()},
                                  {"AWS_EC2_METADATA_SERVICE_ENDPOINT", server.url("/")}}))
          .credentials;
  try {
    provider->credentials();
    FAIL() << "a 503 gave credentials";
  } catch (const InvalidArgument& e) {
    FAIL() << "a busy service was taken for a configuration error: " << e.what();
  } catch (const ObjectStoreError& e) {
    EXPECT_EQ(e.status, 503) << e.what();
  }
  EXPECT_EQ(provider->credentials().access_key_id, "IMDSKEY");
}

TEST(CredentialProviders, NoInstanceMetadataEndsWithOneLineListingTheSources) {
  Scratch scratch;
  const int closed = testing::free_port();
  auto env =
      env_of({{"HOME", scratch.dir.string()},
              {"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:" + std::to_string(closed)}});
  try {
    s3_options_from_env(env).credentials->credentials();
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("no AWS credentials: none in the environment", 0), 0u) << m;
    EXPECT_NE(m.find("fix: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or AWS_PROFILE"),
              std::string::npos)
        << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace dtrain
