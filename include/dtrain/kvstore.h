#pragma once
// Parameter-server training with MXNet's kvstore semantics over ps-lite's
// wire protocol (docs/ps.md).
//
// A job has one scheduler, S servers holding the parameters and W workers
// that push gradients and pull weights. Every process runs the same program
// with its role in DMLC_ROLE (MXNet's and Kubeflow MXJob's contract):
//
//   dtrain::KVStoreOpen kv = dtrain::KVStore::create("dist_sync");
//   if (kv.served()) return 0;   // a scheduler or server: its role has ended
//   kv->init(0, weights);                             // rank 0's value wins
//   kv->set_optimizer(dtrain::OptimizerSpec::parse("sgd lr=0.1 momentum=0.9"));
//   for (...) { kv->pushpull(0, grad, weights); }     // blocking, with timeout
//   kv->close();                                      // this worker is done
//
// Thread safety: a KVStore may be used from one thread at a time; handles
// may be waited on from any thread. Blocking: every call that waits has a
// deadline (KVStoreOptions::timeout; close(): finalize_timeout) and fails
// with TimeoutError naming the key and operation (close(): the nodes that
// did not close); a dead node fails every pending call with PeerLostError
// naming its role, rank and host.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/options.h"

namespace dtrain {

/// Looks up an environment variable; nullopt when unset (as in comm.h).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

/// MXNet's kvstore types (mx.kv.create's names), parsed by
/// parse_kvstore_type and named by kvstore_type_name: the one spelling of
/// each (Note [One route] in src/ps/job/route.cpp).
enum class KVStoreType {
  kLocal,           ///< "local": this process only, no network
  kDistSync,        ///< "dist_sync": servers sum the W pushes of a key, then update
  kDistAsync,       ///< "dist_async": servers apply each push at once
  kDistDeviceSync,  ///< "dist_device_sync": a node sums first, then one dist_sync worker
};

/// "local", "dist_sync", "dist_async" or "dist_device_sync".
const char* kvstore_type_name(KVStoreType type);
/// The type called `name` (one of kvstore_type_names()). Throws
/// InvalidArgument "unknown kvstore type 'NAME'; valid types: local, ...".
KVStoreType parse_kvstore_type(std::string_view name);
/// "local, dist_sync, dist_async, dist_device_sync", for messages and help.
std::string kvstore_type_names();
/// Whether a store of `type` is a job of a scheduler, servers and workers.
bool is_dist(KVStoreType type);

/// Where a training loop's optimizer runs under a kvstore
/// (TrainOptions::kvstore_optimizer, dtrain/train.h): kWorker (the servers
/// sum, every worker steps its own optimizer), kServer (MXNet's
/// update_on_kvstore: the servers run SGD), kAuto (kServer for dist_async,
/// else kWorker).
enum class KVStoreOptimizer { kAuto, kWorker, kServer };

/// "auto", "worker" or "server".
const char* kvstore_optimizer_name(KVStoreOptimizer where);
/// The place called `name`; InvalidArgument listing auto, worker, server.
KVStoreOptimizer parse_kvstore_optimizer(std::string_view name);

/// A process's role in a dist job: MXNet's DMLC_ROLE.
enum class PsRole { kScheduler, kServer, kWorker };

/// "scheduler", "server" or "worker".
const char* ps_role_name(PsRole role);
/// The role called `name`; InvalidArgument naming it otherwise.
PsRole parse_ps_role(std::string_view name);

/// The role this process plays with a store of `type`, resolved from
/// DMLC_ROLE in `env` (empty: the process environment) for dist types; a
/// local store's process is its only worker. Throws InvalidArgument, one
/// line naming DMLC_ROLE, when a dist type finds it unset or not
/// scheduler, server or worker. Reads only the environment.
PsRole resolve_ps_role(KVStoreType type, const EnvLookup& env = {});

/// Element types a kvstore moves: MXNet's float32 and float16 commands.
enum class KVDType { kFloat32, kFloat16 };

/// A caller-owned array a call reads. fp16 values are IEEE half bit patterns.
/// Without an owner the dist store copies what it pushes when the call is
/// made, so the caller may reuse the array at once. With `owner` (which
/// keeps `data` alive; kv_values() in dtrain/kvstore_torch.h sets it to the
/// tensor) the dist store sends the bytes in place, holding `owner` until
/// they are on the socket; the caller then must not modify them until the
/// handle's wait() has returned (Note [Pushed arrays] in
/// src/ps/worker/dist_store.cpp).
struct ConstValues {
  const void* data = nullptr;
  size_t count = 0;
  KVDType dtype = KVDType::kFloat32;
  std::shared_ptr<const void> owner;
  ConstValues() = default;
  ConstValues(const float* p, size_t n) : data(p), count(n) {}
  ConstValues(const std::vector<float>& v) : data(v.data()), count(v.size()) {}  // NOLINT
  ConstValues(const uint16_t* p, size_t n) : data(p), count(n), dtype(KVDType::kFloat16) {}
};

/// A caller-owned array a call writes; it must outlive the handle's wait.
struct Values {
  void* data = nullptr;
  size_t count = 0;
  KVDType dtype = KVDType::kFloat32;
  Values() = default;
  Values(float* p, size_t n) : data(p), count(n) {}
  Values(std::vector<float>& v) : data(v.data()), count(v.size()) {}  // NOLINT
  Values(uint16_t* p, size_t n) : data(p), count(n), dtype(KVDType::kFloat16) {}
};

/// The update the servers apply to a key's weights w with the summed
/// gradient g (MXNet's SGD): g' = rescale_grad·g;
/// mom = momentum·mom − learning_rate·(g' + weight_decay·w); w += mom.
/// Serialised as "sgd lr=0.1 momentum=0.9 wd=0.0001 rescale_grad=1".
struct OptimizerSpec {
  std::string name = "sgd";
  double learning_rate = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  double rescale_grad = 1.0;

