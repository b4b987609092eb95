#pragma once
// Horovod-style data parallelism, for users who prefer it to the DDP wrapper:
// gradients are averaged in one fused pass just before the optimizer step.
//
/// Example:
/// ```
/// void horovod_style(torch::nn::Module& model) {
///   auto pg = dtrain::init_process_group();
///   torch::optim::SGD sgd(model.parameters(), 0.01);
///   dtrain::broadcast_parameters(model, pg);  // from dtrain/ddp.h
///   dtrain::broadcast_optimizer_state(sgd, pg);
///   dtrain::DistributedOptimizer opt(sgd, pg);
///   // ... forward, loss.backward() ...
///   opt.step();  // averaged, then stepped
/// }
/// ```

#include <cstdint>
#include <memory>

#include <torch/optim/optimizer.h>

#include "dtrain/comm.h"
#include "dtrain/ddp.h"
#include "dtrain/options.h"

namespace dtrain {

struct FusionOptions {
  /// Gradients are packed into fused buffers of at most this many bytes
  /// (Horovod's HOROVOD_FUSION_THRESHOLD, 128 MiB); one tensor larger than
  /// the threshold gets a buffer of its own.
  int64_t threshold_bytes = int64_t{128} << 20;
  /// How each fused buffer is reduced (null: plain allreduce); the same
  /// hooks as DDP's, e.g. fp16_compress_hook().
  std::shared_ptr<CommHook> compression;

  DTRAIN_SETTER(FusionOptions, threshold_bytes)
  DTRAIN_SETTER(FusionOptions, compression)
};

/// Wraps an optimizer (not owned; it must outlive this object). step()
/// averages every parameter's gradient across ranks, then steps. A parameter
/// without a gradient on this rank contributes zeros (its gradient becomes
/// defined), so every rank issues the same collectives. Not thread-safe.
///
/// Preconditions: every rank wraps an optimizer over the same parameters
/// (same shapes, same order), the parameters start equal on every rank
/// (broadcast_parameters), and every rank calls step() for the same steps.
class DistributedOptimizer {
 public:
  DistributedOptimizer(torch::optim::Optimizer& optimizer, ProcessGroup pg,
                       FusionOptions options = {});

  /// Averages gradients (synchronize()) and runs the wrapped optimizer's step.
  void step();
  /// Averages gradients across ranks without stepping.
  void synchronize();
  void zero_grad() { optimizer_.zero_grad(); }
  torch::optim::Optimizer& optimizer() { return optimizer_; }

 private:
  torch::optim::Optimizer& optimizer_;
  ProcessGroup pg_;
  FusionOptions options_;
  std::shared_ptr<CommHook> hook_;
};

/// Makes every rank's optimizer state (e.g. momentum buffers, step counts)
/// equal to `root`'s by serialising it there and loading it everywhere else.
/// The optimizers must have the same parameter groups. Collective.
void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, const ProcessGroup& pg,
                               int root = 0);

}  // namespace dtrain
