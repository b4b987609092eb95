// DMLC_* -> options: every mistake is one line naming the variable.
#include <gtest/gtest.h>

#include <map>

#include "dtrain/errors.h"
#include "ps/job/dmlc_env.h"

namespace dtrain::ps {
namespace {

using Env = std::map<std::string, std::string>;

EnvLookup lookup(const Env& env) {
  return [env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

Env worker_env() {
  return {{"DMLC_ROLE", "worker"},
          {"DMLC_PS_ROOT_URI", "127.0.0.1"},
          {"DMLC_PS_ROOT_PORT", "9091"},
          {"DMLC_NUM_SERVER", "2"},
          {"DMLC_NUM_WORKER", "3"}};
}

// The InvalidArgument text for `env`, checked to be one line.
std::string error_for(const Env& env) {
  try {
    job_config_from_env(KVStoreOptions{}, lookup(env));
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    return what;
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(PsEnv, ALaunchersVariablesBecomeNodeOptions) {
  Env env = worker_env();
  env["DMLC_WORKER_ID"] = "2";
  env["PS_HEARTBEAT_TIMEOUT"] = "7";
  env["PS_FINALIZE_TIMEOUT"] = "42";
  env["MXNET_KVSTORE_BIGARRAY_BOUND"] = "123";
  env["DTRAIN_KVSTORE_PARTITION_BYTES"] = "0";
  env["DTRAIN_PS_SEND_BUFFER"] = "4096";
  const JobConfig c = job_config_from_env(KVStoreOptions{}, lookup(env));
  EXPECT_EQ(c.node.role, Role::kWorker);
  EXPECT_EQ(c.node.scheduler_host, "127.0.0.1");
  EXPECT_EQ(c.node.scheduler_port, 9091);
  EXPECT_EQ(c.node.num_servers, 2);
  EXPECT_EQ(c.node.num_workers, 3);
  EXPECT_EQ(c.node.worker_id, 2);
  EXPECT_EQ(c.node.host, "127.0.0.1");  // a loopback scheduler: a local job
  EXPECT_EQ(c.node.heartbeat_timeout, std::chrono::seconds(7));
  EXPECT_EQ(c.node.finalize_timeout, std::chrono::seconds(42));
  EXPECT_EQ(c.bigarray_bound, 123u);
  EXPECT_EQ(c.partition_bytes, 0u);
  EXPECT_EQ(c.node.send_buffer_bytes, 4096);
  EXPECT_FALSE(c.node.bind_any);
}

TEST(PsEnv, NodeHostWinsOverInterfaceAndKubernetesBindsEverything) {
  Env env = worker_env();
  env["DMLC_NODE_HOST"] = "10.1.2.3";
  env["DMLC_INTERFACE"] = "no-such-interface";
  env["DMLC_USE_KUBERNETES"] = "1";
  const JobConfig c = job_config_from_env(KVStoreOptions{}, lookup(env));
  EXPECT_EQ(c.node.host, "10.1.2.3");
  EXPECT_TRUE(c.node.bind_any);
}

TEST(PsEnv, EachMissingOrMalformedVariableIsNamed) {
  for (const char* name : {"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER",
                           "DMLC_NUM_WORKER"}) {
    Env env = worker_env();
    env.erase(name);
    EXPECT_NE(error_for(env).find(std::string(name) + " is not set"), std::string::npos) << name;
  }
  Env env = worker_env();
  env["DMLC_ROLE"] = "master";
  EXPECT_NE(error_for(env).find("DMLC_ROLE='master' is not scheduler, server or worker"),
            std::string::npos);
  env = worker_env();
  env["DMLC_PS_ROOT_PORT"] = "90x";
  EXPECT_NE(error_for(env).find("DMLC_PS_ROOT_PORT='90x' is not an integer"), std::string::npos);
  env = worker_env();
  env["DMLC_PS_ROOT_PORT"] = "70000";
  EXPECT_NE(error_for(env).find("DMLC_PS_ROOT_PORT=70000 is outside"), std::string::npos);
  env = worker_env();
  env["DMLC_WORKER_ID"] = "3";
  EXPECT_NE(error_for(env).find("DMLC_WORKER_ID=3 is outside [0, 2]"), std::string::npos);
  env = worker_env();
  env["DMLC_INTERFACE"] = "no-such-interface";
  EXPECT_NE(error_for(env).find("DMLC_INTERFACE='no-such-interface'"), std::string::npos);
  env = worker_env();
  env["DMLC_USE_KUBERNETES"] = "yes";
  EXPECT_NE(error_for(env).find("DMLC_USE_KUBERNETES='yes'"), std::string::npos);
  env = worker_env();
  env["PS_FINALIZE_TIMEOUT"] = "0";
  EXPECT_NE(error_for(env).find("PS_FINALIZE_TIMEOUT=0 is outside [1, 86400]"), std::string::npos);
}

TEST(PsEnv, NoServersWithADistStoreIsAnError) {
  Env env = worker_env();
  env["DMLC_NUM_SERVER"] = "0";
  EXPECT_NE(error_for(env).find("DMLC_NUM_SERVER=0: a dist kvstore needs at least one server"),
            std::string::npos);
}

TEST(PsEnv, OptimizerSpecRoundTripsAndNamesBadFields) {
  const OptimizerSpec s = OptimizerSpec::parse("sgd lr=0.25 momentum=0.9 wd=0.0001");
  EXPECT_EQ(s.learning_rate, 0.25);
  EXPECT_EQ(s.momentum, 0.9);
  const OptimizerSpec back = OptimizerSpec::parse(s.serialize());
  EXPECT_EQ(back.learning_rate, s.learning_rate);
  EXPECT_EQ(back.weight_decay, s.weight_decay);
  EXPECT_EQ(back.rescale_grad, 1.0);
  try {
    OptimizerSpec::parse("sgd lr=0.1 beta=2");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown optimizer spec field 'beta'"), std::string::npos);
  }
}

}  // namespace
}  // namespace dtrain::ps
