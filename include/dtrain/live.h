#pragma once
// Live recovery: when a worker dies, hangs or is cut off, the others keep
// training in their running processes (docs/live_recovery.md).
//
// Each worker process is a *member* of a LiveGroup. Members meet through a
// c10d store that outlives them (the launcher's, or one off the workers'
// nodes). The group runs in *generations*: generation g is one ProcessGroup
// among the members alive when it formed, over the fresh store prefix
// "<key_prefix>/gen/<g>/pg". Per step:
//
//   begin_step()     forms the next generation when the last one lost a
//                    member or admitted a joiner (the survivors' leader waits a
//                    bounded time for every member it believes alive, then
//                    writes the member list; a joiner receives the state over
//                    the collective backend); returns the step's view
//   run_logical()    runs the user's forward/backward once per logical rank
//                    this member holds (several after a loss), each with its
//                    own dropout seed and BatchNorm buffers, gradients
//                    accumulated and divided by W0 (the logical world size)
//   should_commit()  the members agree through the store whether every one
//                    finished the step: true -> take the optimizer step;
//                    false -> take none, the next begin_step() redoes it
//
// Failure detection: a heartbeat thread per member bumps
// "<key_prefix>/hb/<member>" every heartbeat_interval on its own store
// connection and watches the other members' counters; a member whose counter
// did not advance for failure_timeout (on the watcher's clock) is declared
// dead (SIGKILL, SIGSTOP, a cut link). Collectives of a generation that lost
// a member are abandoned, never aborted (Gloo has no abort): waits are sliced
// and give up with GenerationLostError; the group and its tensors are kept
// alive, untouched (Note [Abandoned groups] in src/live/).
//
// Same global batch, exactly once: logical rank r of W0 runs on live member
// r mod L (L members alive); its micro-batch is the one rank r of a W0-rank
// job would read at that step (e.g. DistributedSampler rank r of W0), so the
// final weights equal a failure-free run's within fp32 reduction order.
//
/// Example:
/// ```
/// void train_live(torch::nn::Linear model, torch::optim::SGD& opt, int64_t steps) {
///   dtrain::LiveGroup live(dtrain::LiveOptions::from_env(dtrain::process_env()));
///   live.register_module(*model);
///   live.register_optimizer(opt);
///   live.wrap_ddp(*model);  // a DataParallel per generation
///   while (live.step() < steps) {
///     const dtrain::LiveStep& s = live.begin_step();
///     opt.zero_grad();
///     bool ok = live.run_logical([&](int logical_rank) {
///       // logical rank's micro-batch of step s.step (DistributedSampler rank r of W0)
///       torch::Tensor x = torch::full({8, 4}, double(logical_rank + s.step));
///       s.ddp->prepare_forward();
///       torch::Tensor out = model->forward(x);
///       s.ddp->finish_forward({out});
///       torch::mse_loss(out, torch::zeros({8, 4})).backward();
///     });
///     if (ok && live.should_commit()) opt.step();  // false: redo the step
///   }
/// }
/// ```
//
// Thread safety: one LiveGroup per process, driven from the training thread;
// its own heartbeat thread talks to the store on its own connection. Events
// (on_event) are called on the training thread.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm.h"
#include "dtrain/ddp.h"
#include "dtrain/errors.h"
#include "dtrain/options.h"
#include "dtrain/store.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace dtrain {

/// This member may no longer take part: it lost the store for
/// failure_timeout, or the group moved on to a generation without it (a
/// process resumed by SIGCONT, a member declared dead by the others). Every
/// later call of its LiveGroup throws it again; the process must not commit
/// or write a checkpoint, and should exit (the launcher may start a
/// replacement, which joins).
class FencedError : public DistError {
 public:
  using DistError::DistError;
};

/// Fewer than min_workers members are alive; the message names the lost
/// members, how each was detected, and the generation and step.
class BelowMinWorkersError : public DistError {
 public:
  using DistError::DistError;
};

/// A collective of the current generation was abandoned because a member of
/// it was declared dead (thrown from waits inside run_logical(); run_logical
/// catches it and returns false).
class GenerationLostError : public PeerLostError {
 public:
  using PeerLostError::PeerLostError;
};

