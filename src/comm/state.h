#pragma once
// ProcessGroup's shared state, and how c10d failures become dtrain errors.

#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "dtrain/comm.h"

namespace dtrain {

struct ProcessGroup::State {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  std::string backend_name = "none";
  // Declared before `backend` so that the store outlives the group using it.
  std::unique_ptr<TcpStoreServer> store_server;
  StorePtr store;
  c10::intrusive_ptr<compat::CollectiveBackend> backend;
};

ProcessGroup make_process_group(std::shared_ptr<const ProcessGroup::State> state);

/// Waits for `work` (bounded by the group's timeout, which the backend
/// enforces) and turns a c10d failure into TimeoutError, PeerLostError or
/// DistError whose message names `what` (operation, bucket, ...), the rank
/// and the timeout.
void wait_work(const c10::intrusive_ptr<c10d::Work>& work, const ProcessGroup& pg,
               const std::string& what);

/// The same classification for an exception already caught.
[[noreturn]] void rethrow_dist_error(const std::exception& e, int rank, const std::string& what,
                                     std::chrono::milliseconds timeout);

}  // namespace dtrain
