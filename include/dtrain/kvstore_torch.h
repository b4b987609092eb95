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
//   auto kv = dtrain::create_kvstore("dist_device_sync");  // group from env
//   // or: opts.local_group = dtrain::kv_local_group(pg); KVStore::create(..., opts)

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>

#include "dtrain/errors.h"
#include "dtrain/kvstore.h"

namespace dtrain {

class ProcessGroup;  // dtrain/comm.h

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
/// from the environment] in src/ps/local_group.cpp): LOCAL_RANK and
/// LOCAL_WORLD_SIZE over the launcher-hosted store at MASTER_ADDR:MASTER_PORT,
/// NCCL when CUDA is available, else Gloo; one process: a group of one.
/// Throws InvalidArgument when no launcher hosts the store, TimeoutError
/// when the node's processes do not all arrive within `timeout`. Collective.
std::shared_ptr<KVLocalGroup> kv_local_group_from_env(const EnvLookup& env,
                                                      std::chrono::milliseconds timeout);

/// KVStore::create, forming options.local_group with kv_local_group_from_env
/// for a dist_device_sync worker (DMLC_ROLE=worker) that has none.
std::unique_ptr<KVStore> create_kvstore(const std::string& type, KVStoreOptions options = {},
                                        const EnvLookup& env = {});

}  // namespace dtrain
