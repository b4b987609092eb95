#pragma once
// Benchmarks, reported the way their peers report (tf_cnn_benchmarks-style
// step timing for DDP and whole training steps, nccl-tests-style bandwidth for collectives), so the
// numbers compare directly. `dtrain bench` prints them; bench/*.sh runs them
// side by side with PyTorch.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm.h"
#include "dtrain/kvstore.h"
#include "dtrain/powersgd.h"
#include "dtrain/train.h"

namespace dtrain {

class ImageClassifier;  // dtrain/models.h

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
  /// comm_hook_by_name(): none, fp16, bf16, powersgd (with `powersgd`), noop
  /// (no communication: the step rate the others are measured against).
  std::string comm_hook = "none";
  PowerSGDOptions powersgd;
  /// DdpOptions::find_unused_parameters (PyTorch DDP's flag of the same name).
  bool find_unused_parameters = false;
  /// Chrome-trace timeline of every step (dtrain/timeline.h): a path, with
  /// "{rank}" or ".rank<r>" per rank (timeline_path_for_rank); empty: none.
  std::string timeline;
  /// The interface whose /proc/net/dev bytes DdpBenchResult::wire_* count
  /// (empty: every interface but lo, as in a network namespace of its own;
  /// "lo" on loopback, whose counter every rank of the host shares).
  std::string wire_interface;
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
  /// Bytes this process's network namespace sent and received per DDP step
  /// (/proc/net/dev, every interface but lo, read around each block of timed
  /// DDP steps only, so the no_sync steps' barriers, the warm-up and DDP's
  /// first broadcast are left out; framing and ACKs included), mean over
  /// ranks, of DdpBenchOptions::wire_interface (default every interface but
  /// lo: nothing on loopback); -1 where /proc/net/dev cannot be read.
  double wire_tx_bytes_per_step = 0, wire_rx_bytes_per_step = 0;
  int64_t grad_bytes = 0;
  std::vector<int64_t> bucket_bytes;
  /// The shapes of the gradients DDP reduces (fp32), in parameter order.
  std::vector<std::vector<int64_t>> grad_shapes;
  /// With comm_hook "powersgd": the hook's statistics after the run
  /// (iterations = DDP steps it saw, warm-up included; the compression rate
  /// of the compressed steps, PyTorch's compression_stats()).
  std::optional<PowerSGDStats> powersgd_stats;
};

/// Runs the DDP step benchmark on synthetic data. Collective.
DdpBenchResult run_ddp_bench(const DdpBenchOptions& options, const ProcessGroup& pg);
std::string to_json(const DdpBenchResult& r);

/// What an estimate of each way of moving the gradients rests on: figures
/// `dtrain bench ddp` measured (comm_choice_figures) or given ones.
struct CommChoiceFigures {
  int world_size = 1;
  int64_t batch_size = 1;  ///< per rank, for images/sec
  /// A step with no communication at all (the no_sync step's median).
  double compute_ms = 0;
  /// Communication that the step hides behind backward (Note [Choosing how
  /// gradients travel] in src/measure/comm_choice.cpp).
  double hideable_ms = 0;
  /// Communication every option pays apart from the gradients (DDP's
  /// broadcast of buffers).
  double fixed_ms = 0;
  /// Bytes per second one rank's link carries each way: the ring allreduce's
  /// 2(W-1)/W x gradient bytes over its measured time (nccl-tests' busbw).
  double link_bytes_per_sec = 0;
  /// The gradients' shapes (fp32), for PowerSGD's P and Q.
  std::vector<std::vector<int64_t>> grad_shapes;
  /// Parameter servers, each on a host of its own with the same link; 0:
  /// world_size (the fewest that let the PS beat a ring: one payload each
  /// way per link).
  int servers = 0;
  /// PowerSGD ranks to estimate; the other PowerSGDOptions are the defaults.
  std::vector<int64_t> powersgd_ranks = {1, 2, 4};
};

/// One way of moving a step's gradients, with its estimated cost.
struct CommChoice {
  /// "allreduce", "fp16/bf16", "powersgd rank R", "ps (S servers)".
  std::string name;
  /// Bytes the busiest link carries each way per step: a rank's for the
  /// ring and the compressing hooks, max(worker's, server's) for the PS.
  double link_bytes = 0;
  double comm_ms = 0;  ///< link_bytes at link_bytes_per_sec, plus fixed_ms
  double step_ms = 0;  ///< compute_ms + what of comm_ms is not hidden
  double images_per_sec = 0;
};

