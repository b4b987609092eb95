// `dtrain bench kvstore`: push-pull bandwidth of the parameter server, in
// the shape of `dtrain bench collective`'s table, plus the bytes on the wire.
//
// Note [Push-pull as a benchmark measures it]
// Every worker holds, per key, a gradient buffer filled once with small
// integers that depend on its rank (as bench collective's values) and an
// output buffer. One iteration launches pushpull_async for every key of the
// row (one key for a sweep size; one per parameter tensor of a model, as a
// training step pushes every gradient) and waits for all of them. The
// servers run dist_sync without an optimizer, so each round stores, and
// every pull returns, the sum of the W workers' pushes: exact in fp32 for
// these values, so the check is equality (#wrong). Times are per iteration
// after -w warm-up iterations and a barrier; algbw is the bytes one worker
// pushes (= pulls) divided by that time, as bench collective's algbw is the
// buffer size over the time of one allreduce.
//
// Bytes on the wire are read from /proc/net/dev (the calling process's
// network namespace, so inside `ip netns exec` its veth) before and after
// the timed iterations: everything the interface carried, ZeroMQ and TCP/IP
// framing, heartbeats and ACKs included. On a node of its own, a worker's
// tx is what it pushed and rx what it pulled; the servers' traffic mirrors
// the workers'. With the interface left empty every interface but lo is
// summed; on loopback pass `--interface lo` (each byte then counts as sent
// and received).
//
// The per-worker figures are summed through the kvstore itself: one more
// key (kStatsKey) of four floats, pushed and pulled once per row, whose
// dist_sync round is the sum over workers. Floats hold byte counts to 24
// bits of precision, plenty for a report.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "dtrain/bench.h"
#include "dtrain/errors.h"
#include "dtrain/models.h"

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kStatsKey = 100000;

// Worker r's value at element i of key k (small integers, as bench
// collective's values, so that sums are exact).
float value(int r, int key, int64_t i) {
  return static_cast<float>((i * 3 + r + key) % 13 + r + 1);
}

struct Row {
  int64_t bytes = 0;
  std::vector<int> keys;
  std::vector<std::vector<float>> grads, outs;
};

// Sizes in elements of each key of one row.
std::vector<std::vector<int64_t>> row_sizes(const KVStoreBenchOptions& o) {
  std::vector<std::vector<int64_t>> rows;
  if (!o.model.empty()) {
    ModelOptions mo;
    mo.in_channels = 3;
    mo.num_classes = o.num_classes;
    mo.image_size = model_info(o.model).default_image_size;
    std::vector<int64_t> sizes;
    torch::NoGradGuard no_grad;
    for (const auto& p : make_model(o.model, mo)->parameters()) sizes.push_back(p.numel());
    rows.push_back(sizes);
    return rows;
  }
  for (int64_t size = o.min_bytes; size <= o.max_bytes; size *= o.step_factor) {
    if (size >= 4) rows.push_back({size / 4});
    if (size > o.max_bytes / o.step_factor) break;  // no overflow
  }
  return rows;
}

void iterate(KVStore& kv, Row& row) {
  std::vector<KVHandle> handles;
  handles.reserve(row.keys.size());
  for (size_t k = 0; k < row.keys.size(); ++k) {
    handles.push_back(kv.pushpull_async(row.keys[k], row.grads[k], row.outs[k]));
  }
  for (const KVHandle& h : handles) h.wait(kv.timeout());
}

int64_t count_wrong(const Row& row, int workers) {
  int64_t wrong = 0;
  for (size_t k = 0; k < row.keys.size(); ++k) {
    const std::vector<float>& out = row.outs[k];
    for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
      float expected = 0;
      for (int r = 0; r < workers; ++r) expected += value(r, row.keys[k], i);
      if (out[i] != expected) ++wrong;
    }
  }
  return wrong;
}

}  // namespace

void check_kvstore_bench_options(const KVStoreBenchOptions& o) {
  if (o.model.empty() && (o.min_bytes < 1 || o.max_bytes < o.min_bytes || o.step_factor < 2)) {
    throw InvalidArgument(cat("bench kvstore: bad size range -b ", o.min_bytes, " -e ", o.max_bytes,
                              " -f ", o.step_factor, "; need 1 <= -b <= -e and -f >= 2"));
  }
  if (o.iterations < 1 || o.warmup < 0)
    throw InvalidArgument("bench kvstore: need -n >= 1 and -w >= 0");
  if (!o.model.empty()) model_info(o.model);  // names the valid models
}

InterfaceBytes parse_interface_bytes(const std::string& text, const std::string& interface) {
  // "  eth0: rx_bytes rx_packets errs drop fifo frame compressed multicast tx_bytes ..."
  InterfaceBytes total;
  std::vector<std::string> present;
  bool found = false;
  for (const std::string& line : split(text, '\n')) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    std::istringstream fields(line.substr(colon + 1));
    std::vector<unsigned long long> v;
    unsigned long long x = 0;
    while (fields >> x) v.push_back(x);
    if (v.size() < 9) continue;  // the two header lines
    present.push_back(name);
    if (interface.empty() ? name == "lo" : name != interface) continue;
    found = true;
    total.rx += v[0];
    total.tx += v[8];
  }
  if (!interface.empty() && !found) {
    throw InvalidArgument(cat("bench kvstore: no network interface '", interface,
                              "' in this namespace; present: ", join(present, ", ")));
  }
  return total;
}

