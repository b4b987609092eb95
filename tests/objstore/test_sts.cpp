// Web identity (EKS service-account roles) against a small STS of our own
// (tests/objstore/sts_server.py): credentials that live a few seconds, a
// token that is checked and rotated. moto's STS never expires credentials
// and never reads the token, so it could not make these fail.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "dtrain/object_store.h"
#include "peer.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path.string() + ".tmp");
  out << text;
  out.close();
  fs::rename(path.string() + ".tmp", path);  // as kubelet replaces the projected token
}

TEST(WebIdentity, CredentialsAreRefreshedBeforeTheyExpireWithTheRotatedToken) {
  const std::string venv = testing::s3_test_venv();
  if (venv.empty()) GTEST_SKIP() << testing::kNoVenv;
  char tmpl[] = "/tmp/dtrain-sts-XXXXXX";
  const fs::path dir = mkdtemp(tmpl);
  const fs::path token = dir / "token";        // what the pod sees
  const fs::path expected = dir / "expected";  // what the STS accepts
  write_file(token, "jwt-1\n");
  write_file(expected, "jwt-1");
  const int port = testing::free_port();
  testing::ChildProcess sts({venv + "/bin/python",
                             DTRAIN_SOURCE_DIR "/tests/objstore/sts_server.py",
                             std::to_string(port), expected.string(), "4"});
  ASSERT_TRUE(testing::wait_for_port(port, 30));

  std::map<std::string, std::string> vars = {
      {"HOME", dir.string()},
      {"AWS_EC2_METADATA_DISABLED", "true"},
      {"AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/trainer"},
      {"AWS_WEB_IDENTITY_TOKEN_FILE", token.string()},
      {"AWS_ENDPOINT_URL_STS", "http://127.0.0.1:" + std::to_string(port)},
      {"AWS_REGION", "us-west-2"}};
  S3Options options =
      s3_options_from_env([&vars](const std::string& name) -> std::optional<std::string> {
        auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
      });
  Credentials first = options.credentials->credentials();
  EXPECT_EQ(first.access_key_id, "ASIATEST0001");
  EXPECT_EQ(first.session_token, "token-1");
  ASSERT_TRUE(first.expiration);
  EXPECT_EQ(options.credentials->credentials().access_key_id, "ASIATEST0001");  // cached
  EXPECT_EQ(testing::http_get(port, "/count"), "1");

  // EKS rotates the token; past half their life the credentials are
  // fetched again with the new token, before the old ones expire.
  write_file(token, "jwt-2\n");
  write_file(expected, "jwt-2");
  std::this_thread::sleep_for(std::chrono::milliseconds(2300));
  Credentials second = options.credentials->credentials();
  EXPECT_LT(std::chrono::system_clock::now(), *first.expiration);
  EXPECT_EQ(second.access_key_id, "ASIATEST0002");
  EXPECT_EQ(testing::http_get(port, "/count"), "2");

  // A token the STS refuses: one line naming the role, the status and a fix.
  write_file(token, "stale\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(4200));
  try {
    options.credentials->credentials();
    FAIL() << "refused token gave credentials";
  } catch (const ObjectStoreError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("web identity (role arn:aws:iam::123456789012:role/trainer): HTTP 403"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("InvalidIdentityToken"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dtrain