/// The figures of a measured `dtrain bench ddp` run (world_size > 1): the
/// link from its standalone allreduce, the hidden time from its exposed
/// communication under its own comm hook.
CommChoiceFigures comm_choice_figures(const DdpBenchResult& result);

/// allreduce, fp16/bf16, PowerSGD at each rank and the PS, estimated from
/// `figures` and sorted fastest first (ties: in that order). An estimate: it
/// models the bytes on the link, not PowerSGD's compression compute nor the
/// servers' CPU. Throws InvalidArgument when world_size < 2 or the link or
/// gradients are empty.
std::vector<CommChoice> comm_choices(const CommChoiceFigures& figures);

/// The lines `dtrain bench ddp` prints: the figures, a table of `choices`
/// and the recommendation (the first), worded as the estimate it is.
std::string format_comm_choices(const CommChoiceFigures& figures,
                                const std::vector<CommChoice>& choices);

/// `dtrain bench train`: tf_cnn_benchmarks' method, run by train()
/// (dtrain/train.h), the loop `dtrain train` runs: every step is a whole
/// training step of TrainOptions (forward, loss, backward through
/// DistributedDataParallel or a kvstore, the optimizer; AMP, channels-last,
/// observers as configured) on the "synthetic" dataset: one random batch made
/// on the device once, with fixed labels. The same options and seed in
/// `dtrain train --dataset synthetic` take the same steps.
struct TrainBenchOptions {
  /// The training run. Defaults: resnet18, 32 samples per process, SGD with
  /// lr 0.01 and momentum 0.9 (OptimizerOptions' defaults), seed 0. The
  /// benchmark sets these fields itself: dataset (synthetic, image_size x
  /// image_size, num_classes, (warmup_steps + steps) x accumulation_steps
  /// batches per rank), epochs (1), evaluate_every_epoch (false),
  /// eval_batch_size (1), checkpoints (none), log_run (false) and progress
  /// (none); a step_observer already set is called before the benchmark's
  /// own. Steps are optimizer steps.
  TrainOptions train = TrainOptions().set_model("resnet18").set_batch_size(32);
  /// Input height/width; 0: 28 for cnn (1 channel), 224 otherwise (3).
  int64_t image_size = 0;
  int64_t num_classes = 1000;
  int steps = 100;         ///< timed steps
  int warmup_steps = 10;   ///< untimed steps before them
  int display_every = 10;  ///< progress line every N timed steps (rank 0)
};

/// The TrainOptions run_train_bench() passes to train() for a group of
/// `world_size` ranks (the fields TrainBenchOptions::train lists set, without
/// the step observer).
TrainOptions train_options_for(const TrainBenchOptions& options, int world_size);

struct TrainBenchResult {
  TrainBenchOptions options;  ///< with image_size resolved
  int world_size = 1;
  std::string device;  ///< rank 0's, e.g. "cpu", "cuda:0"
  /// Total images/sec: world_size x batch_size x steps / time of the timed
  /// steps, the time averaged over ranks (tf_cnn_benchmarks' "total").
  double images_per_sec = 0;
  double step_ms = 0;     ///< mean timed step, averaged over ranks
  double final_loss = 0;  ///< rank 0's loss of the last step
  double loss_scale = 1;  ///< GradScaler's scale at the end (1: none)
  /// Multiply-accumulates of one image's forward pass (forward_macs() in
  /// dtrain/models.h: convolutions and linear layers).
  int64_t forward_macs = 0;
  /// Achieved TFLOP/s of all ranks: 6 x forward_macs x images_per_sec / 1e12
  /// (a step as 3 forward passes, 2 FLOPs per multiply-accumulate); divide by
  /// world_size for one device's share. Reported on the CPU too.
  double tflops = 0;
  /// On a GPU: rank 0's peak memory allocated by LibTorch's caching
  /// allocator over the timed steps (torch.cuda.max_memory_allocated after
  /// reset_peak_memory_stats at the end of the warm-up), and that GPU's
  /// total memory, in GiB; nullopt on the CPU.
  std::optional<double> peak_mem_gib;
  std::optional<double> gpu_mem_gib;
};

