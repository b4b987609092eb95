#pragma once
// LaunchOptions (include/dtrain/launch.h) as the agent uses them: checked and
// resolved once, before anything starts. Torch-free.

#include <optional>
#include <string>
#include <vector>

#include "dtrain/launch.h"

namespace dtrain::detail {

struct RendezvousConfig;

/// Validates `options` and resolves the dependent defaults in one place:
/// standalone → a single static node on 127.0.0.1 at a free port; empty
/// run_id → generated (standalone) or "none"; backend names lowercased;
/// command → program_command() (program_mode then kExec).
/// Throws InvalidArgument naming the option as LaunchOptions spells it
/// ("LaunchOptions::max_restarts"); `dtrain run` names its flag instead.
LaunchOptions resolve_launch_options(const LaunchOptions& options);

/// The rendezvous settings of resolved options (endpoint, MIN:MAX, node
/// rank, rdzv_conf, local_addr). Throws InvalidArgument for a bad
/// rdzv_conf, or a local_addr= in it that differs from local_addr.
RendezvousConfig rendezvous_config(const LaunchOptions& options);

/// Bits of torchrun's Std: which of a worker's streams a --redirects or
/// --tee value names.
constexpr int kStdOut = 1;
constexpr int kStdErr = 2;

/// The streams `spec` (LaunchOptions::redirects or tee, torchrun's syntax:
/// "0".."3", or "R:V,R:V" by local rank) names for `local_rank`: 0 to 3.
/// Throws InvalidArgument naming `field` ("LaunchOptions::redirects") and
/// the expected form when `spec` is malformed.
int std_streams_for(const std::string& spec, int local_rank, const std::string& field);

/// When redirects or tee name a stream and log_dir is unset: a fresh
/// directory $TMPDIR/dtrain-logs-XXXXXX (kept after the run, as torchrun's
/// is), else log_dir unchanged. Throws Error when it cannot be created.
std::optional<std::string> log_dir_for_streams(const LaunchOptions& options);

/// The command a worker runs for `options` (command, program_mode,
/// python): command itself for kExec, else the interpreter's command line
/// (torchrun's config_from_args and run_script_path). Throws
/// InvalidArgument when command is empty.
std::vector<std::string> program_command(const LaunchOptions& options);

}  // namespace dtrain::detail