  std::string serialize() const;
  /// Throws InvalidArgument naming the bad field ("unknown optimizer 'adam'").
  static OptimizerSpec parse(std::string_view text);
};

/// MXNet's 2-bit gradient compression with error feedback: each worker keeps
/// a residual per key and sends only +threshold, −threshold or 0 per value
/// (16 values per float); what is not sent stays in the residual.
enum class GradientCompressionType {
  kNone,  ///< "none": pushes as they are
  k2Bit,  ///< "2bit": MXNet's {'type': '2bit'}
};
/// "none" or "2bit" (MXNet's names; the servers learn the type as MXNet's
/// number, Note [2-bit compression] in src/ps/wire/compression.h).
std::string to_string(GradientCompressionType type);
/// The type to_string() spells `name` as; throws InvalidArgument naming the
/// value and listing the valid ones otherwise.
GradientCompressionType parse_gradient_compression_type(const std::string& name);

struct GradientCompression {
  GradientCompressionType type = GradientCompressionType::kNone;
  float threshold = 0.5f;  ///< > 0 (with k2Bit)
};

/// The processes of one node, as dist_device_sync reduces through them
/// (Note [Device sync] in src/ps/device_sync/device_sync.cpp). dtrain/kvstore_torch.h
/// makes one over a c10d process group (Gloo on CPU, NCCL on GPU):
/// kv_local_group(pg). Every call is collective: all members call it in the
/// same order with arrays of the same size and dtype; it blocks, bounded by
/// the group's own timeout, and throws (TimeoutError, PeerLostError,
/// DistError) when a member fails. Used from one thread at a time.
class KVLocalGroup {
 public:
  virtual ~KVLocalGroup() = default;
  /// This process's rank in the node (LOCAL_RANK) and the node's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// In place: every member ends with the element-wise sum of all members'.
  virtual void all_reduce_sum(Values values) = 0;
  /// In place: every member ends with `root`'s values.
  virtual void broadcast(Values values, int root) = 0;
};

struct KVStoreOptions {
  /// Deadline of every push, pull, pushpull, init, barrier and server
  /// command (close() has finalize_timeout).
  std::chrono::milliseconds timeout{120000};
  /// Heartbeat period and the silence after which a node is declared dead
  /// (env: PS_HEARTBEAT_INTERVAL, PS_HEARTBEAT_TIMEOUT, in seconds).
  /// Heartbeats do not wait for message handling (a server busy summing a
  /// big key still heartbeats), so the timeout need not cover it.
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{5000};
  /// How long a node waits for the scheduler's node table at start.
  std::chrono::milliseconds connect_timeout{60000};
  /// Arrays of at least this many elements are split over all servers
  /// (env: MXNET_KVSTORE_BIGARRAY_BOUND).
  size_t bigarray_bound = 1000000;
  /// dist workers cut every array of more than this many bytes (as fp32)
  /// into parts of at most this size, spread round-robin over the servers,
  /// so that a server answers the start of a big array while the rest is
  /// still arriving (Note [Partitions] in src/ps/worker/dist_store.cpp;
  /// BytePS's partitioning). 0: MXNet's placement exactly (one part per
  /// server), which every worker of a job must then use. Uncompressed
  /// pushes only (2-bit compression keeps MXNet's parts). A partitioned
  /// key must be below 2^20 and have at most 2047 parts; part j uses the
  /// server key key + j·2^20, and a key that would share one is refused at
  /// init (InvalidArgument) (env: DTRAIN_KVSTORE_PARTITION_BYTES).
  size_t partition_bytes = 262144;
  /// The kernel send buffer of each node's connections to the others, in
  /// bytes (SO_SNDBUF through ZMQ_SNDBUF; Linux doubles it). Small buffers
  /// keep a worker's flows to its S servers in step, so that no server waits
  /// for one worker's late part (Note [Send buffers] in src/ps/wire/van.cpp).
  /// 0: the kernel's autotuning (env: DTRAIN_PS_SEND_BUFFER).
  int send_buffer_bytes = 65536;
  /// Server snapshots and node recovery (docs/ps.md): where servers write
  /// their snapshots; non-empty also turns recovery on in the scheduler and
  /// the workers, so set it on every process of the job (env:
  /// DMLC_PS_SNAPSHOT_DIR). Empty (the default): a dead server ends the job.
  std::string snapshot_dir;
  /// With recovery on, how long the scheduler waits for a dead server's
  /// replacement before ending the job (env: PS_RECOVERY_TIMEOUT, seconds).
  std::chrono::milliseconds recovery_timeout{60000};
  /// The job's end: once the first worker has called close(), every other
  /// node must reach it within this long, or the scheduler ends the job and
  /// every close() throws TimeoutError naming the nodes that did not (a
  /// worker alive but hung, or never closing); workers whose scheduler says
  /// nothing give up after finalize_timeout + heartbeat_timeout. Generous by
  /// default, since workers may legitimately finish apart (an uneven last
  /// epoch, a slower dist_async worker). Read by the scheduler and the
  /// workers (env: PS_FINALIZE_TIMEOUT, seconds).
  std::chrono::milliseconds finalize_timeout{600000};
  /// Where log lines go; empty: stderr.
  std::function<void(const std::string&)> log;
  /// SSP for dist_async (Note [Stale synchronous parallel] in src/ps/server/ssp.h):
  /// a worker's pull of a key, after it has pushed that key c times, waits
  /// until every worker still in the job has pushed it at least c − staleness
  /// times; 0 keeps the workers in step (a pull sees every worker's pushes
  /// of the same step, as dist_sync), −1 (the default) is plain dist_async. The environment
  /// variable DTRAIN_PS_STALENESS, when set, wins (the flag is --staleness). A pull held back
  /// longer than `timeout` minus a margin (Note [SSP deadline]) is refused by the server naming the
  /// key and the slowest worker. Ignored by dist_sync (already in step) and local.
  int staleness = -1;
  /// dist_device_sync: this node's processes (see KVLocalGroup). Required
  /// there for workers; dtrain::create_kvstore (dtrain/kvstore_torch.h) makes
  /// one from LOCAL_RANK / LOCAL_WORLD_SIZE when it is null. Other types
  /// ignore it.
  std::shared_ptr<KVLocalGroup> local_group;

