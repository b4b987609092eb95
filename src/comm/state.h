#pragma once
// ProcessGroup's shared state (comm's own; how c10d failures become dtrain
// errors, wait_work and rethrow_dist_error, is public: dtrain/comm.h).

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

}  // namespace dtrain
