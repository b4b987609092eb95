// rendezvous_bench: how long N agents take to form one round (MIN = MAX = N)
// through the embedded TCP store. One TcpStoreServer; N threads, each with
// its own client connection (connect_tcp_store), its own store backend and
// its own make_dynamic_rendezvous, like N agents on N hosts.
//
//   rendezvous_bench [--repeat R] [N ...]        (default: 16 64 256, R = 3)
//
// "form" is first next_rendezvous() call -> last return, after every agent
// has connected and is released at once; "connect" is the client connection
// set-up before that; "leave" is shutting all N down. Times are the median
// of R runs (each run on a fresh server and run id); one JSON line per N
// follows the table.

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/errors.h"
#include "dtrain/store.h"
#include "launch/rendezvous.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

/// Lets N threads go at once.
class StartGate {
 public:
  void arrive_and_wait(int total) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (++arrived_ == total) {
      start_ = Clock::now();
      cv_.notify_all();
    }
    cv_.wait(lock, [&] { return arrived_ >= total; });
  }
  Clock::time_point start() const { return start_; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  Clock::time_point start_;
};

struct Run {
  double connect_s = 0, form_s = 0, leave_s = 0;
  bool ok = true;
  std::string error;
};

Run run_once(int n, int attempt) {
  using namespace dtrain;
  auto server = TcpStoreServer::start({"127.0.0.1", 0, std::chrono::seconds(60)});
  detail::RendezvousConfig config;
  config.run_id = "bench-" + std::to_string(n) + "-" + std::to_string(attempt);
  config.min_nodes = config.max_nodes = n;
  config.local_world_size = 8;
  config.local_addr = "127.0.0.1";
  config.join_timeout = std::chrono::seconds(120);
  config.backend_timeout = std::chrono::seconds(60);

  std::vector<std::unique_ptr<detail::Rendezvous>> agents(n);
  std::vector<Clock::time_point> joined(n), returned(n);
  std::vector<std::string> errors(n);
  StartGate connected, go;
  auto t0 = Clock::now();
  Clock::time_point connected_at;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        StorePtr store = connect_tcp_store("127.0.0.1", server->port(), std::chrono::seconds(60));
        auto backend = detail::make_store_backend(store, "c10d store at 127.0.0.1:" + std::to_string(server->port()));
        agents[i] = detail::make_dynamic_rendezvous(backend, config, "agent" + std::to_string(i));
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
      go.arrive_and_wait(n);
      if (!agents[i]) return;
      joined[i] = Clock::now();
      try {
        detail::RendezvousInfo info = agents[i]->next_rendezvous();
        if (info.num_nodes != n) errors[i] = "round has " + std::to_string(info.num_nodes) + " nodes";
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
      returned[i] = Clock::now();
    });
  }
  for (auto& t : threads) t.join();
  connected_at = go.start();
  Run run;
  run.connect_s = seconds(connected_at - t0);
  run.form_s = seconds(*std::max_element(returned.begin(), returned.end()) -
                       *std::min_element(joined.begin(), joined.end()));
  for (const std::string& e : errors) {
    if (!e.empty()) {
      run.ok = false;
      run.error = e;
      break;
    }
  }
  auto leave_start = Clock::now();
  threads.clear();
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] { agents[i].reset(); });
  }
  for (auto& t : threads) t.join();
  run.leave_s = seconds(Clock::now() - leave_start);
  return run;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 3;
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (std::atoi(arg.c_str()) > 0) {
      sizes.push_back(std::atoi(arg.c_str()));
    } else {
      std::fprintf(stderr, "usage: rendezvous_bench [--repeat R] [N ...]\n");
      return 2;
    }
  }
  if (sizes.empty()) sizes = {16, 64, 256};
  // Each agent holds two sockets to the server, which holds two more.
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  std::printf("# rendezvous_bench: N agents (threads, one TCP client each), MIN = MAX = N, "
              "%u hardware threads, median of %d\n", std::thread::hardware_concurrency(), repeat);
  std::printf("%8s %12s %12s %12s %8s\n", "N", "form_s", "connect_s", "leave_s", "status");
  std::vector<std::string> json;
  int status = 0;
  for (int n : sizes) {
    std::vector<double> form, connect, leave;
    std::string error;
    for (int r = 0; r < repeat; ++r) {
      Run run = run_once(n, r);
      if (!run.ok) error = run.error;
      form.push_back(run.form_s);
      connect.push_back(run.connect_s);
      leave.push_back(run.leave_s);
    }
    std::printf("%8d %12.3f %12.3f %12.3f %8s\n", n, median(form), median(connect), median(leave),
                error.empty() ? "ok" : "FAILED");
    if (!error.empty()) {
      std::fprintf(stderr, "N=%d: %s\n", n, error.c_str());
      status = 1;
    }
    std::string runs;
    for (double f : form) runs += (runs.empty() ? "" : ",") + std::to_string(f);
    char line[512];
    std::snprintf(line, sizeof(line),
                  "{\"bench\":\"rendezvous\",\"n\":%d,\"form_s\":%.4f,\"connect_s\":%.4f,\"leave_s\":%.4f,"
                  "\"form_runs_s\":[%s],\"ok\":%s}",
                  n, median(form), median(connect), median(leave), runs.c_str(),
                  error.empty() ? "true" : "false");
    json.push_back(line);
  }
  for (const std::string& line : json) std::printf("%s\n", line.c_str());
  return status;
}
