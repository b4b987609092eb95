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
//     with synchronised gradients and the optimizer step needs no change.
//
// Usage:
//   auto pg = dtrain::init_process_group();
//   auto model = std::make_shared<Net>();
//   dtrain::DistributedDataParallel ddp(model, pg);
//   torch::optim::SGD opt(model->parameters(), 0.01);
//   for (auto& batch : loader) {
//     opt.zero_grad();
//     auto loss = torch::nll_loss(ddp.forward(batch.data), batch.target);
//     loss.backward();        // gradients averaged across ranks on return
//     opt.step();
//   }
//
// Thread safety: one DataParallel is driven from one thread (the training
// loop); autograd's hooks may run on autograd's threads and synchronise
// internally.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "dtrain/comm.h"

namespace dtrain {

/// One bucket as a communication hook sees it.
struct GradBucket {
  /// Position in launch order (0 is launched first: the last layers).
  int index = 0;
  /// Flat gradients of this rank, already divided by the world size. The
  /// hook leaves the cross-rank sum of these in the same tensor.
  at::Tensor buffer;
  /// Names of the parameters in the bucket, in bucket order.
  std::vector<std::string> parameter_names;
};

/// A reduction in flight, returned by a CommHook.
class PendingReduction {
 public:
  virtual ~PendingReduction() = default;
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

/// Decides how a bucket is communicated (PyTorch's comm hooks): plain
/// allreduce, compressed allreduce, or a user's own scheme.
class CommHook {
 public:
  virtual ~CommHook() = default;
  /// Starts reducing `bucket` over `pg`; must issue the same collectives in
  /// the same order on every rank. `bucket` outlives the returned reduction.
  virtual std::unique_ptr<PendingReduction> start(const ProcessGroup& pg, GradBucket& bucket) = 0;
  virtual std::string name() const = 0;
};

/// Plain allreduce of the bucket (the default).
std::shared_ptr<CommHook> allreduce_hook();
/// Casts the bucket to float16 for the allreduce and back: half the bytes on
/// the wire, gradients rounded to fp16 precision.
std::shared_ptr<CommHook> fp16_compress_hook();
/// The same with bfloat16 (fp32's range, 8 bits of mantissa).
std::shared_ptr<CommHook> bf16_compress_hook();
/// Hook by name: "none"/"allreduce", "fp16", "bf16". Throws InvalidArgument.
std::shared_ptr<CommHook> comm_hook_by_name(const std::string& name);

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
  /// Parameters that got no gradient in a backward pass are treated as ready
  /// with a zero gradient; parameters unused on every rank keep their
  /// gradient untouched. Off: such a pass is an error naming them.
  bool find_unused_parameters = false;
  /// `param.grad()` aliases the bucket memory: no copy back after the
  /// reduction, less memory.
  bool gradient_as_bucket_view = false;
  /// How buckets are reduced; null means allreduce_hook().
  std::shared_ptr<CommHook> comm_hook;
  /// Called at the end of every synchronised backward pass, on the thread
  /// that ran backward, once per bucket in launch order, while the reducer's
  /// lock is held: it must not call into the DataParallel. Empty: nothing is
  /// called (the default).
  std::function<void(const BucketTiming&)> bucket_observer;
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

  /// Call before the module's forward: broadcasts buffers, checks that the
  /// previous iteration's reduction finished (throws DistError naming the
  /// parameters that never got a gradient otherwise).
  void prepare_forward();
  /// Call after the module's forward.
  void finish_forward();

  /// RAII scope in which backward passes accumulate gradients locally without
  /// communication (gradient accumulation); the first backward after the
  /// scope reduces the accumulated sum.
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

/// The typed wrapper: `ddp.forward(args...)` runs the module's own forward
/// between prepare_forward() and finish_forward().
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
    finish_forward();
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

}  // namespace dtrain
