#pragma once
// DistributedDataParallel's buckets through a parameter server (dtrain/kvstore.h)
// instead of an allreduce: the training mode of `dtrain train --kvstore`.
//
//   auto kv = std::shared_ptr<dtrain::KVStore>(dtrain::KVStore::create("dist_sync"));
//   dtrain::DdpOptions d;
//   auto hook = dtrain::kvstore_comm_hook(kv, dtrain::KVUpdate::kOnWorkers, *model);
//   d.comm_hook = hook;
//   dtrain::DistributedDataParallel ddp(model, pg, d);   // pg: the same workers
//   ... loss.backward();   // gradients averaged through the servers
//   opt.step();
//
// Each DDP bucket is one kvstore key. As a bucket fills during backward its
// gradients (already divided by the world size) are pushed at once, and the
// reply is waited on in DDP's final callback, before backward returns:
//   KVUpdate::kOnWorkers  the servers only sum (BytePS's split); the pulled
//                         sum is the averaged gradient, written back to
//                         param.grad() as DDP does, and the caller's own
//                         optimizer steps (results equal DDP's).
//   KVUpdate::kOnServers  the servers run SGD (MXNet's update_on_kvstore, set
//                         with KVStore::set_optimizer); the pulled weights are
//                         kept aside and copied into the parameters by
//                         apply_pulled_weights() instead of an optimizer step.
// Keys (each KVStore::init is a barrier of all workers): kOnWorkers, one
// per bucket, initialised with zeros the first time the bucket is seen (DDP
// rebuilds its buckets once after the first iteration; a changed bucket gets
// a new key); kOnServers, one per parameter in name order (the servers keep
// momentum per key, which must survive the rebuild), initialised at
// construction with the parameters' current values (rank 0's are stored).
// With kOnServers the servers also hold the optimizer's momentum:
// pull_server_state() reads it for a checkpoint and push_server_state()
// restores it into a new job (KVStore::pull_optimizer_state).
//
// Preconditions: the ProcessGroup DDP runs over has the kvstore's workers as
// its ranks (size num_workers()): DDP divides by its size before the push.
// Thread safety: as CommHook (ddp.h): start() runs on the thread running
// autograd's hooks, never concurrently with itself; apply_pulled_weights() on
// the training thread after backward returned.

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "dtrain/checkpoint.h"
#include "dtrain/ddp.h"
#include "dtrain/kvstore.h"

namespace dtrain {

/// Where the optimizer runs in parameter-server training.
enum class KVUpdate { kOnWorkers, kOnServers };

class KVStoreCommHook : public CommHook {
 public:
  /// Keeps `kv` and (shallow copies of) `module`'s named parameters; with
  /// kOnServers initialises their keys (collective: every worker constructs
  /// it; blocks up to the store's timeout).
  KVStoreCommHook(std::shared_ptr<KVStore> kv, KVUpdate update, torch::nn::Module& module);
  std::unique_ptr<PendingReduction> start(const ProcessGroup& pg, GradBucket& bucket) override;
  /// "kvstore <type>" (DdpStats::comm_hook).
  std::string name() const override;

  KVUpdate update() const { return update_; }
  KVStore& store() { return *kv_; }
  /// kOnServers: copies the weights pulled by the last synchronised backward
  /// into the parameters (without autograd). Returns false when no backward
  /// pulled any since the previous call. kOnWorkers: returns false.
  bool apply_pulled_weights();
  /// kOnServers: the servers' optimizer state of every parameter's key, by
  /// parameter name (CPU float32 momentum shaped like the parameter, and the
  /// update count). Not collective: one worker calls it between steps (after
  /// backward's pulls completed); blocks up to the store's timeout.
  /// kOnWorkers: InvalidArgument (the servers keep no state).
  ServerOptimizerState pull_server_state();
  /// kOnServers: restores `state` (from pull_server_state(), e.g. through a
  /// checkpoint) into the servers, after construction initialised the keys
  /// and before the first step; not collective (one worker calls it, then
  /// every worker meets in KVStore::barrier()). Throws DataError naming
  /// `origin` when a parameter is missing from `state`, or `state` has one
  /// the module lacks, or a shape differs; nothing is pushed then.
  void push_server_state(const ServerOptimizerState& state, const std::string& origin);

 private:
  struct Key {  // kOnWorkers: one bucket
    int id = 0;
    std::vector<std::string> names;  // the bucket's parameters, in bucket order
    at::Tensor send, receive;        // CPU staging, as the store moves them
  };
  struct ParamKey {  // kOnServers: one parameter
    int id = 0;
    at::Tensor receive;   // CPU float32, the pulled weights
    bool pulled = false;  // receive holds weights not yet applied
  };
  Key& key_for(const GradBucket& bucket);

  std::shared_ptr<KVStore> kv_;
  KVUpdate update_;
  std::map<std::string, at::Tensor> params_;
  std::map<int, Key> keys_;                     // by bucket index; replaced when the bucket changes
  std::map<std::string, ParamKey> param_keys_;  // by parameter name
  int next_key_ = 0;
};

/// The hook above, shared.
std::shared_ptr<KVStoreCommHook> kvstore_comm_hook(std::shared_ptr<KVStore> kv, KVUpdate update,
                                                   torch::nn::Module& module);

}  // namespace dtrain
