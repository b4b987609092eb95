// One node of a test job, its role from DMLC_ROLE: what an MXNet program
// does in every pod. Schedulers and servers serve from KVStore::create;
// workers push-pull key 0 until PS_NODE_STEPS steps are done (0: forever);
// the worker of rank PS_NODE_FAIL_RANK (if set) dies with exit code 3 after
// 3 steps, without leaving the job (a crash).
// Exit: 0 at the job's end, 1 on a runtime failure, 2 on bad input, each
// error one line on stderr.
#include <cstdlib>
#include <iostream>
#include <thread>

#include "dtrain/errors.h"
#include "dtrain/kvstore.h"

int main() {
  try {
    auto kv = dtrain::KVStore::create("dist_sync");  // servers and the scheduler stay inside
    const char* steps_env = std::getenv("PS_NODE_STEPS");
    const long steps = steps_env ? std::atol(steps_env) : 0;
    std::vector<float> grad(10, 1.0f), out(10);
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
