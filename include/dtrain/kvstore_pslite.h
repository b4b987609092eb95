#pragma once
// A worker that speaks ps-lite's own key-value API (dmlc/ps-lite
// KVWorker<float>): many uint64 keys per request, float values, optional
// lengths, routed by ps-lite's server key ranges (docs/ps.md,
// "Interoperability with ps-lite").
//
// KVStore (dtrain/kvstore.h) is MXNet's API: one int key per array, bytes
// and a dtype command, keys hashed (key·9973 mod S) to a server. ps-lite's
// own servers (KVServerDefaultHandle<float>, as in its tests/test_kv_app.cc)
// expect something else: n sorted keys and one float per key (or lens[i]
// floats for key i), each key sent to the server whose range holds it;
// pushes add into the store and pulls answer the stored floats. PsLiteWorker
// sends exactly that, so a dtrain program can be a worker of a ps-lite job
// (ps-lite's scheduler and servers) or of a dtrain job (dtrain's servers
// implement the same accumulating default for these requests):
//
//   auto kv = dtrain::PsLiteWorker::create();     // DMLC_ROLE=worker
//   std::vector<uint64_t> keys = {1, dtrain::kPsLiteMaxKey / 2 + 7};  // ascending
//   std::vector<float> vals = {1.5f, 2.0f}, out;
//   kv->push(keys, vals);                           // store[k] += val
//   kv->pull(keys, &out);                           // out == {1.5, 2.0}
//   kv->close();                                    // ps-lite's Finalize
//
// Thread safety: a PsLiteWorker may be used from one thread at a time;
// handles may be waited on from any thread. Blocking: every call that waits
// has a deadline (KVStoreOptions::timeout; close() by failure detection and
// finalize_timeout + the heartbeat timeout, as KVStore::close) and fails with TimeoutError naming
// the operation, PeerLostError naming a dead node, or DistError with a server's refusal or a
// malformed answer.

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "dtrain/kvstore.h"

namespace dtrain {

/// ps-lite's kMaxKey. Server r of S holds keys [kPsLiteMaxKey/S·r,
/// kPsLiteMaxKey/S·(r+1)) (Postoffice::GetServerKeyRanges); keys at or past
/// kPsLiteMaxKey/S·S belong to no server.
constexpr uint64_t kPsLiteMaxKey = UINT64_MAX;

class PsLiteWorker {
 public:
  /// Joins the job described by DMLC_* in `env` (as KVStore::create reads
  /// them; default: the process environment) as a worker: registers with the
  /// scheduler and meets every node in the start barrier (ps-lite's Start).
  /// DMLC_ROLE must be worker: serve the other roles with serve_ps_role()
  /// (dtrain's servers) or with ps-lite's own programs. Throws
  /// InvalidArgument naming a bad variable, TimeoutError naming the
  /// scheduler address after options.connect_timeout, PeerLostError.
  static std::unique_ptr<PsLiteWorker> create(KVStoreOptions options = {},
                                              const EnvLookup& env = {});

  /// Calls close() unless an exception is unwinding (then it just leaves, as
  /// a KVStore does: the others fail within the heartbeat timeout naming it).
  virtual ~PsLiteWorker() = default;

  /// This worker's rank in [0, num_workers()) (ps-lite's MyRank()).
  virtual int rank() const = 0;
  virtual int num_workers() const = 0;
  virtual int num_servers() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;

  /// ps-lite's Push: adds vals into the servers' stores. `keys` ascending
  /// (ps-lite's slicer needs them sorted) and below kPsLiteMaxKey/S·S.
  /// Without `lens`, every key has vals.size()/keys.size() values (a whole
  /// number); with `lens`, key i has lens[i] values and lens.size() ==
  /// keys.size(), sum(lens) == vals.size(). `cmd` goes in the message head
  /// (ps-lite's cmd; its default handle and dtrain's servers ignore it).
  /// The arrays are copied before the call returns. Throws InvalidArgument
  /// for keys or lengths that break these rules.
  virtual KVHandle push_async(const std::vector<uint64_t>& keys, const std::vector<float>& vals,
                              const std::vector<int>& lens = {}, int cmd = 0) = 0;

  /// ps-lite's Pull: the servers' values of `keys` (ascending, as for push),
  /// in key order. When the handle completes, `vals` holds them: resized
  /// when it was empty, else it must already have exactly that many
  /// (DistError otherwise). With `lens`, it receives each key's length in
  /// the same way (a server that sends none is a DistError). Preconditions:
  /// `vals` and `lens` outlive the handle's wait and are not touched until it
  /// returned.
  virtual KVHandle pull_async(const std::vector<uint64_t>& keys, std::vector<float>* vals,
                              std::vector<int>* lens = nullptr, int cmd = 0) = 0;

  /// ps-lite's PushPull: one request per server that pushes `vals` and
  /// answers the values after the push. `outs` is resized to vals.size()
  /// when empty, else must have that size (InvalidArgument). A non-empty
  /// `*lens` is sent with the push, and receives the answered lengths.
  virtual KVHandle pushpull_async(const std::vector<uint64_t>& keys, const std::vector<float>& vals,
                                  std::vector<float>* outs, std::vector<int>* lens = nullptr,
                                  int cmd = 0) = 0;

  /// Blocks until every worker has called barrier() (worker group).
  virtual void barrier() = 0;

  /// Leaves the job (ps-lite's Finalize): tells a dtrain scheduler that this
  /// worker's barriers are over, then waits in the final barrier of all
  /// nodes until every node has finished. Pending handles must be waited on
  /// first. Idempotent.
  virtual void close() = 0;

  void push(const std::vector<uint64_t>& keys, const std::vector<float>& vals,
            const std::vector<int>& lens = {}, int cmd = 0) {
    push_async(keys, vals, lens, cmd).wait(timeout());
  }
  void pull(const std::vector<uint64_t>& keys, std::vector<float>* vals,
            std::vector<int>* lens = nullptr, int cmd = 0) {
    pull_async(keys, vals, lens, cmd).wait(timeout());
  }
  void pushpull(const std::vector<uint64_t>& keys, const std::vector<float>& vals,
                std::vector<float>* outs, std::vector<int>* lens = nullptr, int cmd = 0) {
    pushpull_async(keys, vals, outs, lens, cmd).wait(timeout());
  }
};

}  // namespace dtrain
