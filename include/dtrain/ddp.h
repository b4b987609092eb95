#pragma once
// DistributedDataParallel for any torch::nn::Module.
//
// Gradients are reduced in buckets while backward is still running, as in
// PyTorch's DDP (see docs/architecture.md, "DDP reducer"):
//   * at construction every rank checks that all ranks have the same parameter
//     names and shapes, and parameters and buffers are broadcast from rank 0;
//   * parameters are grouped into buckets in reverse registration order (the
//     last layers' gradients are ready first): a 1 MiB first bucket, then
//     buckets of `bucket_cap_mb`, never mixing dtypes or devices;
//   * a hook on each parameter's gradient accumulator copies the gradient,
//     scaled by 1/world_size, into its bucket; a full bucket's allreduce starts
//     at once, asynchronously, in the same bucket order on every rank;
//   * when autograd finishes, every bucket is waited on and the averaged
//     gradients are written back to `param.grad()` (or `grad` already is a view
//     of the bucket with gradient_as_bucket_view), so loss.backward() returns
//     with synchronised gradients and the optimizer step needs no change;
//   * only the backward of a forward through the wrapper is synchronised, once:
//     a backward through the bare module communicates nothing;
//   * after the first iteration the buckets are rebuilt once in the order the
//     gradients became ready (rank 0's order).
//
/// Example:
/// ```
/// struct NetImpl : torch::nn::Module {
///   NetImpl() : fc(register_module("fc", torch::nn::Linear(784, 10))) {}
///   torch::Tensor forward(torch::Tensor x) { return fc->forward(x.flatten(1)); }
///   torch::nn::Linear fc;
/// };
/// TORCH_MODULE(Net);
///
/// void train(dtrain::Loader& loader) {
///   auto pg = dtrain::init_process_group();
///   Net model;  // on its device before wrapping
///   dtrain::DistributedDataParallel<NetImpl> ddp(model.ptr(), pg,
///                                                dtrain::DdpOptions().set_bucket_cap_mb(25));
///   torch::optim::SGD opt(model->parameters(), 0.01);
///   for (dtrain::Batch& batch : loader) {
///     opt.zero_grad();
///     auto loss = torch::nn::functional::cross_entropy(ddp.forward(batch.inputs), batch.targets);
///     loss.backward();  // gradients averaged across ranks on return
///     opt.step();
///   }
/// }
/// ```
//
// Preconditions: the module is on its one device before wrapping (all
// parameters on the same device), and its parameters do not change
// (added, removed, replaced) afterwards.
//
// Thread safety: one DataParallel is driven from one thread (the training
// loop); autograd's hooks may run on autograd's threads and synchronise
// internally. A CommHook's start() runs on the thread running autograd's
// hooks (the backward's caller on CPU), never under DDP's internal lock.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "dtrain/comm.h"
#include "dtrain/options.h"

