// Parameter-server training: DDP's comm hook through a kvstore
// (dtrain/kvstore_ddp.h) and the Trainer's side of it (kv_sync.h).
//
// Note [Gradients through a kvstore]
// DDP's reducer already does what MXNet's and BytePS's workers do during
// backward: it collects gradients in buckets as they become ready and hands
// each full bucket, in the same order on every worker, to a comm hook.
// Parameter-server training is therefore a comm hook: the bucket (this
// worker's gradients divided by the world size) is pushed to the bucket's
// key at once and the pull is waited on in the reducer's final callback,
// before loss.backward() returns. Everything else of DDP carries over:
// overlap with backward, no_sync() for accumulation, unused parameters, the
// bucket-order rebuild, the statistics. The workers' c10d group still
// carries DDP's start-up broadcast, its bucket order and buffers, and the
// evaluation sums; every gradient goes through the servers.
//
// Note [Where the optimizer runs]
// Both variants of the kvstore are offered (TrainOptions::kvstore_optimizer):
//   worker  the servers only sum the W pushes (no set_optimizer): the pull
//           is the averaged gradient and the trainer's own optimizer steps
//           on every worker, as under DDP (BytePS's split). Every optimizer,
//           schedule, clipping and AMP mode works and the weights equal
//           DDP's: the servers add the same W addends an allreduce adds.
//           The default for dist_sync, dist_device_sync and local.
//   server  MXNet's update_on_kvstore: the servers run SGD (OptimizerSpec)
//           on the summed gradient and the pull returns the new weights,
//           copied into the model in place of the optimizer step. SGD only
//           (PyTorch's momentum and L2 weight decay are MXNet's update at a
//           constant rate), constant learning rate, no clipping, no fp16
//           loss scaling; the momentum lives on the servers, and rank 0
//           pulls it into each checkpoint (Note [Keys and resume]). The
//           only choice for dist_async, whose servers apply each worker's
//           push as it arrives (rescale_grad = W undoes DDP's division).
//
// Note [Keys and resume]
// With the optimizer on the servers, the parameters' keys are initialised
// when the hook is made, in Trainer::wrap(): after resume() restored the
// model on every worker, and KVStore::init stores rank 0's value, so the
// servers start from the restored weights. Their momentum and update counts
// are in the checkpoint ("server_optimizer"): rank 0 pulls them when it
// writes one (KVStore::pull_optimizer_state, between steps: no push is in
// flight, and under dist_sync no round can complete before rank 0's next
// push, so they belong to the checkpoint's weights; under dist_async they are
// the servers' at that moment, as the weights are rank 0's last pull). On
// resume rank 0 pushes them back right after the keys' init and every worker
// meets in a barrier before the first step, so no push reaches a server
// before its momentum is restored and the resumed run continues exactly. A
// checkpoint without them (written before they were kept, or by a run with
// the optimizer on the workers) restarts the momentum from zero, with a line
// in the log. With the optimizer on the workers, the servers
// hold no state between rounds; the bucket keys are initialised (with zeros)
// when the bucket first reaches the hook. A resumed run is a new job (new
// scheduler and servers) and initialises its keys afresh.

#include "train/kv_sync.h"

#include <vector>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/kvstore_torch.h"

namespace dtrain {
namespace {

at::ScalarType staging_dtype(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf ? at::kHalf : at::kFloat;
}

class KVPending : public PendingReduction {
 public:
  KVPending(std::vector<KVHandle> handles, std::chrono::milliseconds timeout, at::Tensor received,
            at::Tensor bucket, at::Tensor sent)
      : handles_(std::move(handles)),
        timeout_(timeout),
        received_(std::move(received)),
        bucket_(std::move(bucket)),
        sent_(std::move(sent)) {}
  void wait() override {
    for (const KVHandle& h : handles_) h.wait(timeout_);
    if (bucket_.defined()) bucket_.copy_(received_);
  }

