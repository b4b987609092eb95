// One node of a test job, its role from DMLC_ROLE: what an MXNet program
// does in every pod. Schedulers and servers serve from KVStore::create;
// workers push-pull key 0 until PS_NODE_STEPS steps are done (0: forever);
// the worker of rank PS_NODE_FAIL_RANK (if set) dies with exit code 3 after
// 3 steps, without leaving the job (a crash). With PS_NODE_OPTIMIZER (an
// OptimizerSpec text) the servers run that optimizer, each worker pushes
// rank + 1 into key 0 (10 values) and key 1 (PS_NODE_BIG values, default 0:
// no key 1), prints "step <s>" after each step and at the end "final" with
// both keys' values, for comparison with another run. With
// PS_NODE_KILL_ONE_SERVER=<file>, the first server process to create <file>
// kills itself with SIGKILL PS_NODE_KILL_AFTER_MS (default 1000) ms after
// it starts (its restart finds the file and lives).
// Exit: 0 at the job's end, 1 on a runtime failure, 2 on bad input, each
// error one line on stderr.
#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "dtrain/errors.h"
#include "dtrain/kvstore.h"

namespace {

int train_with_optimizer(dtrain::KVStore& kv, const char* spec, long steps) {
  const char* big_env = std::getenv("PS_NODE_BIG");
  const size_t big = big_env ? static_cast<size_t>(std::atol(big_env)) : 0;
  kv.set_optimizer(dtrain::OptimizerSpec::parse(spec));
  std::vector<float> w0(10), w1(big);
  for (size_t i = 0; i < w0.size(); ++i) w0[i] = 0.25f * static_cast<float>(i);
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = 1.0f + 0.001f * static_cast<float>(i);
  kv.broadcast(0, w0, w0);
  if (big > 0) kv.broadcast(1, w1, w1);
  const std::vector<float> g0(w0.size(), static_cast<float>(kv.rank() + 1));
  const std::vector<float> g1(w1.size(), 0.5f * static_cast<float>(kv.rank() + 1));
  std::cerr << "ps_node: worker " << kv.rank() << " running" << std::endl;
  for (long s = 0; s < steps; ++s) {
    auto h0 = kv.pushpull_async(0, g0, w0);
    if (big > 0) kv.pushpull(1, g1, w1);
    h0.wait(kv.timeout());
    std::cerr << "ps_node: worker " << kv.rank() << " step " << s << std::endl;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ostringstream line;
  line << std::setprecision(9) << "ps_node: worker " << kv.rank() << " final";
  for (float v : w0) line << ' ' << v;
  for (float v : w1) line << ' ' << v;
  std::cerr << line.str() << std::endl;
  // Rank 0 (which stops the servers) closes last: a final barrier released
  // before every node arrived fails it.
  if (kv.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kv.close();
  return 0;
}

}  // namespace

// PS_NODE_KILL_ONE_SERVER: a server that dies once, mid-job.
void maybe_kill_this_server() {
  const char* role = std::getenv("DMLC_ROLE");
  const char* marker = std::getenv("PS_NODE_KILL_ONE_SERVER");
  if (!role || !marker || std::strcmp(role, "server") != 0) return;
  const int fd = ::open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return;  // another server (or this one's earlier life) took it
  ::close(fd);
  const char* after = std::getenv("PS_NODE_KILL_AFTER_MS");
  const long ms = after ? std::atol(after) : 1000;
  std::thread([ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    std::raise(SIGKILL);
  }).detach();
}

int main() {
  maybe_kill_this_server();
  try {
    auto kv = dtrain::KVStore::create("dist_sync");  // servers and the scheduler stay inside
    if (kv.served()) return 0;                       // ... until the job ends: MXNet's exit 0
    const char* steps_env = std::getenv("PS_NODE_STEPS");
    const long steps = steps_env ? std::atol(steps_env) : 0;
    std::vector<float> grad(10, 1.0f), out(10);
    if (const char* spec = std::getenv("PS_NODE_OPTIMIZER")) {
      return train_with_optimizer(*kv, spec, steps);
    }
    kv->init(0, grad);
    std::cerr << "ps_node: worker " << kv->rank() << " running" << std::endl;
    const char* fail_env = std::getenv("PS_NODE_FAIL_RANK");
    const int fail_rank = fail_env ? std::atoi(fail_env) : -1;
    for (long s = 0; steps == 0 || s < steps; ++s) {
      if (s == 3 && kv->rank() == fail_rank) {
        std::cerr << "ps_node: worker " << kv->rank() << " failing on purpose" << std::endl;
        std::_Exit(3);
      }
      kv->pushpull(0, grad, out);
      if (out[0] != static_cast<float>(kv->num_workers())) {
        std::cerr << "ps_node: error: pulled " << out[0] << std::endl;
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kv->close();
    return 0;
  } catch (const dtrain::InvalidArgument& e) {
    std::cerr << "ps_node: error: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ps_node: error: " << e.what() << std::endl;
    return 1;
  }
}
