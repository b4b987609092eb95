// rendezvous_bench: how long N agents take to form one round (MIN = MAX = N)
// through the embedded TCP store. One TcpStoreServer; N agents, each with
// its own client connection (connect_tcp_store), its own store backend and
// its own make_dynamic_rendezvous, like N agents on N hosts.
//
//   rendezvous_bench [--repeat R] [--mode threads|processes] [N ...]
//                                                (default: 16 64 256, R = 3, threads)
//
// threads: the agents are threads of this process. processes: each agent is
// a child forked before the server starts (pipes carry the port, the
// release, the timestamps and the exit), as the PyTorch peer
// (bench/peer/rendezvous_peer.py) runs its participants.
//
// "form" is first next_rendezvous() call -> last return, after every agent
// has connected and is released at once; "connect" is the client connection
// set-up before that; "leave" is shutting all N down. Times are the median
// of R runs (each run on a fresh server and run id); one JSON line per N
// follows the table.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/errors.h"
#include "dtrain/store.h"
#include "launch/rendezvous/rendezvous.h"

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

/// One round of N agents (MIN = MAX = N), the same in both modes.
dtrain::detail::RendezvousConfig bench_config(int n, int attempt) {
  dtrain::detail::RendezvousConfig config;
  config.run_id = "bench-" + std::to_string(n) + "-" + std::to_string(attempt);
  config.min_nodes = config.max_nodes = n;
  config.local_world_size = 8;
  config.local_addr = "127.0.0.1";
  config.join_timeout = std::chrono::seconds(120);
  config.backend_timeout = std::chrono::seconds(60);
  return config;
}

Run run_once(int n, int attempt) {
  using namespace dtrain;
  auto server = TcpStoreServer::start({"127.0.0.1", 0, std::chrono::seconds(60)});
  detail::RendezvousConfig config = bench_config(n, attempt);

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
        auto backend = detail::make_store_backend(
            store, "c10d store at 127.0.0.1:" + std::to_string(server->port()));
        agents[i] = detail::make_dynamic_rendezvous(backend, config, "agent" + std::to_string(i));
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
      go.arrive_and_wait(n);
      if (!agents[i]) return;
      joined[i] = Clock::now();
      try {
        detail::RendezvousInfo info = agents[i]->next_rendezvous();
        if (info.num_nodes != n)
          errors[i] = "round has " + std::to_string(info.num_nodes) + " nodes";
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

// --- processes mode --------------------------------------------------------

/// One child's report; under PIPE_BUF, so each write is atomic.
struct ChildResult {
  int index = -1;
  int num_nodes = 0;
  int64_t joined_ns = 0, returned_ns = 0;
  char error[256] = {};
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

bool write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t w = ::write(fd, p, size);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    size -= static_cast<size_t>(w);
  }
  return true;
}

/// Reads exactly `size` bytes, waiting at most until `deadline`. False on
/// EOF, error or timeout.
bool read_all(int fd, void* data, size_t size, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    ssize_t r = ::read(fd, p, size);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    size -= static_cast<size_t>(r);
  }
  return true;
}

