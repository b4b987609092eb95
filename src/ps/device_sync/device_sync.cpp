// Note [Device sync]
// MXNet's dist_device_sync runs one process per machine that first sums its
// GPUs' gradients and then is one worker of the parameter-server job. dtrain
// runs one process per device (torchrun's layout), so the processes of a
// node form a KVLocalGroup (a c10d group: NCCL on GPU, Gloo on CPU;
// dtrain/kvstore_torch.h) and:
//   push      every process sums its gradient into a copy through the group
//             (all-reduce), then local rank 0 pushes the node's sum;
//   pull      local rank 0 pulls, then broadcasts the values in the group;
//   pushpull  both: all-reduce, rank 0's dist_sync pushpull, broadcast;
//   init      local rank 0 initialises (global rank 0's value wins);
//   barrier   rank 0 meets the other nodes, then the group meets;
//   close     the group meets, then rank 0 leaves the job.
// Only local rank 0 is a ps-lite node, so DMLC_NUM_WORKER counts nodes and
// DMLC_WORKER_ID, when set, is the node's rank (MXNet's convention: one
// worker per machine; `dtrain run --ps-servers S --ps-worker-per node` sets
// them so, and a process count fails at once: Note [Workers per node or
// per process]). The servers run dist_sync over the node sums, so the
// result equals dist_sync with one worker per process. rank() is the
// process's rank, node_rank · local_size + local_rank, and num_workers() is
// nodes · local_size, so data sharding works as with DDP; every node must
// run the same number of processes. Every call is collective over the
// group, so every process checks its arguments the same way (keys and sizes
// are known to all) before the first collective: an error is thrown by
// every process, none is left waiting in a collective. The *_async calls
// complete before they return (the broadcast needs the pulled values).
// Local rank 0 alone connects, so a failure of the job reaches the others
// through the group (its collectives time out or see the peer gone).
#include "ps/device_sync/device_sync.h"

#include <cstring>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "ps/job/run_role.h"

namespace dtrain::ps {
namespace {

size_t bytes_of(KVDType t) { return t == KVDType::kFloat16 ? 2 : 4; }

class DeviceSyncKVStore : public KVStore {
 public:
  DeviceSyncKVStore(const JobConfig& config, std::shared_ptr<KVLocalGroup> group, Millis timeout)
      : group_(std::move(group)), timeout_(timeout) {
    if (group_->rank() == 0) node_ = connect_worker(config, true, timeout);
    std::vector<float> shape{0, 0};
    if (node_)
      shape = {static_cast<float>(node_->rank()), static_cast<float>(node_->num_workers())};
    group_->broadcast(Values(shape), 0);
    node_rank_ = static_cast<int>(shape[0]);
    num_nodes_ = static_cast<int>(shape[1]);
  }

  ~DeviceSyncKVStore() override {
    if (std::uncaught_exceptions() > 0 && !closed_) return;  // node_ leaves on its own
    try {
      close();
    } catch (const std::exception&) {  // node_'s destructor logs its own failures
    }
  }

  std::string type() const override { return kvstore_type_name(KVStoreType::kDistDeviceSync); }
  int rank() const override { return node_rank_ * group_->size() + group_->rank(); }
  int num_workers() const override { return num_nodes_ * group_->size(); }
  Millis timeout() const override { return timeout_; }

  void init(int key, ConstValues value) override {
    check_open();
    if (sizes_.count(key)) throw InvalidArgument(cat("key ", key, " is already initialised"));
    if (key < 0) throw InvalidArgument(cat("kvstore key ", key, " is negative"));
    sizes_[key] = value.count;
    if (node_) node_->init(key, value);
  }

  KVHandle push_async(int key, ConstValues grad) override {
    need(key, grad.count, "push");
    std::vector<char> sum = reduce(grad);
    if (node_) node_->push(key, as_const(sum, grad));
    return KVHandle();
  }

  KVHandle pull_async(int key, Values out) override {
    need(key, out.count, "pull");
    if (node_) node_->pull(key, out);
    group_->broadcast(out, 0);
    return KVHandle();
  }

  KVHandle pushpull_async(int key, ConstValues grad, Values out) override {
    need(key, grad.count, "pushpull");
    if (grad.count != out.count || grad.dtype != out.dtype) {
      throw InvalidArgument(cat("pushpull of key ", key,
                                ": the gradient and the output differ in "
                                "size or dtype"));
    }
    std::vector<char> sum = reduce(grad);
    if (node_) node_->pushpull(key, as_const(sum, grad), out);
    group_->broadcast(out, 0);
    return KVHandle();
  }

  void broadcast(int key, ConstValues value, Values out) override {
    init(key, value);
    pull(key, out);
  }

  void barrier() override {
    check_open();
    if (node_) node_->barrier();
    meet();
  }

  void set_optimizer(const OptimizerSpec& spec) override {
    check_open();
    if (node_) node_->set_optimizer(spec);
  }

  // Not collective: the node's worker alone reaches the servers.
  uint64_t pull_optimizer_state(int key, Values momentum) override {
    need(key, momentum.count, "pull_optimizer_state");
    return worker("pull_optimizer_state", key).pull_optimizer_state(key, momentum);
  }
  void push_optimizer_state(int key, ConstValues momentum, uint64_t updates) override {
    need(key, momentum.count, "push_optimizer_state");
    worker("push_optimizer_state", key).push_optimizer_state(key, momentum, updates);
  }

  void set_gradient_compression(const GradientCompression& spec) override {
    check_open();
    if (!sizes_.empty()) {
      throw InvalidArgument("set gradient compression before the first init");
    }
    if (node_) node_->set_gradient_compression(spec);  // compresses the node's sum
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    meet();
    if (node_) node_->close();
  }

