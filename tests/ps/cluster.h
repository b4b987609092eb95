#pragma once
// Runs a parameter-server job as threads of one process on loopback: a
// scheduler, S servers and W workers, each with its own ZeroMQ context.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <exception>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/kvstore.h"
#include "ps/job/run_role.h"
#include "support/http.h"  // free_port

namespace dtrain::testing {

inline ps::NodeOptions node_options(ps::Role role, int port, int servers, int workers) {
  ps::NodeOptions o;
  o.role = role;
  o.scheduler_host = "127.0.0.1";
  o.scheduler_port = port;
  o.num_servers = servers;
  o.num_workers = workers;
  o.host = "127.0.0.1";
  o.connect_timeout = std::chrono::seconds(20);
  o.log = [](const std::string&) {};
  return o;
}

/// Adjusts worker thread `w`'s configuration and kvstore timeout.
using WorkerSetup = std::function<void(int w, ps::JobConfig&, std::chrono::milliseconds& timeout)>;
/// Adjusts every node's options (before a worker's WorkerSetup).
using NodeSetup = std::function<void(ps::NodeOptions&)>;

/// Runs the job; worker(kv) runs on each worker thread (then close()). Rethrows
/// the first failure of any node after all have ended.
inline void run_job(int servers, int workers, bool sync, size_t bigarray_bound,
                    const std::function<void(KVStore&)>& worker, const WorkerSetup& setup = {},
                    const NodeSetup& node_setup = {}) {
  const int port = free_port();
  auto options = [&](ps::Role role) {
    ps::NodeOptions o = node_options(role, port, servers, workers);
    if (node_setup) node_setup(o);
    return o;
  };
  std::vector<std::exception_ptr> errors(1 + servers + workers);
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    try {
      ps::run_scheduler(options(ps::Role::kScheduler));
    } catch (...) {
      errors[0] = std::current_exception();
    }
  });
  for (int s = 0; s < servers; ++s) {
    threads.emplace_back([&, s] {
      try {
        ps::run_server(options(ps::Role::kServer));
      } catch (...) {
        errors[1 + s] = std::current_exception();
      }
    });
  }
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      try {
        ps::JobConfig c;
        c.node = options(ps::Role::kWorker);
        c.bigarray_bound = bigarray_bound;
        std::chrono::milliseconds timeout = std::chrono::seconds(20);
        if (setup) setup(w, c, timeout);
        auto kv = ps::connect_worker(c, sync, timeout);
        worker(*kv);
        kv->close();
      } catch (...) {
        errors[1 + servers + w] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  // Every node's failure, for the log; the first one is rethrown.
  for (size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i]) continue;
    try {
      std::rethrow_exception(errors[i]);
    } catch (const std::exception& e) {
      std::cerr << "node " << i << " (0 scheduler, then servers, then workers): " << e.what()
                << std::endl;
    }
  }
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace dtrain::testing
