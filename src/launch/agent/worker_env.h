#pragma once
// What each process of a round gets in its environment: torchrun's variables
// (shared/CONTRACTS.md) and, in a parameter-server job, MXNet's DMLC_* ones.
// Pure functions over "KEY=VALUE" lists, apart from current_environment() and
// pick_free_port(). Torch-free.

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::detail {

/// execvp's search path when PATH is unset.
constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";

/// Where one worker stands in the job (torchrun's names).
struct WorkerIdentity {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;
  int group_world_size = 1;
  int restart_count = 0;
  int max_restarts = 0;
  std::string role = "default";
};

/// The store and run the workers join.
struct JobInfo {
  std::string master_addr;
  int master_port = 0;
  std::string run_id;
};

/// The value of `key` in "KEY=VALUE" entries, if present.
std::optional<std::string> env_value(const std::vector<std::string>& env, const std::string& key);

/// True when workers get OMP_NUM_THREADS=1: more than one local worker and the
/// user's environment does not set it.
bool sets_omp_num_threads(const std::vector<std::string>& base, int local_world_size);

/// `base` with the torchrun variables for `worker` set (replacing entries with
/// the same names): RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
/// GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME,
/// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
/// TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID,
/// TORCHELASTIC_USE_AGENT_STORE=True, and OMP_NUM_THREADS per
/// sets_omp_num_threads.
std::vector<std::string> worker_environment(const std::vector<std::string>& base,
                                            const WorkerIdentity& worker, const JobInfo& job);

/// Live recovery's variables (LaunchOptions::Recovery::kLive), read by
/// dtrain/live.h's LiveOptions::from_env: DTRAIN_RECOVERY=live,
/// DTRAIN_LIVE_MIN_WORKERS, DTRAIN_LIVE_MEMBER=`member` and DTRAIN_LIVE_JOIN
/// ("1": a replacement joining a running job; "0": a worker of the job's
/// start), DTRAIN_LIVE_KEY_PREFIX=`key_prefix` when it is not empty (the
/// workers share the rendezvous store: RendezvousInfo::worker_key_prefix),
/// and TORCH_NCCL_ASYNC_ERROR_HANDLING=0 unless `base` sets it (so that
/// NCCL's watchdog does not end a survivor when a peer dies).
constexpr const char* kLiveJoin = "DTRAIN_LIVE_JOIN";
std::vector<std::string> live_environment(const std::vector<std::string>& base, int min_workers,
                                          const std::string& member, bool join,
                                          const std::string& key_prefix = "");

/// The live-recovery member id of the worker of global rank `rank` on this
/// host: "rank<R>@<hostname>" (the library's log lines and errors name
/// members by it, so they say which rank on which host was lost).
std::string live_member_id(int rank);

/// Where the nodes of a parameter-server job (LaunchOptions::ps_servers)
/// meet: the scheduler's port on 127.0.0.1 and the job's size, num_workers
/// counting processes or nodes (LaunchOptions::ps_worker_per).
struct PsJob {
  int scheduler_port = 0;
  int num_servers = 0;
  int num_workers = 0;
};

/// `base` with MXNet's variables for one node of `job` set (replacing
/// entries with the same names): DMLC_ROLE=`role` ("scheduler", "server" or
/// "worker"), DMLC_PS_ROOT_URI=127.0.0.1, DMLC_PS_ROOT_PORT,
/// DMLC_NUM_SERVER, DMLC_NUM_WORKER, and for a worker DMLC_WORKER_ID=`rank`
/// (its process's rank, or its node's with LaunchOptions::PsWorkerPer::kNode).
std::vector<std::string> ps_environment(const std::vector<std::string>& base, const PsJob& job,
                                        const std::string& role, int rank);

/// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, then
/// close). Throws Error when no socket can be bound.
int pick_free_port();

/// This process's environment as "KEY=VALUE" entries.
std::vector<std::string> current_environment();

/// `base` with `vars` set: entries with the same names are replaced.
std::vector<std::string> set_variables(const std::vector<std::string>& base,
                                       const std::map<std::string, std::string>& vars);

}  // namespace dtrain::detail
