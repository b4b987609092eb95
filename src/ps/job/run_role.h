#pragma once
// The three roles of a dist job, taking resolved options (tests run them as
// threads of one process; create() and `dtrain ps` resolve DMLC_* first).

#include <memory>

#include "dtrain/kvstore.h"
#include "ps/job/dmlc_env.h"

namespace dtrain::ps {

/// Serves as the scheduler until the job ends (the final barrier). Throws
/// on failure (PeerLostError naming the dead node, StoreError, TimeoutError).
void run_scheduler(const NodeOptions& options);

/// Serves as a server until the job ends. Throws as run_scheduler.
void run_server(const NodeOptions& options);

/// Joins the job as a worker: registers, meets everyone in the start
/// barrier, and (rank 0, `sync`) puts the servers in sync mode.
std::unique_ptr<KVStore> connect_worker(const JobConfig& config, bool sync,
                                        std::chrono::milliseconds timeout);

/// A store for one process (create("local")).
std::unique_ptr<KVStore> make_local_store(std::chrono::milliseconds timeout);

}  // namespace dtrain::ps
