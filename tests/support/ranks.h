#pragma once
// Runs a function as N ranks, one thread each, over one in-memory store: the
// multi-rank unit tests' harness (Gloo runs happily inside one process).

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <torch/cuda.h>

#include "dtrain/comm.h"
#include "dtrain/store.h"

namespace dtrain::testing {

// Note [Flight recorder in rank threads]
// LibTorch 2.x records every c10d collective in a process-wide
// FlightRecorder whose bookkeeping is not safe against collectives that
// several process groups start at once from different threads: with ranks
// (or whole nodes) as threads of one test, PyTorch 2.11 crashed in it
// (std::map insert in FlightRecorder::recordWithResetEnabled under
// ProcessGroupGloo::enqueue, about 1 run in 20 of PsDeviceSync). A real job
// has one rank per process, so only the tests turn it off, before the first
// process group exists; a value the user set is kept.
inline const bool kFlightRecorderOff = ::setenv("TORCH_FR_BUFFER_SIZE", "0", 0) == 0;

// Note [Thread ranks on one GPU]
// Ranks as threads of one process share LibTorch's autograd engine, which
// runs every backward on a CUDA device in that device's one worker thread.
// DDP waits for its buckets' collectives at the end of backward, in that
// thread (as PyTorch's Reducer does), so two thread ranks on one GPU
// deadlock: the first waits for a peer whose backward is queued behind it
// (seen on an H200: the Gloo allreduce of bucket 0 timed out after 60 s).
// A real job has one process per rank; the tests give each thread rank a GPU
// of its own, so they run as many ranks as there are GPUs, up to `wanted`.
inline int thread_ranks_on_gpus(int wanted) {
  return std::max(1, std::min<int>(wanted, torch::cuda::device_count()));
}

/// Calls fn(pg) on `world` threads, each with its own ProcessGroup of rank r
/// formed over store_of(r) (one store, or views of one), and rethrows the
/// first exception (lowest rank first) after all joined.
inline void run_ranks_over(int world, const std::function<StorePtr(int rank)>& store_of,
                           const std::function<void(const ProcessGroup&)>& fn,
                           std::chrono::milliseconds timeout = std::chrono::seconds(30),
                           const std::string& backend = "gloo") {
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        InitOptions o;
        o.rank = r;
        o.world_size = world;
        o.timeout = timeout;
        o.store_timeout = timeout;
        o.gloo_host = "127.0.0.1";
        o.init_method = "memory://";
        o.backend = backend;
        o.local_rank = r;
        ProcessGroup pg = init_process_group(store_of(r), o);
        fn(pg);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

/// Calls fn(pg) on `world` threads, each with its own ProcessGroup of rank r
/// over one in-memory store, and rethrows the first exception (lowest rank
/// first) after all joined.
inline void run_ranks(int world, const std::function<void(const ProcessGroup&)>& fn,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30),
                      const std::string& backend = "gloo") {
  StorePtr store = make_memory_store();
  run_ranks_over(
      world, [&](int) { return store; }, fn, timeout, backend);
}

/// The message of the exception `fn` throws, or "" when it throws nothing.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace dtrain::testing
