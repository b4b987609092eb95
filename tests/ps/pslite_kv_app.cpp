// ps-lite's tests/test_kv_app.cc written against dtrain: one program for
// every role of a job, its role from DMLC_ROLE. Workers are
// dtrain::PsLiteWorkers doing what test_kv_app's worker does: 10,000 keys
// kMaxKey/10000·i + rank with integer values, 50 pushes (at most 10 in
// flight), a pull, 50 pushpulls, then the accumulated sums are checked
// exactly and "pslite_kv_app: worker <rank> error: 0, 0" printed (the line
// test_kv_app prints). The scheduler and servers are dtrain's
// (serve_ps_role), whose servers answer these requests with ps-lite's
// accumulating default handle. PSLITE_KV_APP_NUM / PSLITE_KV_APP_REPEAT
// change the key count and repeats.
// Exit: 0 at the job's end, 1 on a wrong sum or a runtime failure, 2 on bad
// input; each error one line on stderr.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "dtrain/errors.h"
#include "dtrain/kvstore_pslite.h"

namespace {

long env_or(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v ? std::atol(v) : fallback;
}

int run_worker() {
  auto kv = dtrain::PsLiteWorker::create();
  const int num = static_cast<int>(env_or("PSLITE_KV_APP_NUM", 10000));
  const int repeat = static_cast<int>(env_or("PSLITE_KV_APP_REPEAT", 50));
  const int rank = kv->rank();
  std::vector<uint64_t> keys(static_cast<size_t>(num));
  std::vector<float> vals(keys.size());
  uint32_t state = static_cast<uint32_t>(rank) + 7;  // srand(rank + 7), without rand()'s state
  for (int i = 0; i < num; ++i) {
    keys[i] = dtrain::kPsLiteMaxKey / static_cast<uint64_t>(num) * static_cast<uint64_t>(i) +
              static_cast<uint64_t>(rank);
    state = state * 1103515245u + 12345u;
    vals[i] = static_cast<float>((state >> 16) % 1000);
  }
  std::vector<dtrain::KVHandle> ts;
  for (int i = 0; i < repeat; ++i) {
    ts.push_back(kv->push_async(keys, vals));
    if (i > 10) ts[ts.size() - 10].wait(kv->timeout());
  }
  for (const auto& t : ts) t.wait(kv->timeout());
  std::vector<float> rets;
  kv->pull(keys, &rets);
  std::vector<float> outs;
  for (int i = 0; i < repeat; ++i) kv->pushpull(keys, vals, &outs);
  double res = 0, res2 = 0;
  for (int i = 0; i < num; ++i) {
    res += std::abs(rets[i] - vals[i] * static_cast<float>(repeat));
    res2 += std::abs(outs[i] - vals[i] * static_cast<float>(2 * repeat));
  }
  std::cerr << "pslite_kv_app: worker " << rank << " error: " << res / repeat << ", "
            << res2 / (2 * repeat) << std::endl;
  kv->close();
  return res == 0 && res2 == 0 ? 0 : 1;
}

}  // namespace

int main() {
  try {
    const char* role = std::getenv("DMLC_ROLE");
    if (role && (std::strcmp(role, "scheduler") == 0 || std::strcmp(role, "server") == 0)) {
      dtrain::serve_ps_role(role);
      return 0;
    }
    return run_worker();
  } catch (const dtrain::InvalidArgument& e) {
    std::cerr << "pslite_kv_app: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "pslite_kv_app: " << e.what() << std::endl;
    return 1;
  }
}
