#pragma once
// Runs a function as N ranks, one thread each, over one in-memory store: the
// multi-rank unit tests' harness (Gloo runs happily inside one process).

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm.h"
#include "dtrain/store.h"

namespace dtrain::testing {

/// Calls fn(pg) on `world` threads, each with its own ProcessGroup of rank r,
/// and rethrows the first exception (lowest rank first) after all joined.
inline void run_ranks(int world, const std::function<void(const ProcessGroup&)>& fn,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30),
                      const std::string& backend = "gloo") {
  StorePtr store = make_memory_store();
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
        ProcessGroup pg = init_process_group(store, o);
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