  DTRAIN_SETTER(KVStoreOptions, timeout)
  DTRAIN_SETTER(KVStoreOptions, heartbeat_interval)
  DTRAIN_SETTER(KVStoreOptions, heartbeat_timeout)
  DTRAIN_SETTER(KVStoreOptions, connect_timeout)
  DTRAIN_SETTER(KVStoreOptions, bigarray_bound)
  DTRAIN_SETTER(KVStoreOptions, partition_bytes)
  DTRAIN_SETTER(KVStoreOptions, send_buffer_bytes)
  DTRAIN_SETTER(KVStoreOptions, log)
  DTRAIN_SETTER(KVStoreOptions, snapshot_dir)
  DTRAIN_SETTER(KVStoreOptions, recovery_timeout)
  DTRAIN_SETTER(KVStoreOptions, finalize_timeout)
  DTRAIN_SETTER(KVStoreOptions, staleness)
  DTRAIN_SETTER(KVStoreOptions, local_group)
};

/// A pending push, pull or pushpull. Preconditions: the tensors of the
/// operation are neither read (pull) nor modified (push) until wait()
/// returned.
class KVHandle {
 public:
  struct State;
  KVHandle() = default;
  explicit KVHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}
  /// Blocks until done. Throws TimeoutError after `timeout` (naming the key
  /// and operation), PeerLostError when a node died, DistError when a server
  /// rejected the request. Waiting again after success returns at once.
  void wait(std::chrono::milliseconds timeout) const;
  bool is_completed() const;

