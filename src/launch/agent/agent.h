#pragma once
// The elastic agent behind dtrain::launch() (Note [Agent loop] in agent.cpp),
// over a chosen ProcessControl so tests can start workers their own way.

#include "dtrain/launch.h"
#include "launch/process/process.h"

namespace dtrain::detail {

/// dtrain::launch() starting workers through `control` (which must outlive
/// the call). Same contract as dtrain::launch().
LaunchResult launch(const LaunchOptions& options, ProcessControl& control);

}  // namespace dtrain::detail
