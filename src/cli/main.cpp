// dtrain: distributed data-parallel training for LibTorch.
//
//   dtrain run   --nproc-per-node N -- PROGRAM ARGS...   launch workers (torchrun-compatible)
//   dtrain train --model cnn --dataset fashion-mnist     the batteries-included trainer
//   dtrain eval  --model cnn --checkpoint DIR ...        evaluate a trained model
//   dtrain data  ...                                     dataset preparation
//   dtrain bench ...                                     benchmarks
//   dtrain models                                        the model zoo
//   dtrain ps    scheduler|server                        parameter-server roles (DMLC_*)
//   dtrain timeline merge RANK0.json ... -o all.json      join per-rank timelines
//   dtrain store --port 29400                            a standalone c10d store (off the workers)
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/option_flags.h"
#include "common/strings.h"
#include "dtrain/elastic.h"
#include "dtrain/errors.h"
#include "dtrain/version.h"

namespace dtrain::cli {

// `dtrain --version`: dtrain's version, then what this build was built with
// (the generated version.h), so a bug report names the LibTorch in use.
std::string version_text() {
  std::string text =
      "dtrain " DTRAIN_VERSION "\nLibTorch " DTRAIN_LIBTORCH_VERSION " (" DTRAIN_TORCH_ORIGIN ")";
  const std::string cuda = DTRAIN_CUDA_VERSION;
  const std::string nccl = DTRAIN_NCCL_VERSION;
  text += cuda.empty() ? "\nCUDA: none (CPU build)" : "\nCUDA " + cuda;
  if (!nccl.empty()) {
    text += "\nNCCL " + nccl;
  }
  return text;
}

int report_error(const std::string& who, const std::exception& e, int exit_code) {
  std::cerr << who << ": error: " << first_line(e.what()) << std::endl;
  // Under a launcher this is how it learns why we failed (torchrun's @record);
  // without TORCHELASTIC_ERROR_FILE it does nothing.
  record_error(e);
  return exit_code;
}

// The message with flags for fields, in an error of the same dtrain type
// (most derived first), so that a DataError stays one in the error file.
int report_runtime_error(const std::string& who, const std::exception& e,
                         const std::vector<std::pair<std::string, std::string>>& fields) {
  const std::string m = name_flags(e.what(), fields);
  if (m == e.what()) return report_error(who, e);
  if (dynamic_cast<const DataError*>(&e)) return report_error(who, DataError(m));
  if (dynamic_cast<const TimeoutError*>(&e)) return report_error(who, TimeoutError(m));
  if (dynamic_cast<const PeerLostError*>(&e)) return report_error(who, PeerLostError(m));
  if (dynamic_cast<const StoreError*>(&e)) return report_error(who, StoreError(m));
  if (dynamic_cast<const DistError*>(&e)) return report_error(who, DistError(m));
  return report_error(who, Error(m));
}

}  // namespace dtrain::cli

int main(int argc, char** argv) {
  CLI::App app{"dtrain: distributed data-parallel training for LibTorch", "dtrain"};
  app.require_subcommand(1);
  app.set_version_flag("--version", dtrain::cli::version_text());
  int exit_code = 0;
  dtrain::cli::add_run_command(app, &exit_code);
  dtrain::cli::add_train_command(app, &exit_code);
  dtrain::cli::add_eval_command(app, &exit_code);
  dtrain::cli::add_data_command(app, &exit_code);
  dtrain::cli::add_bench_command(app, &exit_code);
  dtrain::cli::add_models_command(app, &exit_code);
  dtrain::cli::add_ps_command(app, &exit_code);
  dtrain::cli::add_timeline_command(app, &exit_code);
  dtrain::cli::add_store_command(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2 (CLI11's own codes are folded into it); --help and
    // --version exit 0.
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    // A subcommand maps its own errors; whatever escapes one is a runtime
    // failure too, reported and recorded rather than aborting the process.
    return dtrain::cli::report_error("dtrain", e);
  }
  return exit_code;
}