 private:
  std::shared_ptr<State> state_;
};

class KVStore;

/// What create() returned in a scheduler or server process: it served that
/// role until the job ended. MXNet's create() ends the process there
/// (status 0); dtrain's library never ends the process, so the program
/// does, with status 0 (the dtrain CLI does).
struct RoleServed {
  PsRole role = PsRole::kServer;
};

/// What KVStore::create returns: a worker's store, or RoleServed.
///
/// Example:
/// ```
/// int parameter_server_program() {  // every process of the job runs it
///   dtrain::KVStoreOpen kv = dtrain::KVStore::create("dist_sync");
///   if (kv.served()) return 0;  // a scheduler or server: the job has ended
///   kv->barrier();              // a worker: kv is its store
///   kv->close();
///   return 0;
/// }
/// ```
class KVStoreOpen {
 public:
  explicit KVStoreOpen(std::unique_ptr<KVStore> store);
  explicit KVStoreOpen(RoleServed served);
  KVStoreOpen(KVStoreOpen&&) noexcept;
  KVStoreOpen& operator=(KVStoreOpen&&) noexcept;
  ~KVStoreOpen();

  /// True when this process served a scheduler's or server's role to the
  /// job's end: there is no store, and the program should end with status 0.
  bool served() const { return store_ == nullptr; }
  /// The role this process played (kWorker when it holds a store).
  PsRole role() const { return role_; }
  /// The worker's store. Throws InvalidArgument naming the role when
  /// served(), or after take().
  KVStore& operator*() const { return get(); }
  KVStore* operator->() const { return &get(); }
  /// Moves the worker's store out (to share it: std::shared_ptr<KVStore>
  /// kv = open.take()). Throws as operator*.
  std::unique_ptr<KVStore> take();

 private:
  KVStore& get() const;
  std::unique_ptr<KVStore> store_;
  PsRole role_;
};

/// MXNet's key-value store for parameter-server training (docs/ps.md).
///
/// Preconditions: every worker init()s the same keys with the same sizes
/// before pushing or pulling them; a push or pull's buffers stay untouched
/// until its KVHandle completed; with dist_sync every worker pushes each key
/// once per step.
class KVStore {
 public:
  virtual ~KVStore() = default;

  /// Opens a store of `type` as this process's role (resolve_ps_role):
  /// "local" (kLocal: this process only), "dist_sync" (servers sum the W
  /// pushes of a key, then update), "dist_async" (servers apply each push at
  /// once), "dist_device_sync" (the processes of a node first sum through
  /// options.local_group, then local rank 0 pushes and pulls for the node as
  /// one dist_sync worker and broadcasts what it pulled: DMLC_NUM_WORKER
  /// counts nodes; see Note [Device sync] in src/ps/device_sync/device_sync.cpp
  /// for rank() and num_workers()). A name that is none of these:
  /// InvalidArgument listing the types. Dist types read DMLC_* from `env`
  /// (docs/ps.md); with DMLC_ROLE=scheduler or server, create() serves that
  /// role and returns RoleServed when the job ends (MXNet's create() would
  /// exit the process there; Note [Serving from create] in
  /// src/ps/job/route.cpp); a failure of the role is thrown.
  static KVStoreOpen create(KVStoreType type, KVStoreOptions options = {},
                            const EnvLookup& env = {});
  static KVStoreOpen create(const std::string& type, KVStoreOptions options = {},
                            const EnvLookup& env = {});

  virtual std::string type() const = 0;
  /// This worker's rank in [0, num_workers()). dist_device_sync: the
  /// process's rank, node_rank · local_size + local_rank, of nodes ·
  /// local_size processes (every node must run the same number).
  virtual int rank() const = 0;
  virtual int num_workers() const = 0;