/// A replacement (LiveOptions::join) found the job over before it was
/// admitted: every member of the newest generation has left (finished, or
/// ended by an error). Thrown by begin_step() within about a heartbeat
/// interval of the last member leaving, instead of after start_timeout. The
/// replacement has no state and nothing to do: it must not write
/// checkpoints or results.
class JobEndedError : public DistError {
 public:
  using DistError::DistError;
};

/// How a member was found dead.
enum class DetectionCause {
  kMissedHeartbeats,  ///< its heartbeat counter stopped for failure_timeout
  kPeerLost,          ///< a collective with it failed (connection reset)
  kStoreLost,         ///< this member could not reach the store (it fenced itself)
  kLeftGeneration,    ///< it did not announce itself for the next generation in time
};
/// "missed heartbeats", "peer lost", "store lost", "left generation".
std::string to_string(DetectionCause cause);
/// The cause spelled by to_string(); kPeerLost for any other text (a
/// launcher's agent may write its own words, e.g. "exited: signal 9").
DetectionCause detection_cause_from_string(const std::string& text);

/// LiveGroup::stats(): the time the calling thread spent inside the live
/// group's calls, so that the steady-state cost of live recovery is measured
/// directly, not only as the difference of two noisy step rates.
struct LiveStats {
  int64_t committed_steps = 0;
  /// In begin_step() calls that formed no generation, in run_logical()
  /// outside the user's function and the buffer broadcast (generator
  /// bookkeeping, keeping logical rank 0's buffers), and in should_commit()
  /// (the store round trips that agree on the step): what live recovery
  /// adds to a step.
  std::chrono::nanoseconds protocol{0};
  /// In run_logical()'s broadcast of logical rank 0's buffers (one
  /// collective per dtype). It replaces the broadcast plain DDP makes before
  /// each forward (DdpOptions::broadcast_buffers), so it is not live
  /// recovery's cost; it is also where a member waits for the slowest one to
  /// leave the gradient allreduce. 0 for a model without buffers.
  std::chrono::nanoseconds buffers{0};
  /// In begin_step() calls that formed a generation: the first one, and each
  /// after a loss or a join (state transfers included).
  std::chrono::nanoseconds forming{0};
  /// From the first begin_step() to the last should_commit().
  std::chrono::nanoseconds wall{0};
  /// protocol / wall (0 before the first step).
  double protocol_share() const {
    return wall.count() > 0 ? static_cast<double>(protocol.count()) / wall.count() : 0.0;
  }
};

struct LostMember {
  std::string member;
  DetectionCause cause = DetectionCause::kMissedHeartbeats;
};

/// One recovery (a new generation), for logs, metrics and timelines. Given
/// to LiveOptions::on_event on every member of the new generation.
struct RecoveryEvent {
  enum class Kind {
    kFormed,  ///< the first generation formed (start of training)
    kLost,    ///< members were lost; the survivors formed a new generation
    kJoined,  ///< joiners were admitted (maybe also losses: see lost)
    kFenced,  ///< this member fenced itself (sent before FencedError is thrown)
  };
  Kind kind = Kind::kFormed;
  std::string member;               ///< the member reporting it
  int64_t generation = 0;           ///< the new generation
  int64_t step = 0;                 ///< the step that is (re)done next
  std::vector<LostMember> lost;     ///< who failed and how it was detected
  std::vector<std::string> joined;  ///< members admitted in this generation
  /// Why the step was given up when nobody was lost or joined (a member's
  /// own failure, e.g. "host:12: <its first error line>"); empty otherwise.
  std::string redo_reason;
  int previous_world_size = 0;  ///< live members of the previous generation
  int world_size = 0;           ///< live members now
  /// From this member's detection of the failure (or the commit+join
  /// decision) to the new group being formed; zero for kFormed.
  std::chrono::milliseconds detect_to_group{0};
  /// Time of the state transfer to joiners (zero when there was none).
  std::chrono::milliseconds state_transfer{0};
  /// NCCL only: time the abort of the previous generation's communicators
  /// took (zero on Gloo, which has no abort), and whether it was given up
  /// after its bound of 5 s (Note [Bounded abort] in src/live/live_group.cpp).
  std::chrono::milliseconds communicator_abort{0};
  bool communicator_abort_timed_out = false;
  std::chrono::system_clock::time_point at;  ///< when the new group formed
  /// One log line: "live: generation 3 (step 41): lost host:123 (missed
  /// heartbeats); 3 workers (was 4); new group 0.41 s after detection".
  std::string to_string() const;
};

