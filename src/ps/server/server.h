#pragma once
// The kvstore server: MXNet's KVStoreDistServer semantics on ps-lite
// messages, as a pure message handler (no sockets) so tests drive it
// directly.
//
// Note [Which handle answers]
// ps-lite's own programs (test_kv_app.cc) use KVServerDefaultHandle<float>:
// one float per key, pushes accumulate (store[key] += val), pulls return the
// store. MXNet's workers (and dtrain's) send bytes: values typed CHAR with a
// lengths frame, the dtype in the command head. The values frame's
// meta.data_type tells them apart: CHAR -> MXNet semantics, FLOAT -> ps-lite's
// accumulating default.
//
// Note [MXNet's server]
// simple_app requests are commands (head): kController 0 (here: the body is
// a dtrain OptimizerSpec), kSetMultiPrecision 1 (acknowledged: the master
// copy is always fp32), kStopServer 2, kSyncMode 3, kSetGradientCompression
// 4 ("2,<threshold>": Note [2-bit compression]), and dtrain's own
// kWorkerLeaving 100 (Note [Leaving early]) and kStaleness 101 (Note [Stale
// synchronous parallel]: async pulls may be held until slower workers
// push). Data requests carry one key, the worker's key plus this server's
// key-range start (kMaxKey/S·rank), and the command Cantor-pairs the request type (0 default
// push/pull, 2 compressed; 1, row-sparse, is refused) and the mshadow dtype (0 float32, 2 float16):
// head 0 is fp32, 5 fp16, 3 a compressed fp32 push.
// dtrain's request type 100 reads or restores a key's optimizer state (Note
// [Optimizer state] below).
// The first push of a key initialises it. Later pushes: in sync mode the
// server sums the pushes of a key until W have arrived, then updates (the
// optimizer if one is set, else stored = sum) and answers every pending
// request, with the new value for those that also pull; in async mode each
// push updates at once (the optimizer, else stored += push). Pulls are
// answered at once with the stored value. A request the server cannot serve
// is answered with body "dtrain-error: <why>" and no data, so a dtrain
// worker fails at once naming the cause; nothing a client sends can crash
// the server.
//
// Note [Optimizer state]
// MXNet refuses save_optimizer_states on a dist store: the momentum lives on
// the servers and a checkpoint cannot hold it. dtrain adds request type 100
// (kRequestOptimizerState) to the data commands, Cantor-paired with the dtype
// like the others (5050 for float32, 5255 for float16), with the values' key
// encoding, so it follows their sharding: a small key's state is on its one
// server, a big array's in parts on every server. A pull (push 0, pull 1, an
// empty values frame) is answered with this server's part of the momentum
// (zeros before the first update and without an optimizer) in the request's
// dtype, and the key's update count (the rounds or async pushes applied since
// init) as decimal text in the body. A push (push 1, pull 0, values and
// lengths as a default push, the update count in the body) replaces both and
// is acknowledged once saved (Note [Server snapshots]); it takes no part in
// a sync round, so a worker sends it between steps (KVStore::
// push_optimizer_state). The key must be initialised and the sizes must
// match, else the request is refused. A ps-lite client never sends it;
// MXNet's and ps-lite's servers do not know it.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "dtrain/kvstore.h"
#include "ps/server/ssp.h"
#include "ps/wire/protocol.h"

namespace dtrain::ps {

constexpr uint64_t kMaxKey = UINT64_MAX;
/// Where server `rank` of `num_servers` starts its key range (ps-lite).
inline uint64_t key_range_begin(int rank, int num_servers) {
  return kMaxKey / static_cast<uint64_t>(num_servers) * static_cast<uint64_t>(rank);
}

/// MXNet's commands and data-command encoding.
enum class ServerCommand : int {
  kController = 0,
  kSetMultiPrecision = 1,
  kStopServer = 2,
  kSyncMode = 3,
  kSetGradientCompression = 4,
  /// dtrain's extension: the sending worker has finished (Note [Leaving early]).
  kWorkerLeaving = 100,
  /// dtrain's extension: SSP for async mode, body "<s>,<limit ms>"
  /// (Note [Stale synchronous parallel] in ssp.h).
  kStaleness = 101,
};
/// dtrain's data request type: a key's optimizer state (Note [Optimizer state]).
constexpr int kRequestOptimizerState = 100;
constexpr int kMshadowFloat32 = 0;
constexpr int kMshadowFloat16 = 2;
/// MXNet's GetCommandType: Cantor pairing of request type and dtype.
inline int data_command(int request_type, int dtype) {
  return (request_type + dtype) * (request_type + dtype + 1) / 2 + dtype;
}
/// The inverse; false for a negative command.
bool depair_command(int cmd, int* request_type, int* dtype);
/// "dtrain-error: " — the body prefix of a refusal.
extern const char* const kErrorPrefix;
/// A server's refusal in a response's `body`: the text after kErrorPrefix;
/// nullopt when the body is not a refusal.
std::optional<std::string> server_refusal(const std::string& body);

class SnapshotDir;  // snapshot.h

struct ServerOptions {
  int rank = 0;
  int num_servers = 1;
  int num_workers = 1;
};

class KVServer {
 public:
  /// Sends a reply to node `recver`.
  using Reply = std::function<void(int recver, const Message&)>;