 private:
  std::vector<KVHandle> handles_;
  std::chrono::milliseconds timeout_;
  at::Tensor received_;
  at::Tensor bucket_;  // kOnWorkers: where the averaged gradients go
  at::Tensor sent_;    // what the pushes read, alive until they are done
};

}  // namespace

KVStoreCommHook::KVStoreCommHook(std::shared_ptr<KVStore> kv, KVUpdate update,
                                 torch::nn::Module& module)
    : kv_(std::move(kv)), update_(update) {
  if (!kv_) throw InvalidArgument("kvstore_comm_hook: the kvstore is null");
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    params_[item.key()] = item.value();
  }
  if (update_ != KVUpdate::kOnServers) return;
  // Note [Keys and resume]: one key per parameter, in name order (the same
  // on every worker), holding rank 0's current weights.
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : params_) {
    ParamKey k;
    k.id = next_key_++;
    k.receive = p.detach().to(at::kCPU, at::kFloat).contiguous().reshape({-1}).clone();
    kv_->init(k.id, kv_values(k.receive));
    param_keys_[name] = std::move(k);
  }
}

std::string KVStoreCommHook::name() const { return "kvstore " + kv_->type(); }

KVStoreCommHook::Key& KVStoreCommHook::key_for(const GradBucket& bucket) {
  auto it = keys_.find(bucket.index);
  if (it != keys_.end() && it->second.names == bucket.parameter_names &&
      it->second.receive.numel() == bucket.buffer.numel()) {
    return it->second;
  }
  // A new bucket (or one DDP rebuilt): a new key, the same on every worker
  // because every worker builds the same buckets and launches them in order.
  // The servers only sum, so a new key loses nothing.
  Key k;
  k.id = next_key_++;
  k.names = bucket.parameter_names;
  const auto cpu = at::TensorOptions().dtype(staging_dtype(bucket.buffer));
  k.send = at::empty({bucket.buffer.numel()}, cpu);
  k.receive = at::zeros({bucket.buffer.numel()}, cpu);
  kv_->init(k.id, kv_values(k.receive));
  return keys_[bucket.index] = std::move(k);
}

std::unique_ptr<PendingReduction> KVStoreCommHook::start(const ProcessGroup& /*pg*/,
                                                         GradBucket& bucket) {
  // No lock: the reducer never runs start() concurrently with itself, and
  // apply_pulled_weights() runs after backward returned (kvstore_ddp.h).
  at::Tensor grads = bucket.buffer.reshape({-1});
  std::vector<KVHandle> handles;
  if (update_ == KVUpdate::kOnServers) {
    // The servers keep per-key momentum, so keys must not change when DDP
    // rebuilds its buckets: the bucket is pushed parameter by parameter.
    if (!grads.is_cpu() || grads.scalar_type() != at::kFloat) {
      grads = grads.to(at::kCPU, at::kFloat);
    }
    int64_t offset = 0;
    for (const std::string& n : bucket.parameter_names) {
      auto it = param_keys_.find(n);
      if (it == param_keys_.end()) {
        throw InvalidArgument(cat("kvstore_comm_hook: bucket ", bucket.index, " has parameter '", n,
                                  "', which the module does not"));
      }
      ParamKey& k = it->second;
      const int64_t count = k.receive.numel();
      handles.push_back(kv_->pushpull_async(k.id, kv_values(grads.narrow(0, offset, count)),
                                            kv_output(k.receive)));
      k.pulled = true;
      offset += count;
    }
    return std::make_unique<KVPending>(std::move(handles), kv_->timeout(), at::Tensor(),
                                       at::Tensor(), grads);
  }
  Key& k = key_for(bucket);
  at::Tensor send = grads;
  if (!send.is_cpu() || send.scalar_type() != k.send.scalar_type()) {
    k.send.copy_(send);
    send = k.send;
  }
  handles.push_back(kv_->pushpull_async(k.id, kv_values(send), kv_output(k.receive)));
  return std::make_unique<KVPending>(std::move(handles), kv_->timeout(), k.receive, grads, send);
}

bool KVStoreCommHook::apply_pulled_weights() {
  if (update_ != KVUpdate::kOnServers) return false;
  torch::NoGradGuard no_grad;
  bool any = false;
  for (auto& [name, k] : param_keys_) {
    if (!k.pulled) continue;
    at::Tensor& p = params_.at(name);
    p.copy_(k.receive.view(p.sizes()));
    k.pulled = false;
    any = true;
  }
  return any;
}

ServerOptimizerState KVStoreCommHook::pull_server_state() {
  if (update_ != KVUpdate::kOnServers) {
    throw InvalidArgument("pull_server_state: the optimizer runs on the workers (kOnWorkers)");
  }
  ServerOptimizerState state;
  for (const auto& [name, k] : param_keys_) {  // name order, as the keys
    at::Tensor momentum = at::empty_like(k.receive);
    state.updates[name] =
        static_cast<int64_t>(kv_->pull_optimizer_state(k.id, kv_output(momentum)));
    state.momentum.emplace_back(name, momentum.view(params_.at(name).sizes()));
  }
  return state;
}

