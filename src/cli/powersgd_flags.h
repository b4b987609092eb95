#pragma once
// --comm-hook and the --powersgd-* flags, shared by `dtrain train` and
// `dtrain bench ddp`.

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "dtrain/powersgd.h"

namespace dtrain::cli {

struct CommHookFlags {
  std::string name = "none";
  PowerSGDOptions powersgd;
  bool no_error_feedback = false;
  bool no_warm_start = false;
  std::vector<CLI::Option*> powersgd_flags;  // to tell which were given
};

/// Adds --comm-hook (none, fp16, bf16, powersgd, noop: no communication, for
/// measurement only) and the PowerSGD options.
void add_comm_hook_flags(CLI::App* cmd, CommHookFlags* f);

/// The PowerSGD options the flags give (checked as below).
PowerSGDOptions powersgd_options_from_flags(const CommHookFlags& f);

/// The hook the flags ask for. Throws InvalidArgument naming the flag and
/// the fix when a --powersgd-* flag is given without --comm-hook powersgd,
/// or an option is invalid (--powersgd-rank 0, ...).
std::shared_ptr<CommHook> comm_hook_from_flags(const CommHookFlags& f, std::ostream* log);

}  // namespace dtrain::cli
