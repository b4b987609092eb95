// dtrain run: torchrun's single-node command line over dtrain::launch().
//
//   dtrain run --nproc-per-node 2 [--standalone] [--master-addr A] [--master-port P]
//              [--log-dir DIR] [--rdzv-id ID] [--monitor-interval S] -- PROGRAM [ARGS...]
//
// torchrun's spellings are accepted (--nproc_per_node, --master_port, ...), as
// are the PET_* environment variables Kubeflow sets. The program may also
// follow the flags without '--'; everything from it on is passed through.

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/launch.h"

namespace dtrain::cli {
namespace {

struct RunFlags {
  LaunchOptions options;
  std::string nnodes = "1";
  double monitor_interval_s = 0.1;
  std::string log_dir;
  /// Never filled: declared so that CLI11 keeps "--" and what follows for
  /// remaining() instead of handing it back to the root app (see below).
  std::vector<std::string> program;
};

/// CLI11 check: a whole number of at least `min`.
CLI::Validator at_least(long long min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        long long v = 0;
        if (!parse_int(text, &v) || v < min)
          return cat("must be a whole number >= ", min, ", got '", text, "'");
        return "";
      },
      min == 1 ? std::string("POSITIVE") : cat(">=", min));
}

/// The worker command from what CLI11 left over: everything after "--", or
/// everything from the first positional on. A leading "-x" is an unknown flag.
std::vector<std::string> worker_command(std::vector<std::string> rest) {
  if (!rest.empty() && rest.front() == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && !rest.front().empty() && rest.front()[0] == '-') {
    throw CLI::ExtrasError({rest.front()});
  }
  if (rest.empty()) throw CLI::RequiredError("PROGRAM (the worker command, after '--')");
  return rest;
}

void check_single_node(const std::string& nnodes) {
  if (nnodes != "1" && nnodes != "1:1") {
    throw CLI::ValidationError(
        "--nnodes", cat("'", nnodes, "': only single-node runs are supported yet; use --nnodes 1"));
  }
}

int run_launcher(const LaunchOptions& options) {
  try {
    LaunchResult result = launch(options);
    for (const auto& line : result.summary()) std::cerr << "dtrain run: " << line << "\n";
    return result.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "dtrain run: error: " << first_line(e.what()) << "\n";
    return 1;
  }
}

}  // namespace

void add_run_command(CLI::App& root, int* exit_code) {
  auto flags = std::make_shared<RunFlags>();
  LaunchOptions& o = flags->options;
  CLI::App* cmd = root.add_subcommand(
      "run", "Start worker processes with the torchrun environment and watch them (torchrun)");
  cmd->add_option("--nproc-per-node,--nproc_per_node", o.nproc_per_node,
                  "Worker processes on this node")
      ->check(at_least(1))
      ->envname("PET_NPROC_PER_NODE")
      ->capture_default_str();
  cmd->add_option("--nnodes", flags->nnodes, "Nodes (only 1 for now)")
      ->envname("PET_NNODES")
      ->capture_default_str();
  cmd->add_flag("--standalone", o.standalone,
                "Host the store on 127.0.0.1 at a free port with a generated run id")
      ->envname("PET_STANDALONE");
  cmd->add_option("--master-addr,--master_addr", o.master_addr,
                  "Address workers reach the store at (MASTER_ADDR)")
      ->envname("PET_MASTER_ADDR")
      ->capture_default_str();
  cmd->add_option("--master-port,--master_port", o.master_port,
                  "Port to host the store on (MASTER_PORT); 0 picks a free one")
      ->check(CLI::Range(0, 65535))
      ->envname("PET_MASTER_PORT")
      ->capture_default_str();
  cmd->add_option("--rdzv-id,--rdzv_id,--run-id", o.run_id,
                  "Run id (TORCHELASTIC_RUN_ID); default 'none', generated with --standalone")
      ->envname("PET_RDZV_ID");
  cmd->add_option("--monitor-interval,--monitor_interval", flags->monitor_interval_s,
                  "Seconds between checks of the workers")
      ->check(non_negative())
      ->envname("PET_MONITOR_INTERVAL")
      ->capture_default_str();
  cmd->add_option("--log-dir,--log_dir", flags->log_dir,
                  "Also write each worker's output to DIR/<run id>/attempt_0/<local rank>/")
      ->envname("PET_LOG_DIR");
  // CLI11 (2.1) hands "--" back to the parent app unless a positional is still
  // open; this one rejects every value, so it never consumes an argument and
  // prefix_command() leaves "--" and the program in remaining().
  cmd->add_option("PROGRAM", flags->program, "The worker program and its arguments")
      ->expected(1)
      ->check(CLI::Validator([](std::string&) { return std::string("passed through"); }, "", ""));
  cmd->validate_positionals();
  cmd->prefix_command();

  cmd->callback([cmd, flags, exit_code] {
    check_single_node(flags->nnodes);
    LaunchOptions options = flags->options;
    options.command = worker_command(cmd->remaining());
    options.monitor_interval =
        std::chrono::milliseconds(static_cast<long long>(flags->monitor_interval_s * 1000));
    if (!flags->log_dir.empty()) options.log_dir = flags->log_dir;
    *exit_code = run_launcher(options);
  });
}

}  // namespace dtrain::cli