/// Multiply-accumulates of one forward pass of `model` on one
/// `in_channels` x `image_size` x `image_size` image: those of every
/// convolution and fully connected layer, counted from the shapes of the
/// operators the forward runs (Note [Counting MACs with RecordFunction] in
/// src/measure/flops.cpp); bias additions, normalisation, activations and
/// pooling are left out, as in torchvision's "GFLOPS" column (ResNet-50 at
/// 224 px: 4.09 G). FLOPs are 2 x MACs; a training step (forward and
/// backward) about 3 x the forward's. Runs one forward of a batch of one
/// image of zeros on the device of the model's parameters, in eval mode
/// without gradients, and restores the training mode (no BatchNorm
/// statistics change). Blocks until the forward is done; not concurrently
/// with another use of `model`.
int64_t forward_macs(ImageClassifier& model, int64_t in_channels, int64_t image_size);

/// One progress line, for the caller to print (rank 0 only).
using TrainBenchPrinter = std::function<void(const std::string& line)>;

/// Runs `dtrain bench train` through train(). Collective: every rank of `pg`
/// must call it with the same options. `print` (may be empty) gets rank 0's
/// tf_cnn_benchmarks-style lines: a header, "Step\tImg/sec\ttotal_loss", one
/// line per display_every steps whose images/sec is the total over ranks,
/// and the final "total images/sec: X" between dashed rules, then "achieved
/// TFLOP/s: X (...)" and "peak GPU memory: X GiB of Y GiB (...)" ("n/a (cpu)"
/// on the CPU). The observers of options.train (TensorBoard, timeline,
/// metrics endpoint, whose address every rank prints to stdout) are train()'s.
/// Throws InvalidArgument naming the TrainBenchOptions field for bad steps,
/// sizes or classes, and as train() for the rest (an unknown model, an
/// amp/device combination autocast cannot do, a TensorBoard directory that
/// cannot be created, a metrics port in use), before any step runs. With
/// options.train.kvstore, the gradients go through `kvstore`, a store of that
/// type the caller opened (create_kvstore, dtrain/kvstore_torch.h) as one of
/// pg's workers, passed on to train(); a missing or mismatched store is
/// InvalidArgument.
TrainBenchResult run_train_bench(const TrainBenchOptions& options, const ProcessGroup& pg,
                                 const TrainBenchPrinter& print = {},
                                 std::shared_ptr<KVStore> kvstore = nullptr);
/// {"impl": "dtrain", "bench": "train", "model", "world_size", "batch_size",
/// "image_size", "num_classes", "amp", "channels_last", "threads", "device", "kvstore",
/// "steps", "warmup_steps", "images_per_sec", "step_ms", "final_loss",
/// "loss_scale", "forward_gmacs", "tflops", "peak_mem_gib" (null on the CPU),
/// "gpu_mem_gib" (null on the CPU)}: also a `dtrain bench scaling --from` input.
std::string to_json(const TrainBenchResult& r);

/// Element types of `dtrain bench collective` (nccl-tests' -d).
enum class CollectiveDtype { kFloat, kDouble, kInt32, kInt64 };
/// "float", "double", "int32", "int64".
std::string to_string(CollectiveDtype dtype);
/// The type to_string() spells `name` as; throws InvalidArgument naming the
/// value and listing the valid ones otherwise.
CollectiveDtype parse_collective_dtype(const std::string& name);

/// Reductions of `dtrain bench collective` (nccl-tests' -o).
enum class CollectiveReduceOp { kSum, kProd, kMin, kMax };
/// "sum", "prod", "min", "max".
std::string to_string(CollectiveReduceOp op);
/// The reduction to_string() spells `name` as; throws InvalidArgument naming
/// the value and listing the valid ones otherwise.
CollectiveReduceOp parse_collective_reduce_op(const std::string& name);

/// Collectives of `dtrain bench collective`, in nccl-tests' order.
enum class CollectiveOp { kAllreduce, kAllgather, kReduceScatter, kBroadcast, kReduce, kAlltoall };
/// "allreduce", "allgather", "reduce_scatter", "broadcast", "reduce",
/// "alltoall".
std::string to_string(CollectiveOp op);
/// The collective to_string() spells `name` as; throws InvalidArgument naming
/// the value and listing the valid ones otherwise.
CollectiveOp parse_collective_op(const std::string& name);

