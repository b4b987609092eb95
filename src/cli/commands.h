#pragma once
// The dtrain subcommands. Each adds itself to the root CLI11 app; when it is
// selected and parsed, its callback runs the library and stores the process
// exit code in *exit_code (0 ok, 1 runtime failure, 2 usage error,
// 128+N terminated by signal N). The CLI is a thin layer: parse flags into
// options, call the library, map exceptions to exit codes.

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/comm.h"
#include "dtrain/kvstore.h"

namespace CLI {
class App;
}

namespace dtrain::cli {

void add_run_command(CLI::App& root, int* exit_code);       // cmd_run.cpp
void add_train_command(CLI::App& root, int* exit_code);     // cmd_train.cpp
void add_eval_command(CLI::App& root, int* exit_code);      // cmd_train.cpp
void add_data_command(CLI::App& root, int* exit_code);      // cmd_data.cpp
void add_bench_command(CLI::App& root, int* exit_code);     // cmd_bench.cpp
void add_models_command(CLI::App& root, int* exit_code);    // cmd_models.cpp
void add_ps_command(CLI::App& root, int* exit_code);        // cmd_ps.cpp
void add_timeline_command(CLI::App& root, int* exit_code);  // cmd_timeline.cpp
void add_store_command(CLI::App& root, int* exit_code);     // cmd_store.cpp

/// The failure path of a subcommand (main.cpp): prints
/// "<who>: error: <first line of e.what()>" to stderr, records `e` in
/// TORCHELASTIC_ERROR_FILE when the launcher set it (dtrain/elastic.h), and
/// returns `exit_code`: 1 for a runtime failure, 2 for a usage error.
int report_error(const std::string& who, const std::exception& e, int exit_code = 1);

/// report_error for a runtime failure whose message may name option fields:
/// they become the flags of `fields` (option_flags.h), and the error keeps
/// its dtrain type (DataError, TimeoutError, ...), which the error file
/// records for the launcher. Returns 1.
int report_runtime_error(const std::string& who, const std::exception& e,
                         const std::vector<std::pair<std::string, std::string>>& fields);

/// --kvstore's text as a type (empty: nullopt); an unknown name is
/// InvalidArgument "unknown --kvstore 'X'; valid types: ...". cmd_ps.cpp.
std::optional<KVStoreType> parse_kvstore_flag(const std::string& text);
/// --kvstore-optimizer's text; InvalidArgument naming the flag otherwise.
KVStoreOptimizer parse_kvstore_optimizer_flag(const std::string& text);

/// What `dtrain train|bench train` run on (open_training_route).
struct TrainingRoute {
  /// A parameter-server scheduler or server: its role has ended with the
  /// job, nothing else is set, and the command exits 0 (MXNet's contract).
  bool served = false;
  ProcessGroup pg;
  /// The store DDP's buckets go through (null without --kvstore).
  std::shared_ptr<KVStore> kv;
};

/// The one route of `dtrain train|bench train` (Note [One route] in
/// src/ps/job/route.cpp), run in every process of a job. With a `kvstore`
/// type the store is opened first (create_kvstore with `kv_options`): in a
/// scheduler or server (DMLC_ROLE) that serves the role until the job ends
/// and returns served. Then the group, given `init` resolved from the
/// environment (resolve_init_options): a launcher's (torchrun, dtrain run,
/// mpirun, srun) as init_process_group forms it; with none (env://), a
/// dist store's workers (an MXJob pod with only DMLC_*) form it from the
/// store (kv_process_group, dtrain/kvstore_torch.h); otherwise the
/// single-process group. Throws as those. cmd_ps.cpp.
TrainingRoute open_training_route(std::optional<KVStoreType> kvstore,
                                  const KVStoreOptions& kv_options, const InitOptions& init);

}  // namespace dtrain::cli
