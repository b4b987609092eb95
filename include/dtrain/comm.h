#pragma once
// Process groups: how ranks find each other and talk.
//
// init_process_group() reads the same contracts as PyTorch's
// torch.distributed.init_process_group:
//   env://              RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun,
//                       dtrain run, PyTorchJob); LOCAL_RANK/LOCAL_WORLD_SIZE
//                       when present; or mpirun's, mpiexec's or srun's
//                       variables (see resolve_init_options, docs/clusters.md)
//   tcp://host:port     explicit rank and world size; rank 0 hosts the store
//   file:///path        explicit rank and world size; a store file on a
//                       shared filesystem
// With env:// and none of those variables set, the result is a single-process
// group (rank 0 of 1) and every collective is a no-op, so the same program runs
// with and without a launcher.
//
// Collectives are blocking (bounded by the group's timeout) or, with the
// *_async calls, return a Work handle whose wait(timeout) bounds the wait.

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dtrain/compat.h"
#include "dtrain/elastic.h"
#include "dtrain/options.h"
#include "dtrain/store.h"

namespace c10d {
class Work;
}  // namespace c10d

namespace dtrain {

/// Looks up an environment variable; nullopt when unset. Tests pass a map.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

/// The real process environment.
EnvLookup process_env();

struct InitOptions {
  /// "env://", "tcp://host:port" or "file:///path".
  std::string init_method = "env://";
  /// Collective backend: "gloo" (CPU tensors; CUDA tensors are staged) or
  /// "nccl" (CUDA builds only).
  std::string backend = "gloo";
  /// This process's rank and the number of ranks; -1 means "from the
  /// environment" (env://). Required for tcp:// and file://.
  int rank = -1;
  int world_size = -1;
  /// Rank among the processes of this node, and how many there are.
  int local_rank = 0;
  int local_world_size = 1;
  /// Deadline for each collective (PyTorch's default is 30 minutes).
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  /// Deadline for reaching the store and for every rank to join.
  std::chrono::milliseconds store_timeout = std::chrono::minutes(5);
  /// The store at the tcp:// address is hosted by a launcher
  /// (TORCHELASTIC_USE_AGENT_STORE=True), so rank 0 connects as a client
  /// instead of hosting it.
  bool launcher_hosts_store = false;
  /// Network interface Gloo uses (GLOO_SOCKET_IFNAME, e.g. "eth0"); wins
  /// over gloo_host.
  std::string gloo_interface;
  /// Address Gloo binds to; empty: the local address of the route to the
  /// store's host for tcp:// (loopback when the store is on loopback);
  /// without a store address (file://) the hostname when it resolves to this
  /// machine, else loopback for a group on one node (world_size ==
  /// local_world_size), else the first interface address with a one-line
  /// warning naming GLOO_SOCKET_IFNAME.
  std::string gloo_host;
  /// Called about every `wait_slice` while this rank waits for one of the
  /// group's collectives (blocking calls, Work::wait, wait_work) or, while
  /// the group forms, for a peer's key in the store (the store is polled
  /// instead of blocking in it); it throws to give the wait up (its
  /// exception propagates; the collective stays in flight and the group
  /// must not be used again: live recovery abandons it, dtrain/live.h).
  /// Empty (the default): waits are not sliced.
  std::function<void()> wait_interrupt;
  /// Period of wait_interrupt's calls.
  std::chrono::milliseconds wait_slice = std::chrono::milliseconds(20);

