// KVLocalGroup over a c10d process group, and create_kvstore
// (dtrain/kvstore_torch.h): the only torch-using part of the parameter
// server, so dtrain_ps itself stays torch-free.
//
// Note [Local group from the environment]
// torchrun and `dtrain run` set RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK (the node's rank) and host the job's store
// at MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True). The
// processes of node GROUP_RANK (else RANK / LOCAL_WORLD_SIZE) form their
// group over that store under the prefix "dtrain/kvstore/node<N>", so a
// program may still form its own global group over the same store. A store
// hosted by rank 0 (no launcher store) would collide with the program's own
// init_process_group on MASTER_PORT, so that case is refused: form a group
// yourself and pass kv_local_group(pg).
#include <torch/cuda.h>
#include <torch/torch.h>

#include "common/strings.h"
#include "dtrain/comm.h"
#include "dtrain/elastic.h"
#include "dtrain/errors.h"
#include "dtrain/kvstore_torch.h"
#include "dtrain/store.h"

namespace dtrain {
namespace {

class C10dLocalGroup : public KVLocalGroup {
 public:
  explicit C10dLocalGroup(ProcessGroup pg) : pg_(std::move(pg)) {}
  int rank() const override { return pg_.rank(); }
  int size() const override { return pg_.size(); }
  void all_reduce_sum(Values values) override {
    run(values, [&](std::vector<at::Tensor>& t) { pg_.all_reduce_sum(t); });
  }
  void broadcast(Values values, int root) override {
    run(values, [&](std::vector<at::Tensor>& t) { pg_.broadcast(t, root); });
  }

 private:
  // NCCL reduces device memory: stage through this process's GPU
  // (LOCAL_RANK's), then copy back into the caller's array.
  template <typename Op>
  void run(Values values, Op op) {
    if (pg_.size() == 1 || values.count == 0) return;
    const auto dtype = values.dtype == KVDType::kFloat16 ? at::kHalf : at::kFloat;
    at::Tensor host = at::from_blob(values.data, {static_cast<int64_t>(values.count)},
                                    at::TensorOptions().dtype(dtype));
    if (pg_.backend_name() != "nccl") {
      std::vector<at::Tensor> t{host};
      op(t);
      return;
    }
    std::vector<at::Tensor> t{host.to(at::Device(at::kCUDA, pg_.rank()))};
    op(t);
    host.copy_(t[0]);
  }

  ProcessGroup pg_;
};

std::optional<long long> env_int(const EnvLookup& env, const char* name) {
  auto v = env(name);
  if (!v) return std::nullopt;
  long long x = 0;
  if (!parse_int(*v, &x)) {
    throw InvalidArgument(cat("environment variable ", name, "='", *v, "' is not an integer"));
  }
  return x;
}

}  // namespace

std::shared_ptr<KVLocalGroup> kv_local_group(const ProcessGroup& pg) {
  return std::make_shared<C10dLocalGroup>(pg);
}

// Note [Local group from the environment].
std::shared_ptr<KVLocalGroup> kv_local_group_from_env(const EnvLookup& env,
                                                      std::chrono::milliseconds timeout) {
  const EnvLookup lookup = env ? env : process_env();
  const InitOptions resolved = resolve_init_options({}, lookup);
  if (resolved.local_world_size <= 1) return kv_local_group(ProcessGroup());
  if (!resolved.launcher_hosts_store) {
    throw InvalidArgument(
        "dist_device_sync forms the node's group over the launcher's store, but none is hosted "
        "(TORCHELASTIC_USE_AGENT_STORE is not True): start the job with torchrun or dtrain run, "
        "or set KVStoreOptions::local_group to dtrain::kv_local_group(pg) with a group you form");
  }
  const std::string host = lookup("MASTER_ADDR").value_or("");
  const long long port = env_int(lookup, "MASTER_PORT").value_or(0);
  const long long node =
      env_int(lookup, "GROUP_RANK").value_or(resolved.rank / resolved.local_world_size);
  StorePtr store = prefix_store(cat("dtrain/kvstore/node", node),
                                connect_tcp_store(host, static_cast<int>(port), timeout));
  InitOptions o;
  o.rank = resolved.local_rank;
  o.world_size = resolved.local_world_size;
  o.local_rank = resolved.local_rank;
  o.local_world_size = resolved.local_world_size;
  o.backend = torch::cuda::is_available() ? "nccl" : "gloo";
  o.timeout = timeout;
  o.store_timeout = timeout;
  o.gloo_host = "127.0.0.1";  // one node
  return kv_local_group(init_process_group(store, o));
}

KVStoreOpen create_kvstore(KVStoreType type, KVStoreOptions options, const EnvLookup& env) {
  if (type == KVStoreType::kDistDeviceSync && !options.local_group &&
      resolve_ps_role(type, env) == PsRole::kWorker) {
    options.local_group = kv_local_group_from_env(env ? env : process_env(), options.timeout);
  }
  return KVStore::create(type, std::move(options), env);
}

KVStoreOpen create_kvstore(const std::string& type, KVStoreOptions options, const EnvLookup& env) {
  return create_kvstore(parse_kvstore_type(type), std::move(options), env);
}

int run_with_error_file(const std::function<KVStoreOpen()>& open,
                        const std::function<int(std::unique_ptr<KVStore>)>& worker_main) {
  return run_with_error_file([&] {
    KVStoreOpen kv = open();
    if (kv.served()) return 0;  // Note [Serving from create]: the job has ended
    return worker_main(kv.take());
  });
}

}  // namespace dtrain