struct CollectiveBenchOptions {
  /// The collective to time (the command's positional argument).
  CollectiveOp op = CollectiveOp::kAllreduce;
  /// Message sizes in bytes, as nccl-tests' -b/-e/-f: min_bytes, then times
  /// step_factor while <= max_bytes. The size is nccl-tests' "size" column:
  /// the whole buffer (allgather's output, reduce_scatter's input, the
  /// buffer each rank sends in alltoall).
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{64} << 20;
  int64_t step_factor = 2;
  /// Timed and warm-up iterations per size and mode (-n, -w).
  int iterations = 20;
  int warmup = 5;
  /// Check every element of the result after timing (-c); off: #wrong is -1.
  bool check = true;
  /// Element type (-d).
  CollectiveDtype dtype = CollectiveDtype::kFloat;
  /// Reduction (-o) of allreduce, reduce_scatter and reduce.
  CollectiveReduceOp redop = CollectiveReduceOp::kSum;
  /// Root of broadcast and reduce (-r).
  int root = 0;
};

/// One mode's measurement: mean time per operation over the ranks, nccl-tests'
/// algorithm and bus bandwidths, and the elements that differ from the
/// expected result, summed over ranks (-1: not checked).
struct CollectiveBenchTiming {
  double time_us = 0;
  double algbw_gbps = 0;  ///< size / time, GB/s (1e9 bytes)
  double busbw_gbps = 0;  ///< algbw x bus_bandwidth_factor(op, n)
  int64_t wrong = -1;
};

/// One row of nccl-tests' table.
struct CollectiveBenchRow {
  int64_t bytes = 0;  ///< "size"
  int64_t count = 0;  ///< "count": elements per rank (allreduce, broadcast,
                      ///< reduce), per rank's part (allgather, reduce_scatter),
                      ///< per peer (alltoall)
  std::string type;   ///< "float", ...
  std::string redop;  ///< the reduction, or "none"
  int root = -1;      ///< broadcast/reduce's root, else -1
  CollectiveBenchTiming out_of_place, in_place;
};

/// `dtrain bench kvstore`: push-pull bandwidth of a dist_sync kvstore (a
/// worker of a DMLC_* job, servers only summing), nccl-tests' sweep or one
/// model's parameter sizes, with the bytes each worker's network interface
/// sent and received.
struct KVStoreBenchOptions {
  /// Message sizes in bytes, as bench collective's -b/-e/-f: one key per size.
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{64} << 20;
  int64_t step_factor = 2;
  /// A make_model() name: one row whose iteration pushes and pulls every
  /// parameter tensor of that model as its own key, all at once (as a
  /// training step would); empty: the sweep.
  std::string model;
  int64_t num_classes = 1000;  ///< classes of `model` (torchvision's 1000)
  /// Timed and warm-up iterations per row (-n, -w).
  int iterations = 20;
  int warmup = 5;
  /// Check every pulled element after timing (-c): the sum of the workers'
  /// pushes.
  bool check = true;
  /// Interface whose /proc/net/dev counters are read (e.g. the namespace's
  /// veth); empty: every interface but lo.
  std::string interface;
};

/// One row: times and bytes are per iteration, averaged over the workers.
struct KVStoreBenchRow {
  int64_t bytes = 0;  ///< fp32 bytes pushed (and pulled) by each worker
  int64_t keys = 0;
  double time_us = 0;
  double algbw_gbps = 0;  ///< bytes / time, GB/s (1e9 bytes)
  double tx_bytes = 0;    ///< sent by a worker's interface(s)
  double rx_bytes = 0;    ///< received by a worker's interface(s)
  int64_t wrong = -1;     ///< differing elements, summed over workers
};

struct KVStoreBenchResult {
  KVStoreBenchOptions options;
  int workers = 0;
  std::vector<KVStoreBenchRow> rows;
};

/// Bytes a network interface has received and sent so far.
struct InterfaceBytes {
  uint64_t rx = 0, tx = 0;
};
/// Sums /proc/net/dev's byte counters of `interface` (empty: all but lo)
/// in this process's network namespace. Throws InvalidArgument when the
/// named interface is absent (listing those present), Error when the file
/// cannot be read.
InterfaceBytes read_interface_bytes(const std::string& interface);
/// The same from /proc/net/dev's text (for tests).
InterfaceBytes parse_interface_bytes(const std::string& proc_net_dev, const std::string& interface);

