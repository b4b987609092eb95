#pragma once
// One round's processes as the agent starts them (agent.cpp): each worker's
// torchrun environment, its log directory, error file and output logs; and,
// once the round ended, what each worker's error record says. Torch-free.

#include <optional>
#include <string>
#include <vector>

#include "common/error_file.h"
#include "dtrain/launch.h"
#include "launch/agent/worker_group.h"
#include "launch/rendezvous/rendezvous.h"

namespace dtrain::detail {

/// A fresh directory under $TMPDIR, removed with its contents on destruction:
/// where the workers' error files go when LaunchOptions::log_dir is unset.
/// Throws Error naming $TMPDIR when it cannot be created.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// The processes of one round, by local rank (then the scheduler and servers
/// of a parameter-server job).
struct RoundPlan {
  std::vector<WorkerSpec> specs;
  /// TORCHELASTIC_ERROR_FILE of each process, indexed like specs.
  std::vector<std::string> error_files;
};

/// The processes `options` (resolved) asks for in the round `info`: each runs
/// `program` with the torchrun variables of its rank over `base`, and writes
/// its error record under options.log_dir (or `error_root` without one) in
/// attempt_<attempt>/<local rank>/; a stale record there is removed. Creates
/// the directories; throws Error naming one that cannot be created.
RoundPlan plan_round(const LaunchOptions& options, const std::string& program,
                     const std::vector<std::string>& base, const RendezvousInfo& info, int attempt,
                     int restarts, const std::string& error_root);

/// Fills in where each worker ran (node rank and, with several nodes, its
/// address) and, for those that did not succeed by themselves, the message
/// of their error record; returns the records of the workers that did not
/// succeed, indexed like `exits` (which is indexed like plan.specs). A
/// record's whole-second timestamp (torchelastic's) is made precise by its
/// file's modification time (Note [Record times] in round_plan.cpp).
std::vector<std::optional<ErrorRecord>> read_round_records(std::vector<WorkerExit>& exits,
                                                           const RoundPlan& plan,
                                                           const RendezvousInfo& info);

}  // namespace dtrain::detail
