#pragma once
// LaunchOptions (include/dtrain/launch.h) as the agent uses them: checked and
// resolved once, before anything starts. Torch-free.

#include "dtrain/launch.h"

namespace dtrain::detail {

struct RendezvousConfig;

/// Validates `options` and resolves the dependent defaults in one place:
/// standalone → a single static node on 127.0.0.1 at a free port; empty
/// run_id → generated (standalone) or "none"; backend names lowercased.
/// Throws InvalidArgument naming the option (by its dtrain run flag).
LaunchOptions resolve_launch_options(const LaunchOptions& options);

/// The rendezvous settings of resolved options (endpoint, MIN:MAX, node
/// rank, --rdzv-conf). Throws InvalidArgument for a bad --rdzv-conf.
RendezvousConfig rendezvous_config(const LaunchOptions& options);

}  // namespace dtrain::detail