 private:
  void check_open() const {
    if (closed_) throw InvalidArgument("the kvstore is closed");
  }
  void need(int key, size_t count, const char* op) const {
    check_open();
    auto it = sizes_.find(key);
    if (it == sizes_.end()) {
      throw InvalidArgument(
          cat(op, " of key ", key, " before init(", key, ", ...): call init first"));
    }
    if (it->second != count) {
      throw InvalidArgument(cat(op, " of key ", key, " with ", count,
                                " values; it was initialised with ", it->second));
    }
  }
  KVStore& worker(const char* op, int key) const {
    if (!node_) {
      throw InvalidArgument(cat(op, " of key ", key, ": dist_device_sync's local rank ",
                                group_->rank(),
                                " is not a worker of the job; call it on local rank 0"));
    }
    return *node_;
  }
  // The group's sum of `grad`, in a copy (the caller's gradient is const).
  std::vector<char> reduce(ConstValues grad) {
    std::vector<char> sum(grad.count * bytes_of(grad.dtype));
    if (!sum.empty()) std::memcpy(sum.data(), grad.data, sum.size());
    Values v;
    v.data = sum.data();
    v.count = grad.count;
    v.dtype = grad.dtype;
    group_->all_reduce_sum(v);
    return sum;
  }
  static ConstValues as_const(const std::vector<char>& bytes, ConstValues like) {
    like.data = bytes.data();
    return like;
  }
  // Every process of the node has arrived (a one-value all-reduce).
  void meet() {
    float one = 1;
    group_->all_reduce_sum(Values(&one, 1));
  }

  std::shared_ptr<KVLocalGroup> group_;
  Millis timeout_;
  std::unique_ptr<KVStore> node_;  // local rank 0 only: the node's dist_sync worker
  int node_rank_ = 0;
  int num_nodes_ = 1;
  bool closed_ = false;
  std::map<int, size_t> sizes_;  // key -> count, known to every process
};

std::optional<long long> int_variable(const EnvLookup& env, const char* name) {
  const std::optional<std::string> text = env(name);
  long long v = 0;
  if (!text || !parse_int(*text, &v)) return std::nullopt;
  return v;
}

}  // namespace

// Note [Workers per node or per process]
// dist_sync and dist_async have one ps-lite worker per process, so
// DMLC_NUM_WORKER is the number of processes; dist_device_sync has one per
// node (Note [Device sync]), so it is the number of nodes. A wrong count
// does not fail by itself: the scheduler waits for workers that never
// register (or for fewer than register) until a timeout. A worker started
// by torchrun or `dtrain run` can tell the two apart exactly when a node
// runs more than one process (LOCAL_WORLD_SIZE > 1): every node runs the
// same number of processes, so the node count is WORLD_SIZE /
// LOCAL_WORLD_SIZE, less than WORLD_SIZE. So DMLC_NUM_WORKER == WORLD_SIZE
// is a process count, wrong for dist_device_sync, and DMLC_NUM_WORKER <
// WORLD_SIZE leaves processes out, wrong for dist_sync/dist_async (which
// may legitimately count more: several torchrun jobs joining one ps job).
// Other counts are left to the scheduler (e.g. one torchrun job per
// machine, each of WORLD_SIZE = LOCAL_WORLD_SIZE, joining one
// dist_device_sync job). `dtrain run --ps-servers` counts processes unless
// told --ps-worker-per node: it starts the scheduler before the program
// chooses its store, so it cannot know; this check makes the wrong choice
// an immediate error instead of a wait.
void check_worker_count(KVStoreType type, const EnvLookup& env) {
  const auto num_worker = int_variable(env, "DMLC_NUM_WORKER");
  const auto world = int_variable(env, "WORLD_SIZE");
  const auto local = int_variable(env, "LOCAL_WORLD_SIZE");
  if (!num_worker || !world || !local || *local <= 1) return;
  if (type == KVStoreType::kDistDeviceSync && *num_worker == *world) {
    throw InvalidArgument(
        cat("dist_device_sync has one ps worker per node, but DMLC_NUM_WORKER=", *num_worker,
            " counts processes (WORLD_SIZE=", *world, ", LOCAL_WORLD_SIZE=", *local,
            "): start the job with `dtrain run --ps-servers S --ps-worker-per node`, or set "
            "DMLC_NUM_WORKER to the number of nodes (",
            *world / *local, ") and DMLC_WORKER_ID to the node's rank"));
  }
  if (type != KVStoreType::kDistDeviceSync && *num_worker < *world) {
    throw InvalidArgument(cat(kvstore_type_name(type),
                              " has one ps worker per process, but DMLC_NUM_WORKER=", *num_worker,
                              " is less than WORLD_SIZE=", *world,
                              " (it counts nodes, as for dist_device_sync): drop "
                              "`--ps-worker-per node` from dtrain run, or set DMLC_NUM_WORKER "
                              "to the number of processes and DMLC_WORKER_ID to RANK"));
  }
}

std::unique_ptr<KVStore> make_device_sync_store(const JobConfig& config,
                                                std::shared_ptr<KVLocalGroup> group,
                                                Millis timeout) {
  if (!group) {
    throw InvalidArgument(
        "dist_device_sync needs the node's processes: set KVStoreOptions::local_group to "
        "dtrain::kv_local_group(pg), or create the store with dtrain::create_kvstore "
        "(dtrain/kvstore_torch.h), which forms it from LOCAL_RANK and LOCAL_WORLD_SIZE");
  }
  return std::make_unique<DeviceSyncKVStore>(config, std::move(group), timeout);
}

}  // namespace dtrain::ps