/// Blocks until the write end is closed everywhere (EOF): the release.
void wait_eof(int fd) {
  char c;
  while (true) {
    ssize_t r = ::read(fd, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    return;
  }
}

[[noreturn]] void child_agent(int index, const dtrain::detail::RendezvousConfig& config,
                              int port_fd, int ready_fd, int go_fd, int result_fd, int exit_fd) {
  using namespace dtrain;
  ChildResult result;
  result.index = index;
  std::unique_ptr<detail::Rendezvous> agent;
  int port = 0;
  if (!read_all(port_fd, &port, sizeof(port), Clock::now() + std::chrono::seconds(120))) _exit(3);
  try {
    StorePtr store = connect_tcp_store("127.0.0.1", port, std::chrono::seconds(60));
    auto backend =
        detail::make_store_backend(store, "c10d store at 127.0.0.1:" + std::to_string(port));
    agent = detail::make_dynamic_rendezvous(backend, config, "agent" + std::to_string(index));
  } catch (const std::exception& e) {
    std::snprintf(result.error, sizeof(result.error), "connect: %s", e.what());
  }
  char one = 1;
  write_all(ready_fd, &one, 1);
  wait_eof(go_fd);
  result.joined_ns = now_ns();
  if (agent) {
    try {
      detail::RendezvousInfo info = agent->next_rendezvous();
      result.num_nodes = info.num_nodes;
    } catch (const std::exception& e) {
      std::snprintf(result.error, sizeof(result.error), "%s", e.what());
    }
  }
  result.returned_ns = now_ns();
  write_all(result_fd, &result, sizeof(result));
  wait_eof(exit_fd);
  agent.reset();
  _exit(0);
}

Run run_once_processes(int n, int attempt) {
  using namespace dtrain;
  detail::RendezvousConfig config = bench_config(n, attempt);

  int port_p[2], ready_p[2], go_p[2], result_p[2], exit_p[2];
  for (int* p : {port_p, ready_p, go_p, result_p, exit_p}) {
    if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  }
  Run run;
  std::fflush(stdout);
  std::fflush(stderr);
  // Fork before the server (and its threads) exist.
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pid_t pid = ::fork();
    if (pid < 0) {
      run.ok = false;
      run.error = "fork failed after " + std::to_string(i) + " children";
      break;
    }
    if (pid == 0) {
      ::close(port_p[1]);
      ::close(ready_p[0]);
      ::close(go_p[1]);
      ::close(result_p[0]);
      ::close(exit_p[1]);
      child_agent(i, config, port_p[0], ready_p[1], go_p[0], result_p[1], exit_p[0]);
    }
    pids.push_back(pid);
  }
  ::close(port_p[0]);
  ::close(ready_p[1]);
  ::close(go_p[0]);
  ::close(result_p[1]);
  ::close(exit_p[0]);
  const int forked = static_cast<int>(pids.size());

  auto t0 = Clock::now();
  std::unique_ptr<TcpStoreServer> server;
  try {
    server = TcpStoreServer::start({"127.0.0.1", 0, std::chrono::seconds(60)});
    std::vector<int> ports(forked, server->port());
    write_all(port_p[1], ports.data(), ports.size() * sizeof(int));
  } catch (const std::exception& e) {
    run.ok = false;
    run.error = e.what();
  }
  ::close(port_p[1]);
  std::vector<char> ready(forked);
  if (run.ok &&
      !read_all(ready_p[0], ready.data(), ready.size(), Clock::now() + std::chrono::seconds(120))) {
    run.ok = false;
    run.error = "not all agents connected";
  }
  run.connect_s = seconds(Clock::now() - t0);
  ::close(go_p[1]);  // release all at once
  std::vector<ChildResult> results;
  auto deadline = Clock::now() + std::chrono::seconds(150);
  for (int i = 0; run.ok && i < forked; ++i) {
    ChildResult r;
    if (!read_all(result_p[0], &r, sizeof(r), deadline)) {
      run.ok = false;
      run.error =
          std::to_string(results.size()) + " of " + std::to_string(n) + " agents formed in time";
      break;
    }
    results.push_back(r);
  }
  if (run.ok) {
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (const ChildResult& r : results) {
      first = std::min(first, r.joined_ns);
      last = std::max(last, r.returned_ns);
      if (r.error[0] != '\0' && run.ok) {
        run.ok = false;
        run.error = r.error;
      } else if (r.num_nodes != n && run.ok) {
        run.ok = false;
        run.error = "round has " + std::to_string(r.num_nodes) + " nodes";
      }
    }
    run.form_s = static_cast<double>(last - first) / 1e9;
  }
  auto leave_start = Clock::now();
  ::close(exit_p[1]);
  auto reap_deadline = Clock::now() + std::chrono::seconds(20);
  size_t reaped = 0;
  std::vector<bool> done(pids.size());
  while (reaped < pids.size() && Clock::now() < reap_deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (!done[i] && ::waitpid(pids[i], nullptr, WNOHANG) == pids[i]) {
        done[i] = true;
        ++reaped;
      }
    }
    if (reaped < pids.size()) std::this_thread::sleep_for(5ms);
  }
  run.leave_s = seconds(Clock::now() - leave_start);
  for (size_t i = 0; i < pids.size(); ++i) {
    if (!done[i]) {
      ::kill(pids[i], SIGKILL);
      ::waitpid(pids[i], nullptr, 0);
    }
  }
  ::close(ready_p[0]);
  ::close(result_p[0]);
  return run;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 3;
  bool processes = false;
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--mode" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "threads" || std::string(argv[i + 1]) == "processes")) {
      processes = std::string(argv[++i]) == "processes";
    } else if (std::atoi(arg.c_str()) > 0) {
      sizes.push_back(std::atoi(arg.c_str()));
    } else {
      std::fprintf(stderr,
                   "usage: rendezvous_bench [--repeat R] [--mode threads|processes] [N ...]\n");
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
  std::printf(
      "# rendezvous_bench: N agents (%s, one TCP client each), MIN = MAX = N, "
      "%u hardware threads, median of %d\n",
      processes ? "processes" : "threads", std::thread::hardware_concurrency(), repeat);
  std::printf("%8s %12s %12s %12s %8s\n", "N", "form_s", "connect_s", "leave_s", "status");
  std::vector<std::string> json;
  int status = 0;
  for (int n : sizes) {
    std::vector<double> form, connect, leave;
    std::string error;
    for (int r = 0; r < repeat; ++r) {
      Run run = processes ? run_once_processes(n, r) : run_once(n, r);
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
                  "{\"bench\":\"rendezvous\",\"mode\":\"%s\",\"n\":%d,\"form_s\":%.4f,\"connect_"
                  "s\":%.4f,\"leave_s\":%.4f,"
                  "\"form_runs_s\":[%s],\"ok\":%s}",
                  processes ? "processes" : "threads", n, median(form), median(connect),
                  median(leave), runs.c_str(), error.empty() ? "true" : "false");
    json.push_back(line);
  }
  for (const std::string& line : json) std::printf("%s\n", line.c_str());
  return status;
}
