#pragma once
// Stale synchronous parallel (SSP) for dist_async: the servers' bound on how
// far workers may run apart.
//
// Note [Stale synchronous parallel]
// With staleness s >= 0 (KVStoreOptions::staleness, DTRAIN_PS_STALENESS,
// `--staleness`), a dist_async server counts, per key, how many times each
// worker has pushed it (the key's clock of that worker; the initialising
// push of rank 0's init does not count). A pull of key k by worker w, whose
// clock of k is c when the pull arrives, is answered only once every worker
// still in the job has pushed k at least c − s times; until then the server
// holds it and answers it, with the value current then, on the push that
// satisfies it (or when the slow worker leaves the job). s = 0 keeps the
// workers in step (every pull sees the same step's pushes of all workers, as
// dist_sync); s = 1 lets a worker run one step ahead of the slowest, not two.
// Clocks are per key and per server (a big array's parts are gated by each
// of its servers), which needs no extra messages: ZeroMQ keeps a worker's
// messages to a server in order, so its pushes arrive before its pull.
// Rank 0 turns SSP on with dtrain's server command kStaleness (101, body
// "<s>,<limit ms>"); ps-lite's and MXNet's servers refuse it, and the worker
// then fails naming the command.
//
// Note [SSP deadline]
// A held pull must not wait forever behind a dead or stuck worker, and the
// puller's error should name who it waits for, which only the server knows.
// So the server refuses a pull held longer than the limit rank 0 sent:
// KVStoreOptions::timeout minus a margin (the smaller of 1 s and a quarter
// of it), i.e. before the puller's own deadline, naming the key, the clocks
// and the slowest worker. The server checks deadlines on its handler thread's
// tick (Node's tick handler: each message, at least every 50 ms).

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dtrain/kvstore.h"
#include "ps/wire/protocol.h"

namespace dtrain::ps {

using SteadyTime = std::chrono::steady_clock::time_point;

/// A pull the server holds back (a data request with its reply details).
struct HeldPull {
  Meta meta;
  uint64_t ps_key = 0;
  int dtype = 0;
  int key = 0;
  int worker = 0;      // rank
  int64_t clock = 0;   // the worker's pushes of key when the pull arrived
  SteadyTime since{};  // arrival
};

/// The servers' side of SSP (Note [Stale synchronous parallel]). Not
/// thread-safe: used from the server's handler thread.
class StalenessGate {
 public:
  explicit StalenessGate(int num_workers) : num_workers_(num_workers), left_(num_workers, false) {}

  /// Turns SSP on (staleness >= 0; pulls are refused after `limit`) or off
  /// (−1; held pulls are then released by the next release()).
  void configure(int staleness, std::chrono::milliseconds limit);
  bool enabled() const { return staleness_ >= 0; }
  int staleness() const { return staleness_; }

  /// Counts a push of `key` by worker `worker` (rank); ranks outside the job
  /// (ps-lite clients) are not counted.
  void pushed(int key, int worker);
  /// `worker` has left the job: no pull waits for it any more.
  void left(int worker);
  /// True when `pull` may be answered now; otherwise the gate keeps it.
  bool admit(HeldPull pull);
  /// The held pulls that may now be answered, removed from the gate.
  std::vector<HeldPull> release();
  /// The held pulls older than the limit at `now`, removed, each with the
  /// refusal naming the key and the slowest worker.
  std::vector<std::pair<HeldPull, std::string>> expire(SteadyTime now);

 private:
  int64_t clock(int key, int worker) const;
  bool ready(const HeldPull& p) const;
  int slowest(int key) const;  // rank of the active worker with the fewest pushes

  int num_workers_;
  int staleness_ = -1;
  std::chrono::milliseconds limit_{0};
  std::vector<bool> left_;
  std::unordered_map<int, std::vector<int64_t>> pushes_;  // key -> pushes per worker rank
  std::vector<HeldPull> held_;
};

/// Encodes and decodes kStaleness's body "<s>,<limit ms>"; decode is false
/// for anything malformed (s < −1, limit < 1).
std::string encode_staleness(int staleness, std::chrono::milliseconds limit);
bool decode_staleness(const std::string& body, int* staleness, std::chrono::milliseconds* limit);

/// The held-pull limit for a worker timeout (Note [SSP deadline]).
std::chrono::milliseconds staleness_limit(std::chrono::milliseconds timeout);

/// `options.staleness`, or DTRAIN_PS_STALENESS when set (an integer >= −1;
/// InvalidArgument naming the variable otherwise).
int resolve_staleness(const KVStoreOptions& options, const EnvLookup& env);

}  // namespace dtrain::ps