/// Throws InvalidArgument for a bad size range, iteration counts or model
/// (the CLI checks them before connecting to the scheduler).
void check_kvstore_bench_options(const KVStoreBenchOptions& options);
/// Runs the benchmark as one worker of `kv` (a dist store every worker
/// passes to this call with the same options). Keys 0.. carry the rows,
/// key 100000 the per-worker figures, summed by the servers (no optimizer
/// may be set). Rows whose size is below 4 bytes are skipped. Throws
/// InvalidArgument as check_kvstore_bench_options, or for an interface
/// absent from this network namespace.
KVStoreBenchResult run_kvstore_bench(const KVStoreBenchOptions& options, KVStore& kv);
/// nccl-tests-style table: size, keys, time, algbw, wire tx/rx per worker
/// per iteration and their ratio to the size, #wrong.
std::string format_kvstore_table(const KVStoreBenchResult& result, int servers);
/// {"impl": "dtrain", "bench": "kvstore", "model", "workers", "servers",
/// "rows": [{"bytes", "keys", "time_us", "algbw_gbps", "tx_bytes",
/// "rx_bytes", "wrong"}]}.
std::string to_json(const KVStoreBenchResult& result, int servers);

/// One world size of a scaling run: `dtrain bench ddp`'s figures.
struct ScalingPoint {
  int procs = 1;
  double images_per_sec = 0;
  double step_ms = 0;
};

/// Throughput against the number of processes, with the ideal line from the
/// smallest run (ideal(p) = ips(p0) x p / p0) and the efficiency
/// ips / ideal. Epoch time is epoch_samples / images_per_sec.
struct ScalingTable {
  std::string model;
  int64_t batch_size = 0;
  int64_t epoch_samples = 60000;
  std::vector<ScalingPoint> points;  ///< sorted by procs
  double ideal_images_per_sec(const ScalingPoint& p) const;
  double efficiency(const ScalingPoint& p) const;
  double epoch_seconds(const ScalingPoint& p) const;
};

/// The table from `dtrain bench ddp --json` objects (one per world size, any
/// order). Throws InvalidArgument naming the object that lacks a field, or
/// when two share a world size or their models differ.
ScalingTable scaling_table_from_results(const std::vector<std::string>& json_objects,
                                        int64_t epoch_samples = 60000);
/// {"model", "batch_size", "epoch_samples", "points": [{"procs",
/// "images_per_sec", "step_ms", "ideal_images_per_sec", "efficiency",
/// "epoch_seconds"}]}.
std::string to_json(const ScalingTable& table);
/// Two panels (images/sec and epoch time against processes), the measured
/// points joined by a line, the ideal line dashed, efficiency labels. Each
/// point is a <circle> with data-procs and data-value attributes holding the
/// plotted figures.
std::string scaling_svg(const ScalingTable& table);

/// to_string() of every CollectiveOp, in nccl-tests' order.
std::vector<std::string> collective_bench_ops();

/// nccl-tests' bus-bandwidth factor: 2(n-1)/n for allreduce; (n-1)/n for
/// allgather, reduce_scatter and alltoall; 1 for broadcast and reduce.
double bus_bandwidth_factor(CollectiveOp op, int world_size);

/// Parses a byte size as nccl-tests does: a number with an optional K, M or
/// G suffix (powers of 1024). Throws InvalidArgument naming `text`.
int64_t parse_byte_size(const std::string& text);

/// Times the collective for each size, out-of-place and in-place, and checks
/// the results (see Note [Collectives as nccl-tests runs them] in
/// src/measure/collective_bench.cpp). Collective. Throws InvalidArgument for a
/// bad size range or root.
std::vector<CollectiveBenchRow> run_collective_bench(const CollectiveBenchOptions& options,
                                                     const ProcessGroup& pg);

/// nccl-tests' table: header, one line per row, "# Out of bounds values" and
/// "# Avg bus bandwidth" (over both modes of every row).
std::string format_collective_table(const CollectiveBenchOptions& options,
                                    const std::vector<CollectiveBenchRow>& rows, int world_size,
                                    const std::string& backend);

}  // namespace dtrain
