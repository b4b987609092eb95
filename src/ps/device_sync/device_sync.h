#pragma once
// dist_device_sync: a node's processes reduce through a KVLocalGroup, local
// rank 0 is the node's dist_sync worker (Note [Device sync] in device_sync.cpp).

#include <memory>

#include "dtrain/kvstore.h"
#include "ps/job/dmlc_env.h"

namespace dtrain::ps {

/// Joins the job: local rank 0 connects as the node's worker (DMLC_NUM_WORKER
/// counts nodes), then tells the others the node's rank and the node count.
/// Collective over `group`.
/// A worker of a `type` store (a dist type) started by torchrun or `dtrain run` (WORLD_SIZE and
/// LOCAL_WORLD_SIZE set, more than one process per node) whose
/// DMLC_NUM_WORKER counts the other unit than `type` needs (Note [Workers
/// per node or per process]): throws InvalidArgument, one line naming the
/// variables and the fix (`dtrain run --ps-worker-per`). Does nothing when
/// the torchrun variables are absent. Reads only the environment.
void check_worker_count(KVStoreType type, const EnvLookup& env);

std::unique_ptr<KVStore> make_device_sync_store(const JobConfig& config,
                                                std::shared_ptr<KVLocalGroup> group,
                                                std::chrono::milliseconds timeout);

}  // namespace dtrain::ps
