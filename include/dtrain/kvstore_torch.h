#pragma once
// LibTorch tensors as kvstore values (dtrain/kvstore.h takes raw arrays so
// the parameter server itself stays torch-free).
//
//   at::Tensor w = torch::zeros({1000}), g = ...;
//   kv->init(0, dtrain::kv_values(w));
//   kv->pushpull(0, dtrain::kv_values(g), dtrain::kv_output(w));
//
// The tensor must be contiguous, on the CPU, float32 or float16, and must
// outlive the call (for *_async calls: the handle's wait). The views share
// the tensor's memory: no copy is made.
//
// dist_device_sync's node group over c10d (library dtrain_ps_torch):
//
//   dtrain::KVStoreOpen kv = dtrain::create_kvstore("dist_device_sync");  // group from env
//   if (kv.served()) return 0;  // a scheduler or server: the job has ended
//   // or: opts.local_group = dtrain::kv_local_group(pg); KVStore::create(..., opts)
//
// The workers' own c10d group when only DMLC_* is set (a Kubeflow MXJob pod,
// no RANK / WORLD_SIZE / MASTER_ADDR): ranks from the kvstore's scheduler.
//
//   dtrain::KVStoreOpen kv = dtrain::create_kvstore("dist_sync");
//   if (kv.served()) return 0;
//   dtrain::ProcessGroup pg = dtrain::kv_process_group(*kv, dtrain::InitOptions{});

#include <ATen/core/Tensor.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "dtrain/errors.h"
#include "dtrain/kvstore.h"

namespace dtrain {

class ProcessGroup;  // dtrain/comm.h
struct InitOptions;  // dtrain/comm.h

namespace detail {

inline KVDType kv_dtype(const at::Tensor& t, const char* what) {
  if (!t.defined()) throw InvalidArgument(std::string(what) + ": the tensor is undefined");
  if (!t.device().is_cpu()) {
    throw InvalidArgument(std::string(what) + ": the tensor is on " + t.device().str() +
                          "; kvstore values live on the CPU (copy with .cpu())");
  }
  if (!t.is_contiguous()) {
    throw InvalidArgument(std::string(what) +
                          ": the tensor is not contiguous (call .contiguous())");
  }
  if (t.scalar_type() == at::kFloat) return KVDType::kFloat32;
  if (t.scalar_type() == at::kHalf) return KVDType::kFloat16;
  throw InvalidArgument(std::string(what) + ": kvstore values are float32 or float16, not " +
                        std::string(c10::toString(t.scalar_type())));
}

}  // namespace detail

/// Values read from `t` (push, init).
inline ConstValues kv_values(const at::Tensor& t) {
  ConstValues v;
  v.dtype = detail::kv_dtype(t, "kv_values");
  v.data = t.data_ptr();
  v.count = static_cast<size_t>(t.numel());
  // Pushed in place, not copied (ConstValues::owner): the tensor's storage
  // lives as long as the dist store holds the bytes.
  v.owner = std::make_shared<at::Tensor>(t);
  return v;
}

/// Values written into `t` (pull, pushpull, broadcast).
inline Values kv_output(const at::Tensor& t) {
  Values v;
  v.dtype = detail::kv_dtype(t, "kv_output");
  v.data = t.data_ptr();
  v.count = static_cast<size_t>(t.numel());
  return v;
}

/// The node's processes for dist_device_sync over `pg` (Gloo: the arrays
/// are reduced in place; NCCL: staged through GPU pg.rank()). `pg` must hold
/// exactly this node's processes; its timeout bounds every local collective.
std::shared_ptr<KVLocalGroup> kv_local_group(const ProcessGroup& pg);

/// Forms this node's group from the launcher's variables (Note [Local group
/// from the environment] in src/ps/device_sync/local_group.cpp): LOCAL_RANK and
/// LOCAL_WORLD_SIZE over the launcher-hosted store at MASTER_ADDR:MASTER_PORT,
/// NCCL when CUDA is available, else Gloo; one process: a group of one.
/// Throws InvalidArgument when no launcher hosts the store, TimeoutError
/// when the node's processes do not all arrive within `timeout`. Collective.
std::shared_ptr<KVLocalGroup> kv_local_group_from_env(const EnvLookup& env,
                                                      std::chrono::milliseconds timeout);

/// The key kv_process_group() uses on the servers: programs must not use it.
inline constexpr int kKVProcessGroupKey = 2147483000;

/// The workers of a dist kvstore as a c10d process group, for processes that
/// have only MXNet's DMLC_* variables (Note [Workers' group through the
/// kvstore] in src/ps/device_sync/worker_group.cpp): rank kv.rank(), size
/// kv.num_workers(); worker 0 hosts the group's TCP store on a free port at
/// the address it advertises to the parameter server (DMLC_NODE_HOST,
/// DMLC_INTERFACE, ... read from `env`, empty: the process environment) and
/// the others learn host:port through the kvstore (key kKVProcessGroupKey).
/// From `options` it takes backend, timeout, store_timeout, local_rank,
/// local_world_size and the Gloo address; rank, world_size and init_method
/// are set here. One worker: the single-process group. Collective over the
/// job's workers; blocks at most kv.timeout() for the address and
/// options.store_timeout for the group, then throws TimeoutError naming
/// host:port; StoreError when worker 0 cannot host the store.
ProcessGroup kv_process_group(KVStore& kv, const InitOptions& options, const EnvLookup& env = {});

/// KVStore::create, forming options.local_group with kv_local_group_from_env
/// for a dist_device_sync worker (DMLC_ROLE=worker) that has none. In a
/// scheduler or server process it serves the role and returns RoleServed
/// (Note [Serving from create] in src/ps/job/route.cpp).
KVStoreOpen create_kvstore(KVStoreType type, KVStoreOptions options = {},
                           const EnvLookup& env = {});
KVStoreOpen create_kvstore(const std::string& type, KVStoreOptions options = {},
                           const EnvLookup& env = {});

/// run_with_error_file (dtrain/elastic.h) for a program that every process of
/// a parameter-server job runs: calls `open` (create_kvstore or
/// KVStore::create). Where it served a scheduler's or server's role to the
/// job's end (RoleServed), returns 0, the status MXNet's create() exits with;
/// in a worker, returns worker_main(store). A std::exception from either is
/// recorded, printed and turned into 1 as run_with_error_file does.
///
/// Example:
/// ```
/// int main_of_every_process() {  // int main(int argc, char** argv)
///   return dtrain::run_with_error_file([] { return dtrain::create_kvstore("dist_sync"); },
///                                      [](std::unique_ptr<dtrain::KVStore> kv) {
///                                        kv->barrier();  // ... train ...
///                                        kv->close();
///                                        return 0;
///                                      });
/// }
/// ```
int run_with_error_file(const std::function<KVStoreOpen()>& open,
                        const std::function<int(std::unique_ptr<KVStore>)>& worker_main);

}  // namespace dtrain