/// For launchers (what `dtrain run --recovery live` relies on), all keys
/// under key_prefix ("live", or DTRAIN_LIVE_KEY_PREFIX) in the workers' store:
///   * "<prefix>/hb/<member>" appears when the worker's LiveGroup starts and
///     counts its heartbeats: a worker that never creates one (a program
///     that does not use this API) never writes it;
///   * an agent that reaps a worker may set "<prefix>/dead/<member>" (by
///     default "<host>:<pid>") to its cause, e.g. "exited: signal 9": the
///     others count it dead at their next heartbeat tick instead of after
///     failure_timeout (needed across hosts; same-host members probe the
///     process themselves);
///   * "<prefix>/left/<member>" is set when a LiveGroup is destroyed (the end
///     of training, or the process ending).
/// A program that builds LiveOptions itself must take key_prefix from
/// DTRAIN_LIVE_KEY_PREFIX when it is set (from_env does).
/// A replacement gets the same store (MASTER_ADDR/PORT), WORLD_SIZE and
/// DTRAIN_LIVE_JOIN=1; its RANK is not used.
struct LiveOptions {
  /// This member's id, unique in the job; empty: "<hostname>:<pid>".
  std::string member;
  /// W0: the number of logical ranks (the job's configured world size; the
  /// global batch is W0 micro-batches). 0: initial_world_size.
  int logical_world_size = 0;
  /// Members that form the first generation (WORLD_SIZE); required (> 0)
  /// unless join.
  int initial_world_size = 0;
  /// This member's position in the first generation (RANK): members are
  /// ordered by it, so logical rank r starts on RANK r when L == W0.
  int initial_rank = 0;
  /// Fewer live members than this: begin_step() throws BelowMinWorkersError.
  int min_workers = 1;
  /// A replacement (DTRAIN_LIVE_JOIN=1): it registers as a joiner, waits
  /// (up to start_timeout) to be admitted at a step boundary and receives
  /// the state from a live member.
  bool join = false;
  /// The store every member connects to (MASTER_ADDR, MASTER_PORT); used by
  /// the LiveGroup(LiveOptions) constructor. It must outlive the members and
  /// be the same for replacements.
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  /// Host a TcpStoreServer at store_port in this process (initial_rank 0 of
  /// a plain env launch). Losing this member then loses the store: the
  /// others fence themselves and the job needs a restart (said at start).
  bool host_store = false;
  /// Prefix of every key this group uses in the store. Under `dtrain run`
  /// with a c10d rendezvous the members share the rendezvous store, and the
  /// launcher gives each round its own prefix (DTRAIN_LIVE_KEY_PREFIX).
  std::string key_prefix = "live";
  /// Collective backend of each generation ("gloo"; "nccl" in CUDA builds,
  /// with a GPU per member: a lost member's collectives are then aborted,
  /// Note [Bounded abort] in src/live/live_group.cpp).
  std::string backend = "gloo";
  /// This member's rank on its node (LOCAL_RANK): an NCCL generation uses
  /// GPU local_rank % the visible GPUs, as InitOptions::local_rank does.
  int local_rank = 0;
  /// Address Gloo binds to (InitOptions::gloo_host); empty: its default.
  std::string gloo_host;
  /// Heartbeat period (each member bumps its counter this often).
  std::chrono::milliseconds heartbeat_interval = std::chrono::milliseconds(200);
  /// A member whose heartbeat has not advanced for this long is dead; a
  /// member that cannot reach the store for this long fences itself. Must be
  /// > 2 x heartbeat_interval.
  std::chrono::milliseconds failure_timeout = std::chrono::seconds(2);
  /// How often an abandoned-or-not wait looks at the failure flag.
  std::chrono::milliseconds wait_slice = std::chrono::milliseconds(20);
  /// Bound on forming the first generation and on a joiner's wait to be
  /// admitted.
  std::chrono::milliseconds start_timeout = std::chrono::minutes(5);
  /// Bound on forming a later generation's ProcessGroup (Gloo's connect
  /// cannot be interrupted: a failure during formation is seen after this).
  std::chrono::milliseconds form_timeout = std::chrono::seconds(30);
  /// Each generation's collective timeout (the backend's own deadline;
  /// failures are normally detected long before it by heartbeats).
  std::chrono::milliseconds collective_timeout = std::chrono::minutes(5);
  /// Abandoned generations kept alive (their groups, threads and tensors).
  /// One more abandonment throws FencedError ("too many abandoned groups:
  /// restart the job") so the process is restarted instead of leaking more.
  int max_abandoned_groups = 8;
  /// Seed of the per-(logical rank, step) dropout generators.
  uint64_t seed = 0;
  /// Called on the training thread for each RecoveryEvent; empty: nothing.
  /// The default logs nothing; RecoveryEvent::to_string() is the log line.
  std::function<void(const RecoveryEvent&)> on_event;

