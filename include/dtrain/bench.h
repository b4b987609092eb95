#pragma once
// Benchmarks, reported the way their peers report (tf_cnn_benchmarks-style
// step timing for DDP, nccl-tests-style bandwidth for collectives), so the
// numbers compare directly. `dtrain bench` prints them; bench/*.sh runs them
// side by side with PyTorch.

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm.h"

namespace dtrain {

struct DdpBenchOptions {
  /// Model registry name; "cnn" runs on 1x28x28 inputs, others on 3xSxS.
  std::string model = "cnn";
  int64_t batch_size = 64;
  /// Input height/width; 0: 28 for cnn, 32 otherwise.
  int64_t image_size = 0;
  int64_t num_classes = 10;
  /// Measured steps of each kind (DDP and no_sync) and warm-up steps.
  int steps = 20;
  int warmup = 3;
  int threads = 0;  ///< intra-op threads (0: LibTorch default)
  double bucket_cap_mb = 25.0;
  std::string comm_hook = "none";
  /// DdpOptions::find_unused_parameters (PyTorch DDP's flag of the same name).
  bool find_unused_parameters = false;
};

/// Times in milliseconds: per-rank means (or medians, _p50) over the
/// measured steps, then averaged over ranks. See bench/README.md for the
/// method behind exposed_comm_ms and hidden_fraction.
struct DdpBenchResult {
  DdpBenchOptions options;
  int world_size = 1;
  double step_ms = 0, step_p50_ms = 0, images_per_sec = 0;
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  double step_nosync_ms = 0, step_nosync_p50_ms = 0, backward_compute_ms = 0;
  double allreduce_ms = 0, broadcast_ms = 0, comm_ms = 0;
  double exposed_comm_ms = 0, hidden_fraction = 0;
  /// The reducer's own measurement (DdpStats::overlap_fraction()).
  double reducer_overlap_fraction = 0;
  int64_t grad_bytes = 0;
  std::vector<int64_t> bucket_bytes;
};

/// Runs the DDP step benchmark on synthetic data. Collective.
DdpBenchResult run_ddp_bench(const DdpBenchOptions& options, const ProcessGroup& pg);
std::string to_json(const DdpBenchResult& r);

struct CollectiveBenchOptions {
  /// "allreduce", "allgather", "broadcast".
  std::string op = "allreduce";
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{64} << 20;
  /// Each size is the previous times this.
  int64_t step_factor = 4;
  int iterations = 20;
  int warmup = 3;
};

/// One row of nccl-tests' table.
struct CollectiveBenchRow {
  int64_t bytes = 0;
  double time_us = 0;  ///< mean per operation
  double algbw_gbps = 0;  ///< bytes / time, GB/s
  double busbw_gbps = 0;  ///< algbw x the op's bus factor (2(n-1)/n for allreduce)
};

/// Times the collective for each size (float32 tensors). Collective.
std::vector<CollectiveBenchRow> run_collective_bench(const CollectiveBenchOptions& options,
                                                     const ProcessGroup& pg);

}  // namespace dtrain