  KVServer(ServerOptions options, Reply reply);

  /// Handles one request (data or simple_app). Never throws on bad input.
  void handle(const Message& msg);
  /// Refuses pulls SSP has held past their limit (Note [SSP deadline]).
  /// Called on the handler thread, between messages.
  void tick(SteadyTime now);

  bool sync_mode() const { return sync_; }
  bool stop_requested() const { return stop_requested_; }
  /// The stored fp32 value of a (decoded) key; nullptr if not initialised.
  const std::vector<float>* stored(int key) const;

  /// Note [Server snapshots] (snapshot.h): from now on every change of a
  /// key or of the settings is written to `dir`/server<rank>/ before it is
  /// answered, and requests a worker re-sends are recognised. `reload`: load
  /// the rank's snapshot (a replacement server); otherwise the rank's old
  /// files are removed (a new job). Throws StoreError naming the file that
  /// cannot be read, is corrupt, or is another job's. Defined in snapshot.cpp.
  void enable_snapshots(const std::string& dir, bool reload);
  ~KVServer();

 private:
  struct Pending {
    Meta meta;
    uint64_t ps_key;
    int dtype;
  };
  struct UpdateBuf {
    // The round's sum; shared with stored values (Note [Replies share the
    // stored value] in server.cpp).
    std::shared_ptr<std::vector<float>> merged;
    std::vector<Pending> requests;
  };
  void handle_command(const Message& msg);
  void handle_mxnet(const Message& msg);
  void handle_pslite_default(const Message& msg);
  void handle_optimizer_state(const Message& msg, int key, uint64_t ps_key, int dtype);
  bool request_type_ok(int head, int* request_type, int* dtype) const;
  // `values`: `count` values of mshadow `dtype`, at any alignment.
  void accept_push(const Meta& m, int key, uint64_t ps_key, int dtype, const char* values,
                   size_t count);
  void apply(int key, const std::vector<float>& update);  // async push, or optimizer step
  std::vector<float>& writable(int key);                  // copy on write (server.cpp)
  int active_workers() const { return options_.num_workers - static_cast<int>(departed_.size()); }
  void complete_round(int key);
  void respond(const Meta& req, uint64_t ps_key, int dtype, bool with_data);
  void send_values(const Meta& req, uint64_t ps_key, const std::vector<float>& values, int dtype,
                   std::string body);
  void refuse(const Meta& req, const std::string& why);
  // Note [Server snapshots]: true when `m` re-sends a push already merged
  // (then it is answered or dropped here). Defined in snapshot.cpp.
  bool duplicate_push(const Meta& m, int key, uint64_t ps_key, int dtype);
  void save_key(int key);  // no-ops without a snapshot directory
  void save_settings();
  void release_held();
  bool admit_pull(const Meta& m, int key, uint64_t ps_key, int dtype);  // false: held

  ServerOptions options_;
  Reply reply_;
  bool sync_ = false;
  bool stop_requested_ = false;
  bool has_optimizer_ = false;
  int compression_ = 0;  // kCompressionNone or kCompressionTwoBit (compression.h)
  float threshold_ = 0.5f;
  OptimizerSpec optimizer_;
  // Shared with replies ZeroMQ is still sending (Note [Replies share the
  // stored value] in server.cpp): write only through writable().
  std::unordered_map<int, std::shared_ptr<std::vector<float>>> store_;
  std::unordered_map<int, std::vector<float>> momentum_;
  std::unordered_map<int, UpdateBuf> updates_;
  std::unordered_map<uint64_t, float> default_store_;  // ps-lite's default handle
  std::set<int> departed_;  // workers that have finished (Note [Leaving early])
  // Note [Server snapshots]: key -> worker id -> timestamp of its last merged
  // push, kept only with a snapshot directory.
  std::unordered_map<int, std::map<int, int>> last_push_;
  // key -> updates applied since init (SnapshotKey::updates; Note [Optimizer state]).
  std::unordered_map<int, uint64_t> updates_applied_;
  std::unique_ptr<SnapshotDir> snapshot_;
  StalenessGate ssp_;  // async mode's staleness bound
};

}  // namespace dtrain::ps