void KVStoreCommHook::push_server_state(const ServerOptimizerState& state,
                                        const std::string& origin) {
  if (update_ != KVUpdate::kOnServers) {
    throw InvalidArgument("push_server_state: the optimizer runs on the workers (kOnWorkers)");
  }
  // Checked before anything is pushed, so a mismatch leaves the servers as they were.
  std::map<std::string, at::Tensor> momentum(state.momentum.begin(), state.momentum.end());
  for (const auto& [name, k] : param_keys_) {
    auto it = momentum.find(name);
    if (it == momentum.end() || !state.updates.count(name)) {
      throw DataError(cat(origin, ": the servers' optimizer state has no entry for parameter '",
                          name, "' (a different TrainOptions::model?)"));
    }
    if (!it->second.defined() || it->second.sizes() != params_.at(name).sizes()) {
      throw DataError(cat(origin, ": the servers' momentum of '", name, "' is ",
                          it->second.defined() ? cat(it->second.sizes()) : "undefined",
                          " but the parameter is ", cat(params_.at(name).sizes())));
    }
  }
  if (momentum.size() != param_keys_.size()) {
    for (const auto& [name, t] : momentum) {
      if (!param_keys_.count(name)) {
        throw DataError(cat(origin, ": the servers' optimizer state has parameter '", name,
                            "', which this model lacks (a different TrainOptions::model?)"));
      }
    }
  }
  for (const auto& [name, k] : param_keys_) {
    const at::Tensor m = momentum.at(name).to(at::kCPU, at::kFloat).contiguous().reshape({-1});
    kv_->push_optimizer_state(k.id, kv_values(m), static_cast<uint64_t>(state.updates.at(name)));
  }
}

std::shared_ptr<KVStoreCommHook> kvstore_comm_hook(std::shared_ptr<KVStore> kv, KVUpdate update,
                                                   torch::nn::Module& module) {
  return std::make_shared<KVStoreCommHook>(std::move(kv), update, module);
}

