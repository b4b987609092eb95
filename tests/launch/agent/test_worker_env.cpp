// The workers' environment (worker_env.h): torchrun's variables, OMP_NUM_THREADS.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "launch/agent/worker_env.h"

namespace dtrain::detail {
namespace {

using ::testing::Contains;
using ::testing::Not;

std::vector<std::string> env_for(const std::vector<std::string>& base, int local_world_size) {
  WorkerIdentity who;
  who.rank = who.local_rank = 1;
  who.world_size = who.local_world_size = local_world_size;
  return worker_environment(base, who, JobInfo{"10.0.0.1", 29500, "run9"});
}

TEST(WorkerEnvironment, SetsOmpNumThreadsOnlyForSeveralWorkersWhenUnset) {
  EXPECT_THAT(env_for({"HOME=/root"}, 2), Contains("OMP_NUM_THREADS=1"));
  EXPECT_EQ(env_value(env_for({"HOME=/root"}, 1), "OMP_NUM_THREADS"), std::nullopt);
  auto user = env_for({"OMP_NUM_THREADS=8"}, 4);
  EXPECT_THAT(user, Contains("OMP_NUM_THREADS=8"));
  EXPECT_THAT(user, Not(Contains("OMP_NUM_THREADS=1")));
}

TEST(WorkerEnvironment, ReplacesInheritedTorchrunVariablesAndKeepsTheRest) {
  auto env = env_for({"RANK=7", "MASTER_PORT=1", "HOME=/root", "EMPTY="}, 2);
  EXPECT_EQ(env_value(env, "RANK"), "1");
  EXPECT_EQ(env_value(env, "MASTER_PORT"), "29500");
  EXPECT_EQ(env_value(env, "MASTER_ADDR"), "10.0.0.1");
  EXPECT_EQ(env_value(env, "TORCHELASTIC_RUN_ID"), "run9");
  EXPECT_EQ(env_value(env, "HOME"), "/root");
  EXPECT_EQ(env_value(env, "EMPTY"), "");
  EXPECT_EQ(std::count_if(env.begin(), env.end(),
                          [](const std::string& e) { return e.rfind("RANK=", 0) == 0; }),
            1);
}

}  // namespace
}  // namespace dtrain::detail
