// Note [Stale synchronous parallel], Note [SSP deadline] (ssp.h).
#include "ps/server/ssp.h"

#include <algorithm>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::ps {

void StalenessGate::configure(int staleness, std::chrono::milliseconds limit) {
  staleness_ = staleness;
  limit_ = limit;
}

void StalenessGate::pushed(int key, int worker) {
  if (worker < 0 || worker >= num_workers_) return;
  auto& counts = pushes_[key];
  if (counts.empty()) counts.assign(num_workers_, 0);
  ++counts[worker];
}

void StalenessGate::left(int worker) {
  if (worker >= 0 && worker < num_workers_) left_[worker] = true;
}

int64_t StalenessGate::clock(int key, int worker) const {
  auto it = pushes_.find(key);
  return it == pushes_.end() ? 0 : it->second[worker];
}

int StalenessGate::slowest(int key) const {
  int who = -1;
  for (int w = 0; w < num_workers_; ++w) {
    if (left_[w]) continue;
    if (who < 0 || clock(key, w) < clock(key, who)) who = w;
  }
  return who;
}

bool StalenessGate::ready(const HeldPull& p) const {
  if (!enabled()) return true;
  const int who = slowest(p.key);
  return who < 0 || clock(p.key, who) >= p.clock - staleness_;
}

bool StalenessGate::admit(HeldPull pull) {
  if (!enabled() || pull.worker < 0 || pull.worker >= num_workers_) return true;
  pull.clock = clock(pull.key, pull.worker);
  if (ready(pull)) return true;
  held_.push_back(std::move(pull));
  return false;
}

std::vector<HeldPull> StalenessGate::release() {
  std::vector<HeldPull> out;
  auto keep = std::stable_partition(held_.begin(), held_.end(),
                                    [&](const HeldPull& p) { return !ready(p); });
  std::move(keep, held_.end(), std::back_inserter(out));
  held_.erase(keep, held_.end());
  return out;
}

std::vector<std::pair<HeldPull, std::string>> StalenessGate::expire(SteadyTime now) {
  std::vector<std::pair<HeldPull, std::string>> out;
  auto keep = std::stable_partition(held_.begin(), held_.end(),
                                    [&](const HeldPull& p) { return now - p.since < limit_; });
  for (auto it = keep; it != held_.end(); ++it) {
    const int who = slowest(it->key);
    const double held_s =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - it->since).count() / 1000.0;
    std::string why = cat(
        "pull of key ", it->key, " by worker ", it->worker, " held for ", held_s,
        " s by staleness ", staleness_, ": worker ", it->worker, " has pushed the key ", it->clock,
        " time(s) and needs every worker at ", it->clock - staleness_, ", but the slowest, worker ",
        who, ", has pushed it ", clock(it->key, who), " time(s); find why worker ", who,
        " is stuck or slow, or raise the staleness (KVStoreOptions::staleness, "
        "DTRAIN_PS_STALENESS)");
    out.emplace_back(std::move(*it), std::move(why));
  }
  held_.erase(keep, held_.end());
  return out;
}

std::string encode_staleness(int staleness, std::chrono::milliseconds limit) {
  return cat(staleness, ",", limit.count());
}

bool decode_staleness(const std::string& body, int* staleness, std::chrono::milliseconds* limit) {
  const size_t comma = body.find(',');
  if (comma == std::string::npos) return false;
  long long s = 0, ms = 0;
  if (!parse_int(std::string_view(body).substr(0, comma), &s) ||
      !parse_int(std::string_view(body).substr(comma + 1), &ms)) {
    return false;
  }
  if (s < -1 || s > (1 << 30) || ms < 1) return false;
  *staleness = static_cast<int>(s);
  *limit = std::chrono::milliseconds(ms);
  return true;
}

std::chrono::milliseconds staleness_limit(std::chrono::milliseconds timeout) {
  const auto margin = std::min<std::chrono::milliseconds>(std::chrono::seconds(1), timeout / 4);
  return std::max<std::chrono::milliseconds>(std::chrono::milliseconds(1), timeout - margin);
}

int resolve_staleness(const KVStoreOptions& options, const EnvLookup& env) {
  auto v = env ? env("DTRAIN_PS_STALENESS") : std::nullopt;
  if (!v) {
    if (options.staleness < -1) {
      throw InvalidArgument(cat("KVStoreOptions::staleness ", options.staleness,
                                " is below -1; use -1 (no bound), 0 (in step) or more"));
    }
    return options.staleness;
  }
  long long s = 0;
  if (!parse_int(*v, &s) || s < -1 || s > (1 << 30)) {
    throw InvalidArgument(cat("environment variable DTRAIN_PS_STALENESS='", *v,
                              "' is not an integer >= -1 (-1: no bound, 0: in step)"));
  }
  return static_cast<int>(s);
}

}  // namespace dtrain::ps
