#pragma once
// ProcessGroup's shared state (comm's own; how c10d failures become dtrain
// errors, wait_work and rethrow_dist_error, is public: dtrain/comm.h).

#include <functional>
#include <memory>
#include <optional>
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
  std::function<void()> wait_interrupt;  // InitOptions::wait_interrupt
  std::chrono::milliseconds wait_slice{20};
  // Declared before `backend` so that the store outlives the group using it.
  std::unique_ptr<TcpStoreServer> store_server;
  StorePtr store;
  c10::intrusive_ptr<compat::CollectiveBackend> backend;
};

ProcessGroup make_process_group(std::shared_ptr<const ProcessGroup::State> state);

/// Waits for `work` at most `timeout` (nullopt: until the backend's own
/// deadline ends it), in slices calling `interrupt` between them when it is
/// set (Note [Sliced waits] in collectives.cpp); a c10d failure or the
/// timeout is rethrown by rethrow_dist_error naming `report_timeout`.
/// `polled` (an NCCL group's work): with an interrupt the wait polls
/// isCompleted() instead of calling c10d's wait(timeout), which on NCCL
/// aborts the communicator when it runs out (Note [Polled waits on NCCL]).
void wait_c10d_work(c10d::Work& work, std::optional<std::chrono::milliseconds> timeout,
                    const std::function<void()>& interrupt, std::chrono::milliseconds slice,
                    int rank, const std::string& what, std::chrono::milliseconds report_timeout,
                    bool polled = false);

/// Whether waits on this backend's work are polled (wait_c10d_work).
inline bool polled_waits(const std::string& backend_name) { return backend_name == "nccl"; }

/// The group state behind `pg` (comm's own code).
const ProcessGroup::State& state_of(const ProcessGroup& pg);

}  // namespace dtrain
