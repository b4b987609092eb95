// join_group() and --backend (group.h).
#include "cli/group.h"

#include <CLI/CLI.hpp>

#include "common/strings.h"
#include "dtrain/backend.h"
#include "dtrain/train.h"

namespace dtrain::cli {

void add_backend_flag(CLI::App* cmd, std::string& backend, const std::string& help) {
  cmd->add_option("--backend", backend,
                  !help.empty() ? help
                                : "Collective backend: " + join(backend_names(), ", ") +
                                      " (auto: nccl when the device is CUDA and this build has "
                                      "NCCL, else gloo)")
      ->capture_default_str();
}

InitOptions group_options(const std::string& backend, const std::string& device,
                          std::chrono::milliseconds timeout) {
  InitOptions init = resolve_init_options({}, process_env());
  // Before the group forms: the rank's GPU becomes the current device, and a
  // backend that cannot work is refused without keeping the peers waiting.
  init.backend = resolve_backend(backend, pick_device(device, init.local_rank));
  init.timeout = timeout;
  return init;
}

ProcessGroup join_group(const std::string& backend, const std::string& device,
                        std::chrono::milliseconds timeout) {
  InitOptions init = group_options(backend, device, timeout);
  return init.init_method == "env://" ? ProcessGroup() : init_process_group(init);
}

}  // namespace dtrain::cli