InterfaceBytes read_interface_bytes(const std::string& interface) {
  std::ifstream in("/proc/net/dev");
  if (!in) throw Error("bench kvstore: cannot read /proc/net/dev (is /proc mounted?)");
  std::stringstream s;
  s << in.rdbuf();
  return parse_interface_bytes(s.str(), interface);
}

KVStoreBenchResult run_kvstore_bench(const KVStoreBenchOptions& o, KVStore& kv) {
  check_kvstore_bench_options(o);
  read_interface_bytes(o.interface);  // a bad interface fails before any traffic
  KVStoreBenchResult result;
  result.options = o;
  result.workers = kv.num_workers();
  const int rank = kv.rank();
  std::vector<float> stats(4, 0.0f), stats_sum(4, 0.0f);
  kv.init(kStatsKey, stats);
  int next_key = 0;
  for (const std::vector<int64_t>& sizes : row_sizes(o)) {
    Row row;
    for (int64_t n : sizes) {
      const int key = next_key++;
      row.keys.push_back(key);
      std::vector<float> g(n);
      for (int64_t i = 0; i < n; ++i) g[i] = value(rank, key, i);
      row.grads.push_back(std::move(g));
      row.outs.emplace_back(n, 0.0f);
      row.bytes += n * 4;
      kv.init(key, row.grads.back());
    }
    for (int i = 0; i < o.warmup; ++i) iterate(kv, row);
    kv.barrier();
    const InterfaceBytes before = read_interface_bytes(o.interface);
    const auto start = Clock::now();
    for (int i = 0; i < o.iterations; ++i) iterate(kv, row);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    const InterfaceBytes after = read_interface_bytes(o.interface);
    int64_t wrong = 0;
    if (o.check) {
      for (auto& out : row.outs) std::fill(out.begin(), out.end(), -1.0f);
      iterate(kv, row);
      wrong = count_wrong(row, result.workers);
    }
    stats = {static_cast<float>(us / o.iterations),
             static_cast<float>(static_cast<double>(after.tx - before.tx) / o.iterations),
             static_cast<float>(static_cast<double>(after.rx - before.rx) / o.iterations),
             static_cast<float>(wrong)};
    kv.pushpull(kStatsKey, stats, stats_sum);
    KVStoreBenchRow r;
    r.bytes = row.bytes;
    r.keys = static_cast<int64_t>(row.keys.size());
    r.time_us = stats_sum[0] / result.workers;
    r.algbw_gbps = r.bytes / (r.time_us * 1e-6) / 1e9;
    r.tx_bytes = stats_sum[1] / result.workers;
    r.rx_bytes = stats_sum[2] / result.workers;
    r.wrong = o.check ? static_cast<int64_t>(stats_sum[3]) : -1;
    result.rows.push_back(r);
  }
  return result;
}

std::string format_kvstore_table(const KVStoreBenchResult& res, int servers) {
  const KVStoreBenchOptions& o = res.options;
  std::string out = cat("# dtrain bench kvstore: pushpull, dist_sync, ", res.workers,
                        " worker(s), ", servers, " server(s), ");
  out += o.model.empty() ? cat("-b ", o.min_bytes, " -e ", o.max_bytes, " -f ", o.step_factor)
                         : cat("model ", o.model, " (", o.num_classes, " classes)");
  out += cat(" -n ", o.iterations, " -w ", o.warmup, " -c ", o.check ? 1 : 0, ", interface ",
             o.interface.empty() ? "all but lo" : o.interface, "\n#\n");
  out +=
      "#                                              wire per worker per iteration\n"
      "#       size   keys       time   algbw          tx          rx   tx/size  rx/size  #wrong\n"
      "#        (B)              (us)  (GB/s)         (B)         (B)\n";
  char line[256];
  int64_t wrong = 0;
  for (const KVStoreBenchRow& r : res.rows) {
    const double size = static_cast<double>(r.bytes);
    std::snprintf(line, sizeof line, "%12lld %6lld %10.1f %7.3f %11.0f %11.0f %9.3f %8.3f %7lld\n",
                  static_cast<long long>(r.bytes), static_cast<long long>(r.keys), r.time_us,
                  r.algbw_gbps, r.tx_bytes, r.rx_bytes, r.tx_bytes / size, r.rx_bytes / size,
                  static_cast<long long>(r.wrong));
    out += line;
    wrong += std::max<int64_t>(r.wrong, 0);
  }
  out += cat("# Out of bounds values : ", wrong, wrong == 0 ? " OK" : " FAILED", "\n");
  return out;
}

std::string to_json(const KVStoreBenchResult& res, int servers) {
  nlohmann::json j;
  j["impl"] = "dtrain";
  j["bench"] = "kvstore";
  j["model"] = res.options.model;
  j["workers"] = res.workers;
  j["servers"] = servers;
  j["iterations"] = res.options.iterations;
  j["warmup"] = res.options.warmup;
  j["interface"] = res.options.interface;
  nlohmann::json rows = nlohmann::json::array();
  for (const KVStoreBenchRow& r : res.rows) {
    rows.push_back({{"bytes", r.bytes},
                    {"keys", r.keys},
                    {"time_us", r.time_us},
                    {"algbw_gbps", r.algbw_gbps},
                    {"tx_bytes", r.tx_bytes},
                    {"rx_bytes", r.rx_bytes},
                    {"wrong", r.wrong}});
  }
  j["rows"] = rows;
  return j.dump();
}

}  // namespace dtrain