  /// Live recovery options from the worker's environment (what
  /// `dtrain run --recovery live` sets): WORLD_SIZE (initial_world_size and
  /// W0), RANK (initial_rank), MASTER_ADDR / MASTER_PORT (the store),
  /// TORCHELASTIC_USE_AGENT_STORE (not true: RANK 0 hosts the store),
  /// LOCAL_RANK (local_rank),
  /// DTRAIN_LIVE_MIN_WORKERS, DTRAIN_LIVE_JOIN=1 (a replacement),
  /// DTRAIN_LIVE_MEMBER (the id), DTRAIN_LIVE_KEY_PREFIX (key_prefix),
  /// DTRAIN_LIVE_LOGICAL_WORLD_SIZE (W0 when
  /// not WORLD_SIZE), DTRAIN_LIVE_FAILURE_TIMEOUT_MS,
  /// DTRAIN_LIVE_HEARTBEAT_MS. Throws InvalidArgument naming the variable
  /// for a malformed or missing value.
  static LiveOptions from_env(const EnvLookup& env);

  DTRAIN_SETTER(LiveOptions, member)
  DTRAIN_SETTER(LiveOptions, logical_world_size)
  DTRAIN_SETTER(LiveOptions, initial_world_size)
  DTRAIN_SETTER(LiveOptions, initial_rank)
  DTRAIN_SETTER(LiveOptions, min_workers)
  DTRAIN_SETTER(LiveOptions, join)
  DTRAIN_SETTER(LiveOptions, store_host)
  DTRAIN_SETTER(LiveOptions, store_port)
  DTRAIN_SETTER(LiveOptions, host_store)
  DTRAIN_SETTER(LiveOptions, key_prefix)
  DTRAIN_SETTER(LiveOptions, backend)
  DTRAIN_SETTER(LiveOptions, local_rank)
  DTRAIN_SETTER(LiveOptions, gloo_host)
  DTRAIN_SETTER(LiveOptions, heartbeat_interval)
  DTRAIN_SETTER(LiveOptions, failure_timeout)
  DTRAIN_SETTER(LiveOptions, wait_slice)
  DTRAIN_SETTER(LiveOptions, start_timeout)
  DTRAIN_SETTER(LiveOptions, form_timeout)
  DTRAIN_SETTER(LiveOptions, collective_timeout)
  DTRAIN_SETTER(LiveOptions, max_abandoned_groups)
  DTRAIN_SETTER(LiveOptions, seed)
  DTRAIN_SETTER(LiveOptions, on_event)
};

/// True when the environment asks for live recovery (DTRAIN_RECOVERY=live).
bool live_recovery_requested(const EnvLookup& env);

/// The logical ranks live member `index` of `live_world` runs:
/// {r in [0, logical_world) : r mod live_world == index}, ascending.
std::vector<int> logical_ranks_of(int index, int live_world, int logical_world);

/// The view of one step, valid until the next begin_step().
struct LiveStep {
  int64_t step = 0;                  ///< committed steps so far (this step's number)
  int64_t generation = 0;            ///< this step's generation
  ProcessGroup pg;                   ///< the generation's group (rank = index in members)
  int logical_world_size = 1;        ///< W0
  std::vector<int> logical_ranks;    ///< this member's, ascending
  std::vector<std::string> members;  ///< the generation's members, in rank order
  /// This member's DataParallel for the generation (wrap_ddp()); null
  /// otherwise.
  DataParallel* ddp = nullptr;
  /// This member received the state in this begin_step() (a joiner's first
  /// step).
  bool state_received = false;
};