namespace dtrain {

/// One bucket as a communication hook sees it.
struct GradBucket {
  /// Position in launch order (0 is launched first: the last layers).
  int index = 0;
  /// Flat gradients of this rank, already divided by the world size
  /// (DdpOptions::gradient_divisor when set). The
  /// hook leaves the cross-rank sum of these in the same tensor.
  at::Tensor buffer;
  /// Names of the parameters in the bucket, in bucket order.
  std::vector<std::string> parameter_names;
  /// The parameters' gradients: views of `buffer` shaped like the
  /// parameters, in bucket order (PyTorch's GradBucket::gradients()).
  std::vector<at::Tensor> gradients;
  /// Number of buckets; the bucket of index bucket_count - 1 is launched last
  /// in a pass (PyTorch's GradBucket::is_last()).
  int bucket_count = 1;
  bool is_last() const { return index == bucket_count - 1; }
};

/// A reduction in flight, returned by a CommHook (make_pending_reduction()
/// builds one from a Work, make_staged_reduction() one of several stages).
/// The reducer calls wait() once, on the thread that finishes the backward
/// pass.
///
/// Multi-stage reductions (PowerSGD's P then Q allreduce): while
/// has_next_stage() is true the reducer calls launch_next_stage() at a fixed
/// point of its launch schedule, the same on every rank whatever finishes
/// first (Note [Staged reductions] in src/ddp/reducer.cpp): stage k of
/// bucket b is launched right after stage 0 of bucket b + k, and the stages
/// left when backward ends are launched then, in the same order. Both are
/// called on the reducer's launching thread (the one that calls start()),
/// never under its lock.
class PendingReduction {
 public:
  virtual ~PendingReduction() = default;
  /// True while a later stage remains to be launched. Must be the same on
  /// every rank (it decides the order of collectives).
  virtual bool has_next_stage() const { return false; }
  /// Launches the next stage: waits for what it needs of the previous one
  /// (bounded by the group's timeout), computes, and starts its collectives
  /// without waiting for them. Throws a DistError subclass on failure.
  virtual void launch_next_stage() {}
  /// Blocks until the reduction is complete (bounded by the group's timeout)
  /// and leaves the result in the bucket's buffer. Throws a DistError
  /// subclass on failure.
  virtual void wait() = 0;
  /// When the communication finished, if known (for statistics). The default
  /// reports nothing and the reducer uses the time wait() returned.
  virtual std::optional<std::chrono::steady_clock::time_point> completed_at() const {
    return std::nullopt;
  }
};

/// The reduction of a collective started with ProcessGroup's *_async calls
/// (dtrain/comm.h): wait() waits for `work` (bounded by the group's timeout),
/// then runs `finish` (e.g. to copy a compressed result into the bucket);
/// completed_at() is the work's.
std::unique_ptr<PendingReduction> make_pending_reduction(Work work,
                                                         std::function<void()> finish = {});

/// A reduction in several stages: `first` is in flight; each of `stages`
/// runs, when the reducer launches the next stage, after the previous
/// stage's Work completed (waited for here, bounded by the group's timeout)
/// and returns the Work it started; wait() waits for the last Work and runs
/// `finish`. completed_at() is the last Work's.
std::unique_ptr<PendingReduction> make_staged_reduction(Work first,
                                                        std::vector<std::function<Work()>> stages,
                                                        std::function<void()> finish = {});

/// Decides how a bucket is communicated (PyTorch's comm hooks): plain
/// allreduce, compressed allreduce, or a user's own scheme, written with the
/// public API alone (ProcessGroup's *_async calls and make_pending_reduction).
///
/// Threads: start() runs on the thread running autograd's gradient hooks
/// (the caller of backward() on CPU; an autograd device thread for CUDA),
/// never under the reducer's lock; the returned reduction's wait() runs on
/// the thread that finishes the backward pass. A hook shared by several
/// DataParallel instances must be thread-safe.
///
/// Preconditions: start() issues the same collectives in the same order on
/// every rank and leaves the cross-rank sum in `bucket.buffer` once wait()
/// returned; it does not block on communication (that is wait()'s job).
///
/// Example:
/// ```
/// class SumHook : public dtrain::CommHook {
///  public:
///   std::unique_ptr<dtrain::PendingReduction> start(const dtrain::ProcessGroup& pg,
///                                                   dtrain::GradBucket& bucket) override {
///     dtrain::Work work = pg.all_reduce_sum_async(bucket.buffer, "my bucket allreduce");
///     return dtrain::make_pending_reduction(std::move(work));
///   }
///   std::string name() const override { return "sum"; }
/// };
/// void use(std::shared_ptr<torch::nn::Module> model, dtrain::ProcessGroup pg) {
///   dtrain::DataParallel ddp(model, pg,
///                            dtrain::DdpOptions().set_comm_hook(std::make_shared<SumHook>()));
/// }
/// ```
class CommHook {
 public:
  virtual ~CommHook() = default;
  /// Starts reducing `bucket` over `pg`; must issue the same collectives in
  /// the same order on every rank. `bucket` outlives the returned reduction.
  virtual std::unique_ptr<PendingReduction> start(const ProcessGroup& pg, GradBucket& bucket) = 0;
  virtual std::string name() const = 0;
  /// This rank's state of the hook (e.g. PowerSGD's error feedback), CPU
  /// copies by name, for checkpoints; empty (the default) for a stateless
  /// hook. Call between iterations.
  virtual std::vector<std::pair<std::string, at::Tensor>> state() const { return {}; }
  /// Restores what state() returned on the same rank of a run with the same
  /// buckets. Throws InvalidArgument naming the entry when it does not fit.
  virtual void load_state(const std::vector<std::pair<std::string, at::Tensor>>& /*state*/) {}
};

/// Plain allreduce of the bucket (the default).
std::shared_ptr<CommHook> allreduce_hook();
/// Casts the bucket to float16 for the allreduce and back: half the bytes on
/// the wire, gradients rounded to fp16 precision.
std::shared_ptr<CommHook> fp16_compress_hook();
/// The same with bfloat16 (fp32's range, 8 bits of mantissa).
std::shared_ptr<CommHook> bf16_compress_hook();
/// No communication at all, for measurement only (PyTorch's
/// debugging_hooks.noop_hook): the bucket is left as the hook receives it, so
/// each rank keeps its own gradient divided by the world size (PyTorch's
/// keeps it undivided, as its hooks divide) and the replicas drift apart. A
/// DDP step with it costs what the step costs with no communication: the
/// reference for how much of that rate a real hook keeps (Note [The noop
/// hook] in src/ddp/comm_hooks.cpp). Never train with it.
std::shared_ptr<CommHook> noop_hook();
/// Hook by name: one of comm_hook_names() ("allreduce" is also "none";
/// "powersgd" with PowerSGDOptions' defaults, dtrain/powersgd.h; "noop" is
/// noop_hook(), for measurement only). Throws InvalidArgument naming the
/// value and listing the names. The one place hook names are spelled: the
/// CLI's --comm-hook takes these.
std::shared_ptr<CommHook> comm_hook_by_name(const std::string& name);
/// The names comm_hook_by_name() takes: "none", "fp16", "bf16", "powersgd",
/// "noop".
std::vector<std::string> comm_hook_names();

/// One bucket's reduction in one backward pass, as the reducer timed it (the
/// times DdpStats' communication figures are derived from). For observers
/// such as dtrain::timeline_bucket_observer (dtrain/timeline.h).
struct BucketTiming {
  int index = 0;      ///< launch order
  int64_t bytes = 0;  ///< the bucket's gradient bytes (DdpStats::bucket_bytes)
  std::chrono::steady_clock::time_point launched, completed;
};

struct DdpOptions {
  /// Bucket size after the first bucket, in MiB (PyTorch: 25).
  double bucket_cap_mb = 25.0;
  /// Size of the first bucket, in MiB (PyTorch: 1), so communication starts
  /// early in backward.
  double first_bucket_cap_mb = 1.0;
  /// Broadcast buffers (e.g. BatchNorm running statistics) from rank 0 before
  /// every forward.
  bool broadcast_buffers = true;
  /// At construction, check that every rank has the same parameters (names,
  /// shapes, dtypes) and broadcast rank 0's parameters and buffers (PyTorch's
  /// init_sync). Off: neither, for ranks that already hold identical values
  /// (live recovery's later generations, whose members committed the same
  /// steps; joiners get the state sent first), which saves a broadcast of the
  /// whole model over the network at every re-formation.
  bool init_sync = true;
  /// After each forward, the autograd graph is searched from the forward's
  /// outputs for parameters that will get no gradient; they count as ready
  /// (zero gradient) as soon as backward starts, so buckets still launch
  /// during backward. Parameters unused on every rank keep their gradient
  /// untouched. Off: a backward that leaves a parameter without a gradient is
  /// an error naming it. Costs a graph walk per forward; leave off when every
  /// parameter is used.
  bool find_unused_parameters = false;
  /// The set of used parameters is the same in every iteration (PyTorch's
  /// static_graph): the first iteration finds the unused ones (as
  /// find_unused_parameters does), later ones reuse that set without a graph
  /// walk or an extra allreduce, and buckets are rebuilt in gradient-ready
  /// order even with unused parameters. A parameter that starts being used
  /// later is an error.
  bool static_graph = false;
  /// `param.grad()` aliases the bucket memory: no copy back after the
  /// reduction, less memory.
  bool gradient_as_bucket_view = false;
  /// Gradients are divided by this before they are summed across ranks; 0
  /// (the default): by the group's size, so the result is the average.
  /// Live recovery (dtrain/live.h) sets W0, the logical world size, while
  /// fewer processes run W0 micro-batches between them (accumulated with
  /// no_sync), so the result is still the average over W0 micro-batches.
  /// Negative: InvalidArgument.
  int gradient_divisor = 0;
  /// How buckets are reduced; null means allreduce_hook().
  std::shared_ptr<CommHook> comm_hook;
  /// Called at the end of every synchronised backward pass, on the thread
  /// that ran backward, once per bucket in launch order, while the reducer's
  /// lock is held: it must not call into the DataParallel. Empty: nothing is
  /// called (the default).
  std::function<void(const BucketTiming&)> bucket_observer;

