#pragma once
// Parameter-server training for the Trainer (TrainOptions::kvstore): the
// store, DDP's comm hook through it, and where the optimizer runs. The
// Trainer calls open() in wrap(), step() in place of its optimizer step when
// the servers update, and close() after the last epoch.

#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include <torch/nn/module.h>

#include "dtrain/comm.h"
#include "dtrain/kvstore_ddp.h"
#include "dtrain/train.h"

namespace dtrain::detail {

/// Checks TrainOptions::kvstore and kvstore_optimizer (validate() calls it):
/// throws InvalidArgument naming the flag that server-side updates cannot
/// honour (the types themselves are parsed once, parse_kvstore_type).
void validate_kvstore(const TrainOptions& o);

/// Where the optimizer runs for `o` ("auto" resolved).
KVUpdate kvstore_update(const TrainOptions& o);

class KvSync {
 public:
  /// Uses `kv`, the open store of type `*o.kvstore` (null result without
  /// o.kvstore), as one of pg's workers and, when the servers update, sets
  /// their SGD with learning rate `lr`. Throws InvalidArgument when `kv` is
  /// missing, of another type, passed without o.kvstore, or when the job's
  /// workers are not pg's ranks.
  static std::unique_ptr<KvSync> open(const TrainOptions& o, std::shared_ptr<KVStore> kv,
                                      const ProcessGroup& pg, torch::nn::Module& model, double lr);

  std::shared_ptr<CommHook> hook() const { return hook_; }
  bool updates_on_servers() const { return hook_->update() == KVUpdate::kOnServers; }
  /// The servers' step: their weights into the model (kOnServers).
  void step() { hook_->apply_pulled_weights(); }
  /// For rank 0's checkpoint: the servers' optimizer state when they update
  /// (KVStoreCommHook::pull_server_state; Note [Keys and resume]), else
  /// nullopt. Not collective; between steps.
  std::optional<ServerOptimizerState> save_state();
  /// On resume, right after open() (collective: every worker calls it): when
  /// the servers update, `leader` pushes `state` back to them and all meet
  /// in a barrier; without a state, a line in `log` (when not null) says the
  /// momentum restarts from zero. Throws DataError naming `origin` when the
  /// state does not fit the model.
  void restore_state(const std::optional<ServerOptimizerState>& state, const std::string& origin,
                     bool leader, std::ostream* log);
  /// Leaves the job (KVStore::close): waits until every node has finished.
  void close() { hook_->store().close(); }
  /// "kvstore dist_sync (N workers), optimizer on the workers", for the log.
  std::string describe() const;

 private:
  std::shared_ptr<KVStoreCommHook> hook_;
};

}  // namespace dtrain::detail
