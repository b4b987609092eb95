// The one route (Note [One route] in src/ps/job/route.cpp): kvstore types and
// roles parsed and named in one place, and KVStore::create serving a
// scheduler's or server's role and returning RoleServed (Note [Serving from
// create]) instead of ending the process, against a job of threads on
// loopback whose worker sees the whole job.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/errors.h"
#include "dtrain/kvstore.h"
#include "ps/job_env.h"
#include "support/http.h"  // free_port

namespace dtrain {
namespace {

using testing::job_env;

KVStoreOptions quiet() {
  KVStoreOptions o;
  o.log = [](const std::string&) {};
  o.connect_timeout = std::chrono::seconds(20);
  o.timeout = std::chrono::seconds(20);
  return o;
}

TEST(PsRoute, EveryKvstoreTypeParsesFromTheNameItPrintsAs) {
  for (KVStoreType t : {KVStoreType::kLocal, KVStoreType::kDistSync, KVStoreType::kDistAsync,
                        KVStoreType::kDistDeviceSync}) {
    EXPECT_EQ(parse_kvstore_type(kvstore_type_name(t)), t) << kvstore_type_name(t);
    EXPECT_EQ(is_dist(t), t != KVStoreType::kLocal);
  }
  EXPECT_EQ(kvstore_type_names(), "local, dist_sync, dist_async, dist_device_sync");
  try {
    parse_kvstore_type("dist_snyc");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "unknown kvstore type 'dist_snyc'; valid types: local, dist_sync, dist_async, "
                 "dist_device_sync");
  }
  for (KVStoreOptimizer w :
       {KVStoreOptimizer::kAuto, KVStoreOptimizer::kWorker, KVStoreOptimizer::kServer}) {
    EXPECT_EQ(parse_kvstore_optimizer(kvstore_optimizer_name(w)), w);
  }
  EXPECT_THROW(parse_kvstore_optimizer("servers"), InvalidArgument);
}

TEST(PsRoute, TheRoleIsDmlcRoleForDistTypesAndWorkerForTheLocalStore) {
  EXPECT_EQ(resolve_ps_role(KVStoreType::kDistSync, job_env("scheduler", 1)), PsRole::kScheduler);
  EXPECT_EQ(resolve_ps_role(KVStoreType::kDistAsync, job_env("server", 1)), PsRole::kServer);
  EXPECT_EQ(resolve_ps_role(KVStoreType::kDistDeviceSync, job_env("worker", 1)), PsRole::kWorker);
  // The local store reads nothing: DMLC_ROLE=server does not make it serve.
  EXPECT_EQ(resolve_ps_role(KVStoreType::kLocal, job_env("server", 1)), PsRole::kWorker);
  const EnvLookup none = [](const std::string&) { return std::optional<std::string>(); };
  try {
    resolve_ps_role(KVStoreType::kDistSync, none);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("environment variable DMLC_ROLE is not set"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(parse_ps_role(ps_role_name(PsRole::kServer)), PsRole::kServer);
}

TEST(PsRoute, CreateInASchedulerOrServerServesTheRoleAndReturnsRoleServedWhenTheJobEnds) {
  const int port = testing::free_port();
  std::vector<std::optional<KVStoreOpen>> served(2);
  std::vector<std::exception_ptr> errors(2);
  std::vector<std::thread> roles;
  const char* names[] = {"scheduler", "server"};
  for (int r = 0; r < 2; ++r) {
    roles.emplace_back([&, r] {
      try {
        served[r].emplace(
            KVStore::create(KVStoreType::kDistSync, quiet(), job_env(names[r], port)));
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  {
    KVStoreOpen worker = KVStore::create("dist_sync", quiet(), job_env("worker", port));
    ASSERT_FALSE(worker.served());
    EXPECT_EQ(worker.role(), PsRole::kWorker);
    worker->init(0, std::vector<float>{1, 2});
    std::vector<float> out(2);
    worker->pushpull(0, std::vector<float>{3, 4}, out);
    EXPECT_EQ(out, (std::vector<float>{3, 4}));  // no optimizer: the round's sum is stored
    std::shared_ptr<KVStore> kv = worker.take();
    kv->close();  // the job ends: the scheduler's and server's create() return
  }
  for (auto& t : roles) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  ASSERT_TRUE(served[0] && served[1]);
  EXPECT_TRUE(served[0]->served());
  EXPECT_EQ(served[0]->role(), PsRole::kScheduler);
  EXPECT_TRUE(served[1]->served());
  EXPECT_EQ(served[1]->role(), PsRole::kServer);
  try {
    (*served[1])->barrier();
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("this process served the job's server (DMLC_ROLE)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dtrain
