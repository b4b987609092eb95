#pragma once
// PowerSGD gradient compression (Vogels et al., https://arxiv.org/abs/1905.13727)
// as a DDP comm hook: PyTorch's powerSGD_hook and PowerSGDState
// (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py) with the
// same options, defaults and results.
//
// Per bucket, after start_powersgd_iter iterations of plain allreduce:
//   1. error feedback: the bucket += this rank's error of the last step;
//   2. each gradient is viewed as a matrix M (rows = its first dimension);
//      with r = min(rows, cols, matrix_approximation_rank) it is compressed
//      when (rows + cols)·r·min_compression_rate < rows·cols, otherwise
//      (vectors, small layers) it is allreduced uncompressed with the others
//      in one collective;
//   3. P = M·Q (Q random the first time, or always without warm_start;
//      orthogonalized), allreduce the Ps (one collective per bucket);
//   4. orthogonalize P (Gram-Schmidt for r <= 2, else QR), Q = Mᵀ·P,
//      allreduce the Qs (the second stage, launched on the reducer's fixed
//      schedule: Note [Staged reductions] in src/ddp/reducer.cpp);
//   5. M ≈ P·Qᵀ; the error of this rank is what the compression lost.
// Same-shaped matrices can be batched (batch_tensors_with_same_shape).
//
// Equal to PyTorch's hook: given the same gradients and options (random_seed
// included: Q is drawn with numpy's RandomState(random_seed).randint(1e9) as
// the seed of a fresh CPU generator, as PyTorch does), the averaged
// gradients equal powerSGD_hook's within fp32 rounding, step after step.
// dtrain's reducer hands hooks gradients already divided by the world size
// (PyTorch's hook divides itself); the hook accounts for it: its stored
// error is PyTorch's divided by the world size, and the orthogonalization
// epsilon is scaled to match (see Note [Scaled input] in src/ddp/powersgd.cpp).
//
// Rank larger than a layer allows: clamped to min(rows, cols) for that layer,
// as PyTorch does (so a layer's P and Q are never wider than the layer);
// `dtrain train` and `dtrain bench ddp` refuse a rank larger than every
// layer of the model allows (check_powersgd_rank), exit 2.
//
// State: error feedback (per rank), P and Q (equal on all ranks), the
// iteration count and the random generator; state()/load_state() carry it
// through checkpoints (dtrain train saves every rank's share).
//
/// Example:
/// ```
/// void train(std::shared_ptr<torch::nn::Module> model, dtrain::ProcessGroup pg) {
///   dtrain::PowerSGDOptions p;
///   p.matrix_approximation_rank = 2;
///   p.start_powersgd_iter = 10;
///   dtrain::DataParallel ddp(model, pg,
///                            dtrain::DdpOptions().set_comm_hook(dtrain::powersgd_hook(p)));
/// }
/// ```
//
// Thread safety: the hook's state is guarded by its own mutex; one hook
// serves one DataParallel (bucket indices key its state).

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/ddp.h"
#include "dtrain/options.h"

namespace torch::nn {
class Module;
}

namespace dtrain {

/// PyTorch's PowerSGDState arguments, with its defaults.
struct PowerSGDOptions {
  /// Rank r of the approximation M ≈ P·Qᵀ (PyTorch: matrix_approximation_rank).
  /// At least 1; clamped per layer to min(rows, cols).
  int64_t matrix_approximation_rank = 1;
  /// Iterations of plain allreduce before compression starts (PyTorch:
  /// start_powerSGD_iter). Must be > 1 with error feedback or warm start:
  /// DDP rebuilds its buckets after the first iteration.
  int64_t start_powersgd_iter = 1000;
  /// A matrix is compressed only when its size divided by (rows + cols)·r
  /// exceeds this.
  double min_compression_rate = 2.0;
  /// Adds the compression error of the last step to the gradients.
  bool use_error_feedback = true;
  /// Reuses the last step's Q instead of drawing a random one every step.
  bool warm_start = true;
  /// Added to column norms when orthogonalizing (0: none; use e.g. 1e-8
  /// where whole columns can be zero).
  double orthogonalization_epsilon = 0.0;
  /// Seed of the generator that draws Q's seeds (numpy's RandomState, as
  /// PyTorch); 0 .. 2^32-1.
  int64_t random_seed = 0;
  /// Iterations between compression-statistics lines on `log` (at least 1).
  int64_t compression_stats_logging_frequency = 10000;
  /// Compresses same-shaped matrices of a bucket as one batch.
  bool batch_tensors_with_same_shape = false;
  /// Where the configuration and the compression statistics are written
  /// (PyTorch logs them with logger.info); null: nowhere. Written from the
  /// thread that launches buckets.
  std::ostream* log = nullptr;