  DTRAIN_SETTER(InitOptions, init_method)
  DTRAIN_SETTER(InitOptions, backend)
  DTRAIN_SETTER(InitOptions, rank)
  DTRAIN_SETTER(InitOptions, world_size)
  DTRAIN_SETTER(InitOptions, local_rank)
  DTRAIN_SETTER(InitOptions, local_world_size)
  DTRAIN_SETTER(InitOptions, timeout)
  DTRAIN_SETTER(InitOptions, store_timeout)
  DTRAIN_SETTER(InitOptions, launcher_hosts_store)
  DTRAIN_SETTER(InitOptions, gloo_interface)
  DTRAIN_SETTER(InitOptions, gloo_host)
  DTRAIN_SETTER(InitOptions, wait_interrupt)
  DTRAIN_SETTER(InitOptions, wait_slice)
};

/// Resolves the env:// contract into options: fills rank, world_size,
/// local_rank, local_world_size and the store's tcp://host:port init_method
/// from the first launcher, in this order, whose rank (or size) variable is
/// set (docs/clusters.md has the details and examples):
///
///   launcher          rank, world size      local rank, local size       store
///   torchrun, dtrain  RANK, WORLD_SIZE      LOCAL_RANK, LOCAL_WORLD_SIZE MASTER_ADDR, MASTER_PORT
///   run, PyTorchJob                         (absent: 0, 1)               (required)
///   mpirun (Open MPI) OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_LOCAL_RANK,  MASTER_ADDR, MASTER_PORT
///                     OMPI_COMM_WORLD_SIZE  OMPI_COMM_WORLD_LOCAL_SIZE   (required: mpirun -x)
///   mpiexec (MPICH,   PMI_RANK, PMI_SIZE    MPI_LOCALRANKID,             MASTER_ADDR, MASTER_PORT
///   Intel MPI)                              MPI_LOCALNRANKS              (required: -genv)
///   srun (Slurm)      SLURM_PROCID,         SLURM_LOCALID,               MASTER_ADDR, MASTER_PORT;
///                     SLURM_NTASKS          SLURM_NTASKS_PER_NODE, else  default: first host of
///                                           this node's (SLURM_NODEID)   SLURM_JOB_NODELIST,
///                                           SLURM_TASKS_PER_NODE         port 29500
///
/// The launcher hosts the store when TORCHELASTIC_USE_AGENT_STORE is true
/// (torchrun, dtrain run); otherwise rank 0 does (launcher_hosts_store
/// false). Once a launcher is recognised a partial set is an error naming
/// the variables present and missing ("RANK, WORLD_SIZE are set but
/// MASTER_ADDR, MASTER_PORT are not; ..."), and malformed values name the
/// variable; both are InvalidArgument. A world of 1 from mpirun, mpiexec or
/// srun is the single-process group (init_method stays env://, no store).
/// Returns `base` as rank 0 of world_size 1 when no distributed variable is
/// set. For tcp:// and file:// only RANK and WORLD_SIZE are read, to fill a
/// rank or size the caller left at -1.
InitOptions resolve_init_options(InitOptions base, const EnvLookup& env);

/// Where a failing worker records its error (dtrain/elastic.h):
/// TORCHELASTIC_ERROR_FILE (unset: empty path, nothing is recorded), the rank
/// from RANK, else OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, and the local
/// rank from LOCAL_RANK, else OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
/// SLURM_LOCALID (-1 when none is a valid number). Never throws: it runs
/// while the process is already failing.
ErrorFileOptions resolve_error_file(const EnvLookup& env);

/// A collective in flight, as returned by ProcessGroup's *_async calls
/// (PyTorch's Work handle). Cheap to copy (shared state). The tensors given
/// to the collective must not be read or written until wait() returned; the
/// handle keeps them alive. Thread-safe: wait() may be called from any
/// thread, also concurrently with is_completed().
///
/// Example:
/// ```
/// void overlap(const dtrain::ProcessGroup& pg, at::Tensor grads) {
///   dtrain::Work work = pg.all_reduce_sum_async(grads);
///   // ... compute something else while the sum travels ...
///   work.wait(std::chrono::seconds(30));  // throws TimeoutError after 30 s
/// }
/// ```
class Work {
 public:
  /// A handle that is already complete (what the single-process group
  /// returns): wait() returns at once.
  Work();
  ~Work();
  Work(const Work&);
  Work& operator=(const Work&);

  /// Blocks until the collective completed, at most `timeout`. Throws
  /// TimeoutError when `timeout` passes first (the collective stays in
  /// flight: waiting again may still succeed, but a rank that gives up must
  /// not issue further collectives on the group), and TimeoutError,
  /// PeerLostError or DistError naming the operation and the rank when the
  /// collective itself failed. Returns at once when already complete. With
  /// the group's InitOptions::wait_interrupt the wait is sliced and what the
  /// interrupt throws propagates.
  void wait(std::chrono::milliseconds timeout) const;
  /// wait(the group's timeout).
  void wait() const;
  /// True once the collective finished (successfully or not); never blocks.
  bool is_completed() const;
  /// When the collective finished, as seen from the backend's thread; nullopt
  /// while in flight or when the backend does not report it.
  std::optional<std::chrono::steady_clock::time_point> completed_at() const;

  struct State;  // defined in src/comm

