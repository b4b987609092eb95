#pragma once
// dist_device_sync: a node's processes reduce through a KVLocalGroup, local
// rank 0 is the node's dist_sync worker (Note [Device sync] in device_sync.cpp).

#include <memory>

#include "dtrain/kvstore.h"
#include "ps/env.h"

namespace dtrain::ps {

/// Joins the job: local rank 0 connects as the node's worker (DMLC_NUM_WORKER
/// counts nodes), then tells the others the node's rank and the node count.
/// Collective over `group`.
std::unique_ptr<KVStore> make_device_sync_store(const JobConfig& config,
                                                std::shared_ptr<KVLocalGroup> group,
                                                std::chrono::milliseconds timeout);

}  // namespace dtrain::ps