  DTRAIN_SETTER(DdpOptions, bucket_cap_mb)
  DTRAIN_SETTER(DdpOptions, first_bucket_cap_mb)
  DTRAIN_SETTER(DdpOptions, broadcast_buffers)
  DTRAIN_SETTER(DdpOptions, init_sync)
  DTRAIN_SETTER(DdpOptions, find_unused_parameters)
  DTRAIN_SETTER(DdpOptions, static_graph)
  DTRAIN_SETTER(DdpOptions, gradient_as_bucket_view)
  DTRAIN_SETTER(DdpOptions, gradient_divisor)
  DTRAIN_SETTER(DdpOptions, comm_hook)
  DTRAIN_SETTER(DdpOptions, bucket_observer)
};

/// What the reducer measured, like PyTorch DDP's logging data. Times are
/// averages over the synchronised iterations so far, in seconds.
struct DdpStats {
  int64_t iterations = 0;
  /// Time inside forward (including the buffer broadcast).
  double forward_seconds = 0;
  /// From the end of forward to the end of autograd's pass.
  double backward_compute_seconds = 0;
  /// From the first bucket's launch to the last bucket's completion.
  double comm_seconds = 0;
  /// Part of comm_seconds that ran while backward was still computing.
  double overlapped_comm_seconds = 0;
  /// Time backward's end waited for communication (comm not hidden).
  double exposed_comm_seconds = 0;
  /// Bytes and parameter count of each bucket, in launch order.
  std::vector<int64_t> bucket_bytes;
  std::vector<int64_t> bucket_parameters;
  std::string comm_hook;
  /// overlapped / comm (0 when nothing was communicated).
  double overlap_fraction() const {
    return comm_seconds > 0 ? overlapped_comm_seconds / comm_seconds : 0.0;
  }
};

namespace detail {
class Reducer;
}

/// The data-parallel engine around one module. Not copyable or movable
/// (autograd hooks refer to it). See DistributedDataParallel for the typed
/// wrapper most users want.
///
/// Preconditions: the module is on its one device before wrapping (every
/// parameter on the same device; InvalidArgument otherwise) and its
/// parameters are not added, removed or replaced afterwards; every rank
/// wraps the same architecture and runs the same number of synchronised
/// iterations. Threads: one training thread drives it; gradient hooks run
/// on autograd's threads; a CommHook's start() runs on the thread running
/// autograd's hooks, never under the reducer's lock (see CommHook).
class DataParallel {
 public:
  /// Checks parameter names and shapes across ranks (throws DistError naming
  /// the first mismatch and the ranks), broadcasts parameters and buffers from
  /// rank 0, builds the buckets and installs the gradient hooks. Collective:
  /// every rank must construct it.
  DataParallel(std::shared_ptr<torch::nn::Module> module, ProcessGroup pg, DdpOptions options = {});
  virtual ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  /// Call before the module's forward: refuses to run after a communication
  /// failure (throws DistError naming the first one), checks that the
  /// previous iteration's reduction finished (throws DistError naming the
  /// parameters that never got a gradient otherwise), rebuilds the buckets
  /// after the first iteration and broadcasts buffers. Collective.
  void prepare_forward();
  /// Call after the module's forward with the tensors it returned: arms the
  /// gradient reduction for the backward of this forward (when gradients are
  /// enabled and no NoSync scope is open) and, with find_unused_parameters,
  /// finds the parameters the outputs do not depend on. Without outputs the
  /// unused parameters are found when backward ends instead (no launch
  /// during backward for the buckets holding them), and a second backward
  /// through the outputs is not detected.
  void finish_forward(const std::vector<at::Tensor>& outputs = {});