 private:
  explicit Work(std::shared_ptr<State> state);
  friend Work make_work(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

/// A group of ranks with a collective backend. Cheap to copy (shared state);
/// collectives are blocking, bounded by the group's timeout, and throw
/// TimeoutError / PeerLostError / DistError naming the operation and rank.
/// Not thread-safe: issue collectives from one thread per group (a Work
/// handle may be waited on from another thread).
///
/// Preconditions: every rank issues the same collectives, in the same order,
/// with tensors of the same shape and dtype; "gloo" stages CUDA tensors, "nccl"
/// CPU ones in the blocking calls (*_async: on this rank's CUDA device).
///
/// Example:
/// ```
/// double mean_loss(double local_loss) {
///   dtrain::ProcessGroup pg = dtrain::init_process_group();  // env://
///   return dtrain::all_reduce_mean(pg, local_loss);
/// }
/// ```
class ProcessGroup {
 public:
  /// The single-process group: rank 0 of 1, collectives are no-ops.
  ProcessGroup();
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&);
  ProcessGroup& operator=(const ProcessGroup&);

  int rank() const;
  int size() const;
  int local_rank() const;
  int local_world_size() const;
  std::chrono::milliseconds timeout() const;
  const std::string& backend_name() const;

  /// The c10d backend (ProcessGroupGloo, ProcessGroupNCCL), or null for the
  /// single-process group. For dtrain's internals and for users who need
  /// c10d directly.
  c10::intrusive_ptr<compat::CollectiveBackend> backend() const;
  /// The store the group was formed over (null for single-process).
  StorePtr store() const;

  /// In-place sum across ranks of every tensor (same shapes on all ranks).
  void all_reduce_sum(std::vector<at::Tensor>& tensors) const;
  /// In-place broadcast of every tensor from `root`.
  void broadcast(std::vector<at::Tensor>& tensors, int root = 0) const;
  /// Gathers `tensor` from every rank (same shape everywhere), in rank order.
  std::vector<at::Tensor> all_gather(const at::Tensor& tensor) const;
  /// Waits until every rank has arrived.
  void barrier() const;

  /// Asynchronous collectives: each starts one collective and returns at once
  /// with its handle; every rank must start the same collectives in the same
  /// order. `what` names the operation in error messages (e.g. "allreduce of
  /// gradient bucket 3"); empty: the collective's name. On the
  /// single-process group they complete at once (the input is the result).
  ///
  /// In-place sum of `tensor` across ranks (same shape on all ranks).
  Work all_reduce_sum_async(at::Tensor tensor, const std::string& what = {}) const;
  /// In-place broadcast of `tensor` from `root`.
  Work broadcast_async(at::Tensor tensor, int root = 0, const std::string& what = {}) const;
  /// Gathers `tensor` from every rank into `out` (size() tensors shaped and
  /// typed like `tensor`, allocated by the caller), in rank order.
  Work all_gather_async(at::Tensor tensor, std::vector<at::Tensor> out,
                        const std::string& what = {}) const;

  struct State;  // defined in src/comm

 private:
  explicit ProcessGroup(std::shared_ptr<const State> state);
  friend ProcessGroup make_process_group(std::shared_ptr<const State> state);
  friend const State& state_of(const ProcessGroup& pg);
  std::shared_ptr<const State> state_;
};

/// Forms the group described by `options` (after resolve_init_options for
/// env://). Blocks until every rank's backend has connected to its peers
/// (then a rank may use or destroy its group at once), or throws
/// TimeoutError after options.store_timeout. Like every overload, sets
/// SIGPIPE to ignored for the process unless the program handles it (as
/// Python does), so that a write to a vanished peer fails the collective
/// instead of ending the process (Note [SIGPIPE] in src/common/net.cpp).
ProcessGroup init_process_group(const InitOptions& options);

/// Forms a group over an existing store (a rendezvous result, or a memory
/// store shared by threads in tests); init_method is ignored. Collective;
/// blocks like the overload above. Precondition: the store (or a
/// prefix_store view of it) serves this group only: the backend's address
/// keys are not versioned, so a second group over the same keys may read the
/// first one's addresses.
ProcessGroup init_process_group(StorePtr store, const InitOptions& options);

/// init_process_group(resolve_init_options({}, process_env())).
ProcessGroup init_process_group();

/// Cross-rank reductions of metrics, in double precision. Single-process
/// groups return the input.
double all_reduce_sum(const ProcessGroup& pg, double value);
std::vector<double> all_reduce_sum(const ProcessGroup& pg, std::vector<double> values);
double all_reduce_mean(const ProcessGroup& pg, double value);
std::vector<double> all_reduce_mean(const ProcessGroup& pg, std::vector<double> values);

/// For code that runs collectives on backend() itself (dtrain's DDP reducer
/// and benchmarks, or a program of yours): waits for `work`, bounded by the
/// group's timeout (which the backend enforces), and turns a c10d failure
/// into TimeoutError, PeerLostError or DistError whose message names `what`
/// (operation, bucket, ...), pg's rank and the timeout. Sliced by the
/// group's wait_interrupt, whose exception propagates.
void wait_work(const c10::intrusive_ptr<c10d::Work>& work, const ProcessGroup& pg,
               const std::string& what);

/// The same classification for an exception already caught from a c10d
/// call made by `rank` (its group's `timeout`).
[[noreturn]] void rethrow_dist_error(const std::exception& e, int rank, const std::string& what,
                                     std::chrono::milliseconds timeout);

}  // namespace dtrain