  /// Sets key's initial value: rank 0's value is stored, then all workers
  /// meet in a barrier. Every worker must call it once per key, with the
  /// same size; a second init of a key is InvalidArgument.
  virtual void init(int key, ConstValues value) = 0;
  virtual KVHandle push_async(int key, ConstValues grad) = 0;
  virtual KVHandle pull_async(int key, Values out) = 0;
  virtual KVHandle pushpull_async(int key, ConstValues grad, Values out) = 0;
  /// init, then pull: every worker ends with rank 0's value in `out`.
  virtual void broadcast(int key, ConstValues value, Values out) = 0;
  /// Blocks until every worker has called barrier().
  virtual void barrier() = 0;
  /// Runs `spec` on the servers (sent by rank 0; others ignore it). Without
  /// one, dist_sync servers store the sum of each round's pushes and
  /// dist_async servers add each push to the stored value.
  virtual void set_optimizer(const OptimizerSpec& spec) = 0;
  /// The servers' optimizer state of `key` (dtrain's extension: MXNet
  /// refuses save_optimizer_states on a dist store), so that a checkpoint can
  /// hold it: writes the momentum of MXNet's SGD into `momentum` (the key's
  /// init size, float32 or float16; zeros before the first update and
  /// without an optimizer) and returns the servers' update count (rounds or
  /// async pushes applied since init; for a key split over the servers, the
  /// largest of its parts'). It follows the values' sharding (Note
  /// [Optimizer state] in src/ps/server/server.h). Not collective: one worker may
  /// call it, between steps (no push of the key in flight); blocks up to
  /// timeout(). Throws InvalidArgument for a key not initialised or a wrong
  /// size, TimeoutError, PeerLostError, DistError as a pull does.
  /// dist_device_sync: only local rank 0 (the node's worker) may call it and
  /// its push counterpart; the other processes get InvalidArgument.
  virtual uint64_t pull_optimizer_state(int key, Values momentum);
  /// Restores what pull_optimizer_state returned (into a new job's servers,
  /// after init of the key): the next update continues from `momentum` and
  /// `updates`. Not collective: call it on one worker, then barrier() before
  /// any worker pushes the key (dist_async servers would apply a push at
  /// once). Blocks and throws as pull_optimizer_state.
  virtual void push_optimizer_state(int key, ConstValues momentum, uint64_t updates);
  /// Compresses every later push (dist stores; set before the first init).
  /// Throws InvalidArgument for a 2-bit threshold <= 0, a call after init,
  /// or a local store.
  virtual void set_gradient_compression(const GradientCompression& spec) = 0;
  /// Leaves the job: the servers and the scheduler stop counting this
  /// worker (so workers that run longer, e.g. an uneven last epoch, are not
  /// held up), rank 0 sends MXNet's stop command, and the worker waits in
  /// the final barrier until every node has finished: bounded by failure
  /// detection and KVStoreOptions::finalize_timeout (TimeoutError naming the
  /// nodes that did not close). Pending handles must be waited on first.
  /// Called by the destructor when not called before, except while an
  /// exception unwinds: then the worker just leaves, and the others fail
  /// within the heartbeat timeout naming it rather than wait.
  virtual void close() = 0;

  void push(int key, ConstValues grad) { push_async(key, grad).wait(timeout()); }
  void pull(int key, Values out) { pull_async(key, out).wait(timeout()); }
  void pushpull(int key, ConstValues grad, Values out) {
    pushpull_async(key, grad, out).wait(timeout());
  }
  virtual std::chrono::milliseconds timeout() const = 0;
};

/// Runs a scheduler or server of a dist job described by DMLC_* in `env`
/// (DMLC_ROLE is ignored: `role` is the scheduler or a server; a worker is
/// InvalidArgument). Returns when the job ends; throws on a failure
/// (PeerLostError naming the dead node, StoreError for a port in use,
/// InvalidArgument for bad DMLC_* variables).
void serve_ps_role(PsRole role, KVStoreOptions options = {}, const EnvLookup& env = {});
/// serve_ps_role(parse_ps_role(role), ...): "scheduler" or "server".
void serve_ps_role(const std::string& role, KVStoreOptions options = {}, const EnvLookup& env = {});

}  // namespace dtrain