namespace detail {

void validate_kvstore(const TrainOptions& o) {
  if (!o.kvstore) return;
  const char* t = kvstore_type_name(*o.kvstore);
  if (o.ddp.comm_hook && o.ddp.comm_hook->name() != allreduce_hook()->name()) {
    throw InvalidArgument(cat("TrainOptions::ddp.comm_hook ", o.ddp.comm_hook->name(),
                              " cannot be combined with TrainOptions::kvstore: the kvstore's push "
                              "and pull are the comm hook; drop one of them"));
  }
  if (*o.kvstore == KVStoreType::kDistAsync && o.kvstore_optimizer == KVStoreOptimizer::kWorker) {
    throw InvalidArgument(
        "TrainOptions::kvstore dist_async applies each push on the servers: it needs "
        "TrainOptions::kvstore_optimizer server (or auto)");
  }
  if (kvstore_update(o) != KVUpdate::kOnServers) return;
  const std::string why = cat(" (TrainOptions::kvstore ", t,
                              " with the optimizer on the servers runs MXNet's SGD at a "
                              "constant rate; use TrainOptions::kvstore_optimizer worker");
  const OptimizerOptions& opt = o.optimizer;
  if (opt.type != OptimizerType::kSgd) {
    throw InvalidArgument(
        cat("OptimizerOptions::type ", to_string(opt.type), " is not sgd", why, ")"));
  }
  if (opt.nesterov)
    throw InvalidArgument(cat("OptimizerOptions::nesterov is not supported", why, ")"));
  if (opt.norm_weight_decay || opt.bias_weight_decay) {
    throw InvalidArgument(
        cat("OptimizerOptions::norm_weight_decay and OptimizerOptions::bias_weight_decay are not "
            "supported",
            why, ")"));
  }
  if (o.lr_schedule != LrScheduleKind::kConstant || o.lr_warmup_epochs > 0 ||
      o.lr_warmup_steps > 0) {
    throw InvalidArgument(cat("TrainOptions::lr_schedule ", to_string(o.lr_schedule),
                              " and a warm-up (TrainOptions::lr_warmup_epochs or "
                              "TrainOptions::lr_warmup_steps) are not supported",
                              why, ")"));
  }
  if (o.clip_grad_norm > 0)
    throw InvalidArgument(cat("TrainOptions::clip_grad_norm is not supported", why, ")"));
  if (o.amp == AmpMode::kFp16)
    throw InvalidArgument(cat("TrainOptions::amp fp16 is not supported", why, ")"));
}

KVUpdate kvstore_update(const TrainOptions& o) {
  switch (o.kvstore_optimizer) {
    case KVStoreOptimizer::kServer:
      return KVUpdate::kOnServers;
    case KVStoreOptimizer::kWorker:
      return KVUpdate::kOnWorkers;
    case KVStoreOptimizer::kAuto:
      break;
  }
  return o.kvstore == KVStoreType::kDistAsync ? KVUpdate::kOnServers : KVUpdate::kOnWorkers;
}

std::unique_ptr<KvSync> KvSync::open(const TrainOptions& o, std::shared_ptr<KVStore> kv,
                                     const ProcessGroup& pg, torch::nn::Module& model, double lr) {
  if (!o.kvstore) {
    if (kv) {
      throw InvalidArgument(cat("a ", kv->type(),
                                " kvstore was passed to train() but TrainOptions::kvstore is "
                                "not set; set it to the store's type"));
    }
    return nullptr;
  }
  const char* type = kvstore_type_name(*o.kvstore);
  if (!kv) {
    throw InvalidArgument(cat("TrainOptions::kvstore is ", type,
                              " but no store was passed: open one with create_kvstore "
                              "(dtrain/kvstore_torch.h) and pass it, or call train(options, pg, "
                              "log), which opens it"));
  }
  if (kv->type() != type) {
    throw InvalidArgument(cat("the kvstore passed is a ", kv->type(),
                              " store but TrainOptions::kvstore is ", type,
                              "; pass one of the same type"));
  }
  // dist_device_sync's workers are per node (docs/ps.md); the others are pg's ranks.
  if (*o.kvstore != KVStoreType::kDistDeviceSync &&
      (kv->num_workers() != pg.size() || kv->rank() != pg.rank())) {
    throw InvalidArgument(cat(
        "rank ", pg.rank(), ": TrainOptions::kvstore ", type, " has worker ", kv->rank(), " of ",
        kv->num_workers(), " (DMLC_WORKER_ID, DMLC_NUM_WORKER) but the process group rank ",
        pg.rank(), " of ", pg.size(),
        " (RANK, WORLD_SIZE); they must agree: start the job with `dtrain run --ps-servers S`, "
        "which sets both, or with DMLC_* alone (an MXJob)"));
  }
  auto sync = std::unique_ptr<KvSync>(new KvSync());
  const KVUpdate update = kvstore_update(o);
  if (update == KVUpdate::kOnServers) {
    OptimizerSpec spec;
    spec.learning_rate = lr;
    spec.momentum = o.optimizer.momentum;
    spec.weight_decay = o.optimizer.weight_decay;
    // DDP divided each push by W: a sync round sums W of them; an async
    // server applies each one alone (Note [Where the optimizer runs]).
    spec.rescale_grad = *o.kvstore == KVStoreType::kDistAsync ? kv->num_workers() : 1.0;
    kv->set_optimizer(spec);
  }
  sync->hook_ = kvstore_comm_hook(std::move(kv), update, model);
  return sync;
}

std::optional<ServerOptimizerState> KvSync::save_state() {
  if (!updates_on_servers()) return std::nullopt;
  return hook_->pull_server_state();
}

void KvSync::restore_state(const std::optional<ServerOptimizerState>& state,
                           const std::string& origin, bool leader, std::ostream* log) {
  if (!updates_on_servers()) return;
  if (!state) {
    if (log) {
      *log << origin << " holds no servers' optimizer state (written by a run with the optimizer "
           << "on the workers, or before it was kept): the servers' momentum restarts from zero"
           << std::endl;
    }
    return;
  }
  // Note [Keys and resume]: rank 0 pushes; nobody steps before it is done.
  if (leader) hook_->push_server_state(*state, origin);
  hook_->store().barrier();
}

std::string KvSync::describe() const {
  KVStore& kv = hook_->store();
  return cat("kvstore ", kv.type(), " (", kv.num_workers(), " worker(s)), optimizer on the ",
             updates_on_servers() ? "servers" : "workers");
}

}  // namespace detail

bool optimizer_on_servers(const TrainOptions& options) {
  return options.kvstore && detail::kvstore_update(options) == KVUpdate::kOnServers;
}
}  // namespace dtrain