  /// RAII scope: forwards run inside it are not synchronised, so their
  /// backward passes accumulate gradients locally (gradient accumulation), as
  /// with PyTorch's no_sync(); the backward of the first forward after the
  /// scope reduces the accumulated sum. It is the forward that must be in
  /// the scope.
  class NoSync {
   public:
    explicit NoSync(DataParallel* ddp);
    ~NoSync();
    NoSync(NoSync&& other) noexcept;
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    DataParallel* ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(this); }

  /// Runtime statistics (see DdpStats).
  DdpStats stats() const;
  const ProcessGroup& process_group() const { return pg_; }
  const DdpOptions& options() const { return options_; }
  /// Parameter names per bucket, in launch order.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  std::shared_ptr<torch::nn::Module> module_ptr() const { return module_; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  ProcessGroup pg_;
  DdpOptions options_;
  std::shared_ptr<detail::Reducer> reducer_;
};

namespace detail {
/// The tensors in a forward's result, for finish_forward(): a tensor, and
/// vectors, tuples, pairs and string-keyed maps of them, nested; other types
/// hold none that DDP can see.
inline void collect_tensors(const at::Tensor& t, std::vector<at::Tensor>& out);
template <typename T>
void collect_tensors(const std::vector<T>& v, std::vector<at::Tensor>& out);
template <typename A, typename B>
void collect_tensors(const std::pair<A, B>& p, std::vector<at::Tensor>& out);
template <typename... T>
void collect_tensors(const std::tuple<T...>& t, std::vector<at::Tensor>& out);
template <typename K, typename V>
void collect_tensors(const std::map<K, V>& m, std::vector<at::Tensor>& out);
template <typename T>
void collect_tensors(const T& /*other*/, std::vector<at::Tensor>& /*out*/) {}

inline void collect_tensors(const at::Tensor& t, std::vector<at::Tensor>& out) {
  if (t.defined()) out.push_back(t);
}
template <typename T>
void collect_tensors(const std::vector<T>& v, std::vector<at::Tensor>& out) {
  for (const auto& x : v) collect_tensors(x, out);
}
template <typename A, typename B>
void collect_tensors(const std::pair<A, B>& p, std::vector<at::Tensor>& out) {
  collect_tensors(p.first, out);
  collect_tensors(p.second, out);
}
template <typename... T>
void collect_tensors(const std::tuple<T...>& t, std::vector<at::Tensor>& out) {
  std::apply([&out](const auto&... x) { (collect_tensors(x, out), ...); }, t);
}
template <typename K, typename V>
void collect_tensors(const std::map<K, V>& m, std::vector<at::Tensor>& out) {
  for (const auto& [k, v] : m) collect_tensors(v, out);
}
}  // namespace detail

/// The typed wrapper: `ddp.forward(args...)` runs the module's own forward
/// between prepare_forward() and finish_forward(outputs). Preconditions and
/// threads as DataParallel's; the forward's tensors must be reachable
/// through its result (a tensor, or vectors, tuples, pairs and string-keyed
/// maps of them) for find_unused_parameters to see them.
template <typename ModuleType>
class DistributedDataParallel : public DataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<ModuleType> module, ProcessGroup pg,
                          DdpOptions options = {})
      : DataParallel(module, std::move(pg), std::move(options)), typed_(std::move(module)) {}

  template <typename... Args>
  auto forward(Args&&... args) {
    prepare_forward();
    auto out = typed_->forward(std::forward<Args>(args)...);
    std::vector<at::Tensor> tensors;
    detail::collect_tensors(out, tensors);
    finish_forward(tensors);
    return out;
  }
  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  ModuleType& module() { return *typed_; }
  const std::shared_ptr<ModuleType>& ptr() const { return typed_; }

 private:
  std::shared_ptr<ModuleType> typed_;
};

/// Broadcasts every parameter and buffer of `module` from `root` (Horovod's
/// broadcast_parameters). Collective.
void broadcast_parameters(torch::nn::Module& module, const ProcessGroup& pg, int root = 0);

/// Broadcasts `tensors` from `root` in place, coalesced into one flat buffer
/// per dtype and device (PyTorch's _broadcast_coalesced): one collective per
/// group, not one per tensor. Collective.
void broadcast_coalesced(const std::vector<at::Tensor>& tensors, const ProcessGroup& pg,
                         int root = 0);

}  // namespace dtrain
