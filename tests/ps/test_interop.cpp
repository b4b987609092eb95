// Interoperability with unmodified ps-lite programs. dtrain commits none of
// ps-lite's code: build dmlc/ps-lite yourself (Debian's libzmq3-dev and
// protobuf) and point DTRAIN_PSLITE_TEST_KV_APP at its tests/test_kv_app
// binary; without it these tests skip.
#include <gtest/gtest.h>

#include <cstdlib>

#include "cluster.h"
#include "processes.h"

namespace dtrain {
namespace {

using namespace dtrain::testing;  // NOLINT: Job, Child, Env, read_file, job_env

std::string pslite_binary() {
  const char* p = std::getenv("DTRAIN_PSLITE_TEST_KV_APP");
  return p ? p : "";
}

// Runs scheduler, `servers` servers and `workers` workers, each either
// ps-lite's test_kv_app or dtrain's ps_node; every process must exit 0.
void run_mixed(bool pslite_scheduler, bool pslite_servers, bool pslite_workers, int servers,
               int workers) {
  const std::string pslite = pslite_binary();
  if (pslite.empty())
    GTEST_SKIP() << "set DTRAIN_PSLITE_TEST_KV_APP to a locally built ps-lite tests/test_kv_app";
  const std::string node = std::string(DTRAIN_BINARY_DIR) + "/tests/ps/ps_node";
  const int port = free_port();
  Job job;
  auto env = [&](const char* role) {
    Env e = job_env(role, port, servers, workers);
    e["DMLC_NODE_HOST"] = "127.0.0.1";  // ps-lite otherwise advertises an external address
    e["PS_NODE_STEPS"] = "150";         // dtrain workers: ~3 s, past a heartbeat timeout
    return e;
  };
  job.spawn("scheduler", env("scheduler"), pslite_scheduler ? pslite : node);
  for (int s = 0; s < servers; ++s)
    job.spawn("server" + std::to_string(s), env("server"), pslite_servers ? pslite : node);
  for (int w = 0; w < workers; ++w)
    job.spawn("worker" + std::to_string(w), env("worker"), pslite_workers ? pslite : node);
  ASSERT_TRUE(job.wait_all(std::chrono::seconds(60)));
  for (const auto& c : job.children()) {
    EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0)
        << c.name << ": " << read_file(c.log);
    if (pslite_workers && c.name.rfind("worker", 0) == 0) {
      EXPECT_NE(read_file(c.log).find("error: 0, 0"), std::string::npos)
          << c.name << ": " << read_file(c.log);
    }
  }
}

TEST(PsInterop, PsLiteWorkersRunAgainstDtrainsSchedulerAndServers) {
  run_mixed(false, false, true, 2, 2);
}

TEST(PsInterop, PsLiteServersAndWorkersRunUnderDtrainsScheduler) {
  run_mixed(false, true, true, 3, 2);
}

TEST(PsInterop, DtrainServersAndWorkersRunUnderPsLitesScheduler) {
  run_mixed(true, false, false, 2, 3);
}

}  // namespace
}  // namespace dtrain
