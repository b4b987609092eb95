#pragma once
// The dtrain subcommands. Each adds itself to the root CLI11 app; when it is
// selected and parsed, its callback runs the library and stores the process
// exit code in *exit_code (0 ok, 1 runtime failure, 2 usage error,
// 128+N terminated by signal N). The CLI is a thin layer: parse flags into
// options, call the library, map exceptions to exit codes.

#include <exception>
#include <memory>
#include <string>

namespace CLI {
class App;
}

namespace dtrain {
class KVStore;
class ProcessGroup;
struct InitOptions;
struct KVStoreOptions;
}  // namespace dtrain

namespace dtrain::cli {

void add_run_command(CLI::App& root, int* exit_code);       // cmd_run.cpp
void add_train_command(CLI::App& root, int* exit_code);     // cmd_train.cpp
void add_eval_command(CLI::App& root, int* exit_code);      // cmd_train.cpp
void add_data_command(CLI::App& root, int* exit_code);      // cmd_data.cpp
void add_bench_command(CLI::App& root, int* exit_code);     // cmd_bench.cpp
void add_models_command(CLI::App& root, int* exit_code);    // cmd_models.cpp
void add_ps_command(CLI::App& root, int* exit_code);        // cmd_ps.cpp
void add_timeline_command(CLI::App& root, int* exit_code);  // cmd_timeline.cpp

/// The failure path of a subcommand (main.cpp): prints
/// "<who>: error: <first line of e.what()>" to stderr, records `e` in
/// TORCHELASTIC_ERROR_FILE when the launcher set it (dtrain/elastic.h), and
/// returns `exit_code`: 1 for a runtime failure, 2 for a usage error.
int report_error(const std::string& who, const std::exception& e, int exit_code = 1);

/// `dtrain train|bench train --kvstore dist_*` run in every process of an
/// MXNet job (MXNet's contract): with DMLC_ROLE=scheduler or server this
/// serves that role until the job ends and returns true (the command then
/// exits 0); otherwise (a worker, no DMLC_ROLE, no dist store) returns false
/// at once. Throws as serve_ps_role() (dtrain/kvstore.h). cmd_ps.cpp.
bool serve_kvstore_role(const std::string& kvstore);

/// The group `dtrain train|bench train` runs over, given `init` resolved from
/// the environment (resolve_init_options): a launcher's (torchrun, dtrain
/// run, mpirun, srun) as init_process_group forms it; with none (env://), a
/// worker of a dist `kvstore` (DMLC_ROLE=worker, e.g. an MXJob pod with only
/// DMLC_*) opens the store with `kv_options` into *kv and forms the workers'
/// group from it (kv_process_group, dtrain/kvstore_torch.h); otherwise the
/// single-process group. Throws as those. cmd_ps.cpp.
ProcessGroup join_training_group(const std::string& kvstore, const KVStoreOptions& kv_options,
                                 const InitOptions& init, std::shared_ptr<KVStore>* kv);

}  // namespace dtrain::cli