  DTRAIN_SETTER(PowerSGDOptions, matrix_approximation_rank)
  DTRAIN_SETTER(PowerSGDOptions, start_powersgd_iter)
  DTRAIN_SETTER(PowerSGDOptions, min_compression_rate)
  DTRAIN_SETTER(PowerSGDOptions, use_error_feedback)
  DTRAIN_SETTER(PowerSGDOptions, warm_start)
  DTRAIN_SETTER(PowerSGDOptions, orthogonalization_epsilon)
  DTRAIN_SETTER(PowerSGDOptions, random_seed)
  DTRAIN_SETTER(PowerSGDOptions, compression_stats_logging_frequency)
  DTRAIN_SETTER(PowerSGDOptions, batch_tensors_with_same_shape)
  DTRAIN_SETTER(PowerSGDOptions, log)
};

/// Compression statistics (PyTorch's PowerSGDState.compression_stats()).
struct PowerSGDStats {
  int64_t iterations = 0;  ///< synchronised iterations seen (PyTorch's state.iter)
  int64_t numel_before_compression = 0;
  int64_t numel_after_compression = 0;
  /// before / after (0 before compression started).
  double compression_rate() const {
    return numel_after_compression > 0
               ? static_cast<double>(numel_before_compression) / numel_after_compression
               : 0.0;
  }
};

/// The PowerSGD hook object: a CommHook with statistics.
class PowerSGDHook : public CommHook {
 public:
  virtual PowerSGDStats stats() const = 0;
  virtual const PowerSGDOptions& options() const = 0;
};

/// The PowerSGD comm hook ("powersgd"). Throws InvalidArgument naming the
/// option when `options` are invalid (rank < 1, start_powersgd_iter <= 1
/// with error feedback or warm start, a seed outside 0 .. 2^32-1).
std::shared_ptr<PowerSGDHook> powersgd_hook(PowerSGDOptions options = {});

/// comm_hook_by_name() with these options for "powersgd".
std::shared_ptr<CommHook> comm_hook_by_name(const std::string& name,
                                            const PowerSGDOptions& powersgd);

/// When `hook` is PowerSGD: throws InvalidArgument when its rank exceeds
/// what every matrix of `module` allows (powersgd_max_rank of its
/// parameters): no layer could use that rank, each would be clamped, which
/// is surely a mistake. The message names `option` (the field that set the
/// rank, e.g. "PowerSGDOptions::matrix_approximation_rank") and `model`, and
/// the largest rank that fits. Other hooks: nothing.
void check_powersgd_rank(const CommHook* hook, const torch::nn::Module& module,
                         const std::string& model, const std::string& option);

/// Largest useful matrix_approximation_rank for parameters of these shapes:
/// the largest min(rows, cols) over the parameters with at least 2
/// dimensions (rows = the first dimension), 0 when there is none.
int64_t powersgd_max_rank(const std::vector<std::vector<int64_t>>& shapes);

/// Elements the hook of `options` allreduces in one step, once compression
/// has started, for gradients of these shapes: P and Q of each tensor it
/// compresses (viewed as shape[0] x the rest), the others whole -- the
/// numel_after_compression of one step's PowerSGDStats.
int64_t powersgd_numel_after_compression(const std::vector<std::vector<int64_t>>& shapes,
                                         const PowerSGDOptions& options);

}  // namespace dtrain
