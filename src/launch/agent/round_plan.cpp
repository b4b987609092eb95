#include "launch/agent/round_plan.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>
#include <utility>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "launch/agent/worker_env.h"
#include "launch/launch_options.h"

namespace dtrain::detail {
namespace {

namespace fs = std::filesystem;

/// <root>/<run_id>/attempt_<n>/<name>, created; name is the local rank, or
/// "scheduler" / "server<r>" in a parameter-server job.
std::string attempt_dir(const std::string& root, const std::string& run_id, int attempt,
                        const std::string& name) {
  fs::path dir = fs::path(root) / run_id / cat("attempt_", attempt) / name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(cat("cannot create the log directory '", dir.string(), "': ", ec.message()));
  return dir.string();
}

/// Adds one process to `plan`: its log directory, error file and output logs.
void add_spec(RoundPlan& plan, WorkerSpec spec, const LaunchOptions& o, int attempt,
              const std::string& error_root, const std::string& dir_name) {
  const std::string dir =
      attempt_dir(o.log_dir.value_or(error_root), o.log_dir ? o.run_id : "", attempt, dir_name);
  const std::string error_file = dir + "/error.json";
  std::error_code ec;
  fs::remove(error_file, ec);  // a stale record must not be taken for this round's
  spec.process.env.push_back(cat("TORCHELASTIC_ERROR_FILE=", error_file));
  if (o.log_dir) {
    spec.stdout_log = dir + "/stdout.log";
    spec.stderr_log = dir + "/stderr.log";
  }
  spec.error_file = error_file;
  plan.error_files.push_back(error_file);
  plan.specs.push_back(std::move(spec));
}

// Note [Record times]
// torchelastic's @record stamps whole seconds (int(time.time())); dtrain's own
// records carry fractions. Against the agent's reap times (WorkerExit::
// ended_at, Note [Choosing the root cause] in round_decision.cpp) a whole
// second puts a record up to a second early: a crash's consequence would look
// earlier than the crash. The file's modification time, set as the record is
// written, says when within that second; it is taken only when it lies in
// that second (a file copied or touched later keeps its stamp).
double record_time(const std::string& path, double timestamp) {
  if (timestamp != std::floor(timestamp)) return timestamp;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return timestamp;
  const double mtime = static_cast<double>(st.st_mtim.tv_sec) + 1e-9 * st.st_mtim.tv_nsec;
  return mtime >= timestamp && mtime < timestamp + 1 ? mtime : timestamp;
}

}  // namespace

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "dtrain-run-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) {
    throw Error(cat("cannot create a temporary directory for the workers' error files under ",
                    fs::temp_directory_path().string(), ": set TMPDIR or LaunchOptions::log_dir"));
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

// Note [Parameter-server job]
// With ps_servers > 0 a round also runs MXNet's scheduler and servers, as
// `tools/launch.py --launcher local` does: the same command in every process,
// told its role by DMLC_ROLE. They join the worker group after the workers
// (so exits[i] is still local rank i for the workers) and are supervised
// exactly like them: one failure stops everyone and is the root cause; a
// restart restarts the whole job on a fresh scheduler port (the servers'
// state is not kept across rounds: workers init their keys again). With
// DMLC_PS_SNAPSHOT_DIR set, a server that dies is first restarted alone, up
// to kPsServerRestarts times, and the job goes on (docs/ps.md).
//
// What a ps worker is (LaunchOptions::ps_worker_per) decides only the
// DMLC_NUM_WORKER every role gets and the workers' DMLC_WORKER_ID: with
// kProcess every process is one (WORLD_SIZE, RANK), with kNode the node is
// one (the number of nodes, GROUP_RANK), as dist_device_sync needs: its
// local rank 0 alone registers with the scheduler (Note [Device sync]), so
// a scheduler counting processes would wait for workers that never come.
// The torchrun variables stay those of every process either way: the
// node's processes still form their c10d groups over the launcher's store.
constexpr int kPsServerRestarts = 3;

RoundPlan plan_round(const LaunchOptions& o, const std::string& program,
                     const std::vector<std::string>& base, const RendezvousInfo& info, int attempt,
                     int restarts, const std::string& error_root) {
  RoundPlan plan;
  JobInfo job{info.master_addr, info.master_port, o.run_id};
  const bool worker_per_node = o.ps_worker_per == LaunchOptions::PsWorkerPer::kNode;
  PsJob ps{0, o.ps_servers, worker_per_node ? info.num_nodes : info.world_size()};
  if (o.ps_servers > 0) ps.scheduler_port = pick_free_port();
  for (int local_rank = 0; local_rank < o.nproc_per_node; ++local_rank) {
    WorkerIdentity who;
    who.local_rank = local_rank;
    who.rank = info.base_rank() + local_rank;
    who.world_size = info.world_size();
    who.local_world_size = o.nproc_per_node;
    who.group_rank = info.node_rank;
    who.group_world_size = info.num_nodes;
    who.restart_count = restarts;
    who.max_restarts = o.max_restarts;
    who.role = o.role;
    WorkerSpec spec;
    spec.rank = who.rank;
    spec.local_rank = local_rank;
    spec.process.path = program;
    spec.process.argv = o.command;
    spec.process.env = worker_environment(base, who, job);
    // torchrun --redirects: those streams go to the log files only.
    const int redirected = std_streams_for(o.redirects, local_rank, "LaunchOptions::redirects");
    spec.relay_stdout = (redirected & kStdOut) == 0;
    spec.relay_stderr = (redirected & kStdErr) == 0;
    if (o.recovery == LaunchOptions::Recovery::kLive) {
      // Note [Live supervision] (worker_group.cpp).
      spec.live_member = live_member_id(who.rank);
      // A late node's workers join the running job (Note [Late nodes] in
      // src/launch/rendezvous/protocol_rounds.cpp).
      spec.process.env = live_environment(spec.process.env, o.live_min_workers, spec.live_member,
                                          info.late > 0, info.worker_key_prefix);
      spec.restart_env = {{kLiveJoin, "1"}};
    }
    if (o.ps_servers > 0) {
      const int ps_worker_id = worker_per_node ? info.node_rank : who.rank;
      spec.process.env = ps_environment(spec.process.env, ps, "worker", ps_worker_id);
    }
    add_spec(plan, std::move(spec), o, attempt, error_root, std::to_string(local_rank));
  }
  for (int r = -1; r < o.ps_servers && o.ps_servers > 0; ++r) {
    WorkerSpec spec;
    spec.role = r < 0 ? "scheduler" : "server";
    spec.rank = std::max(r, 0);
    spec.local_rank = -1;
    spec.process.path = program;
    spec.process.argv = o.command;
    spec.process.env = ps_environment(base, ps, spec.role, spec.rank);
    // Note [Restarting a server] (worker_group.cpp).
    if (r >= 0 && env_value(base, "DMLC_PS_SNAPSHOT_DIR").value_or("") != "") {
      spec.restarts_alone = kPsServerRestarts;
    }
    const std::string name = r < 0 ? spec.role : cat(spec.role, r);
    add_spec(plan, std::move(spec), o, attempt, error_root, name);
  }
  return plan;
}

std::vector<std::optional<ErrorRecord>> read_round_records(std::vector<WorkerExit>& exits,
                                                           const RoundPlan& plan,
                                                           const RendezvousInfo& info) {
  std::vector<std::optional<ErrorRecord>> records(exits.size());
  for (size_t i = 0; i < exits.size(); ++i) {
    exits[i].node_rank = info.node_rank;
    if (info.num_nodes > 1 && static_cast<size_t>(info.node_rank) < info.node_addrs.size()) {
      exits[i].node_addr = info.node_addrs[static_cast<size_t>(info.node_rank)];
    }
    if (exits[i].succeeded()) continue;
    records[i] = read_error_file(plan.error_files[i]);
    if (records[i]) records[i]->timestamp = record_time(plan.error_files[i], records[i]->timestamp);
    if (records[i] && !exits[i].stopped) exits[i].error_message = records[i]->message;
  }
  return records;
}

}  // namespace dtrain::detail
