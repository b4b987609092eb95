// Interoperability with unmodified ps-lite programs. dtrain commits none of
// ps-lite's code: build dmlc/ps-lite yourself (Debian's libzmq3-dev and
// protobuf) and point DTRAIN_PSLITE_TEST_KV_APP at its tests/test_kv_app
// binary; without it the tests that run it skip (the all-dtrain one runs).
#include <gtest/gtest.h>

#include <cstdlib>

#include "ps/cluster.h"
#include "ps/processes.h"

namespace dtrain {
namespace {

using namespace dtrain::testing;  // NOLINT: Job, Child, Env, read_file, job_env

std::string pslite_binary() {
  const char* p = std::getenv("DTRAIN_PSLITE_TEST_KV_APP");
  return p ? p : "";
}

// Who plays a role: ps-lite's test_kv_app, dtrain's ps_node (KVStore, MXNet's
// requests; dtrain's scheduler and servers), or dtrain's pslite_kv_app
// (PsLiteWorker doing test_kv_app's worker; dtrain's scheduler and servers).
enum class Program { kPsLite, kDtrain, kDtrainPsLiteClient };

std::string program_path(Program p) {
  switch (p) {
    case Program::kPsLite:
      return pslite_binary();
    case Program::kDtrain:
      return std::string(DTRAIN_BINARY_DIR) + "/tests/ps/ps_node";
    case Program::kDtrainPsLiteClient:
      return std::string(DTRAIN_BINARY_DIR) + "/tests/ps/pslite_kv_app";
  }
  return "";
}

// Runs a scheduler, `servers` servers and one worker per entry of `workers`;
// every process must exit 0, and every worker running test_kv_app's check
// (ps-lite's or dtrain's) must print its zero error.
void run_mixed(Program scheduler, Program server, const std::vector<Program>& workers,
               int servers) {
  bool needs_pslite = scheduler == Program::kPsLite || server == Program::kPsLite;
  for (Program w : workers) needs_pslite = needs_pslite || w == Program::kPsLite;
  if (needs_pslite && pslite_binary().empty())
    GTEST_SKIP() << "set DTRAIN_PSLITE_TEST_KV_APP to a locally built ps-lite tests/test_kv_app";
  const int port = free_port();
  const int num_workers = static_cast<int>(workers.size());
  Job job;
  auto env = [&](const char* role) {
    Env e = job_env(role, port, servers, num_workers);
    e["DMLC_NODE_HOST"] = "127.0.0.1";  // ps-lite otherwise advertises an external address
    e["PS_NODE_STEPS"] = "150";         // dtrain workers: ~3 s, past a heartbeat timeout
    return e;
  };
  job.spawn("scheduler", env("scheduler"), program_path(scheduler));
  for (int s = 0; s < servers; ++s)
    job.spawn("server" + std::to_string(s), env("server"), program_path(server));
  for (int w = 0; w < num_workers; ++w)
    job.spawn("worker" + std::to_string(w), env("worker"), program_path(workers[w]));
  ASSERT_TRUE(job.wait_all(std::chrono::seconds(60)));
  for (size_t i = 0; i < job.children().size(); ++i) {
    const auto& c = job.children()[i];
    EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0)
        << c.name << ": " << read_file(c.log);
    const size_t w = i - 1 - static_cast<size_t>(servers);
    if (i > static_cast<size_t>(servers) && workers[w] != Program::kDtrain) {
      EXPECT_NE(read_file(c.log).find("error: 0, 0"), std::string::npos)
          << c.name << ": " << read_file(c.log);
    }
  }
}

const Program kPsLite = Program::kPsLite;
const Program kDtrain = Program::kDtrain;
const Program kClient = Program::kDtrainPsLiteClient;

TEST(PsInterop, PsLiteWorkersRunAgainstDtrainsSchedulerAndServers) {
  run_mixed(kDtrain, kDtrain, {kPsLite, kPsLite}, 2);
}

TEST(PsInterop, PsLiteServersAndWorkersRunUnderDtrainsScheduler) {
  run_mixed(kDtrain, kPsLite, {kPsLite, kPsLite}, 3);
}

TEST(PsInterop, DtrainServersAndWorkersRunUnderPsLitesScheduler) {
  run_mixed(kPsLite, kDtrain, {kDtrain, kDtrain, kDtrain}, 2);
}

TEST(PsInterop, DtrainPsLiteWorkersRunAgainstPsLitesSchedulerAndServers) {
  run_mixed(kPsLite, kPsLite, {kClient, kClient}, 2);
}

TEST(PsInterop, DtrainPsLiteWorkersAndPsLiteWorkersSharePsLitesServers) {
  run_mixed(kPsLite, kPsLite, {kClient, kPsLite}, 2);
}

TEST(PsInterop, DtrainPsLiteWorkersAndPsLiteWorkersUsePsLitesServersUnderDtrainsScheduler) {
  run_mixed(kDtrain, kPsLite, {kClient, kPsLite}, 3);
}

TEST(PsInterop, DtrainPsLiteWorkersRunAgainstDtrainsSchedulerAndServers) {
  run_mixed(kDtrain, kDtrain, {kClient, kClient}, 2);  // no ps-lite needed
}

}  // namespace
}  // namespace dtrain