/// A member of a live-recovery job. Not copyable. See the file comment.
class LiveGroup {
 public:
  /// Connects to options.store_host:store_port (hosting it first when
  /// host_store), starts the heartbeat thread and registers the member.
  /// Sets SIGPIPE to ignored when its action is the default, for good (Gloo
  /// writes to a vanished peer's socket; Note [SIGPIPE] in src/common/net.cpp).
  /// Throws InvalidArgument for inconsistent options, TimeoutError when the
  /// store is not reachable in start_timeout.
  explicit LiveGroup(LiveOptions options);
  /// Over a store of the caller's: `connect()` returns a new connection to
  /// it each time it is called (the heartbeat thread uses its own); a memory
  /// store may return itself (its calls do not block one another).
  LiveGroup(std::function<StorePtr()> connect, LiveOptions options);
  /// Stops the heartbeat thread and marks this member as having left (the
  /// others do not count it as a failure). Abandoned groups are leaked on
  /// purpose, never joined (Note [Abandoned groups]).
  ~LiveGroup();
  LiveGroup(const LiveGroup&) = delete;
  LiveGroup& operator=(const LiveGroup&) = delete;

  /// State sent to joiners (parameters and buffers; module.save/load).
  /// Register everything before the first begin_step(); the objects must
  /// outlive the LiveGroup.
  void register_module(torch::nn::Module& module);
  /// Optimizer state sent to joiners (Optimizer::save/load; parameters
  /// matched by position).
  void register_optimizer(torch::optim::Optimizer& optimizer);
  /// Extra state sent to joiners (loss scaler, sampler epoch, ...): `save`
  /// returns bytes on the sender, `load` receives them on a joiner.
  void register_state(const std::string& name, std::function<std::string()> save,
                      std::function<void(const std::string&)> load);
  /// Wraps `module` (registered or not) in a DataParallel per generation,
  /// with `options` except: broadcast_buffers is off (run_logical keeps
  /// DDP's buffer semantics per logical rank) and gradient_divisor is W0.
  void wrap_ddp(torch::nn::Module& module, DdpOptions options = {});

  /// Starts (or redoes) a step: forms a new generation when needed (losses
  /// seen, commit+join decided, or first call), transfers state to joiners,
  /// and keeps the module's buffers as the step's starting values. Throws
  /// FencedError, BelowMinWorkersError, JobEndedError (a joiner, after
  /// every member left), or TimeoutError when no generation forms within
  /// the bounds. Calling it again before should_commit()
  /// gives the current attempt up (an abort).
  const LiveStep& begin_step();

  /// Runs fn(logical_rank) for each of this member's logical ranks, in
  /// order: the forwards of all but the last inside the DataParallel's
  /// no_sync(), the default CPU generator (and, for a module on a GPU, that
  /// GPU's default generator) seeded from (seed, logical rank, step) and
  /// restored afterwards, the module's buffers reset to the
  /// step's starting values before each; then the buffers logical rank 0's
  /// forward produced are broadcast from live member 0 (which holds logical
  /// rank 0), DDP's semantics (Note [Logical ranks]). Collective. Returns
  /// false (and proposes abort at once) when a collective of this generation
  /// failed or was abandoned; other exceptions propagate. Without wrap_ddp()
  /// the caller reduces gradients itself (on LiveStep::pg, divided by W0).
  bool run_logical(const std::function<void(int logical_rank)>& fn);

  /// The commit agreement of this step: true when every member of the
  /// generation finished it (then take the optimizer step: step() advances);
  /// false when one failed (take no step; the next begin_step() redoes it).
  /// Blocks until the decision, at most until a failure is detected. Throws
  /// FencedError when this member is fenced.
  bool should_commit();
  /// Records a failure of this step seen by the caller (a DistError from
  /// its own collectives on LiveStep::pg) and proposes abort at once.
  void report_failure(const std::string& what);

  /// Committed steps so far.
  int64_t step() const;
  /// Sets the committed step counter (resuming from a checkpoint); before
  /// the first begin_step().
  void set_step(int64_t step);
  const std::string& member() const;
  const LiveOptions& options() const;
  /// Members declared dead so far (all generations), with their causes.
  std::vector<LostMember> lost_members() const;
  /// Where this member's training thread spent its time in the calls above
  /// (the steady-state cost of live recovery is protocol against wall).
  LiveStats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain
