// join_group(), --backend and --device (group.h).
#include "cli/group.h"

#include <torch/cuda.h>
#include <CLI/CLI.hpp>

#include "common/strings.h"
#include "dtrain/backend.h"
#include "dtrain/device.h"
#include "dtrain/errors.h"

namespace dtrain::cli {

void add_backend_flag(CLI::App* cmd, std::string& backend, const std::string& help) {
  cmd->add_option("--backend", backend,
                  !help.empty() ? help
                                : "Collective backend: " + join(backend_names(), ", ") +
                                      " (auto: nccl when the device is CUDA, this build has NCCL "
                                      "and each process has a GPU of its own, else gloo)")
      ->capture_default_str();
}

void add_device_flag(CLI::App* cmd, std::string& device) {
  cmd->add_option("--device", device, "auto, cpu, cuda (cuda:<local rank>) or cuda:N")
      ->capture_default_str();
}

DeviceChoice parse_device_flag(const std::string& text) {
  try {
    return parse_device_choice(text);
  } catch (const InvalidArgument&) {
    throw InvalidArgument(cat("--device '", text, "' is not one of auto, cpu, cuda, cuda:N"));
  }
}

InitOptions group_options(const std::string& backend, const DeviceChoice& device,
                          std::chrono::milliseconds timeout) {
  InitOptions init = resolve_init_options({}, process_env());
  // Before the group forms: the rank's GPU becomes the current device, and a
  // backend that cannot work is refused without keeping the peers waiting.
  const at::Device dev = pick_device(device, init.local_rank);
  init.backend = resolve_backend(
      backend, dev,
      dev.is_cuda() ? ranks_per_gpu(init.local_world_size, torch::cuda::device_count()) : 1);
  init.timeout = timeout;
  return init;
}

std::string live_backend(const std::string& backend, const DeviceChoice& device) {
  const EnvLookup env = process_env();
  const auto read = [&](const char* name, int fallback) {
    long long v = 0;
    const auto text = env(name);
    return text && parse_int(*text, &v) ? static_cast<int>(v) : fallback;
  };
  const at::Device dev = pick_device(device, read("LOCAL_RANK", 0));
  return resolve_backend(
      backend, dev,
      dev.is_cuda() ? ranks_per_gpu(read("LOCAL_WORLD_SIZE", 1), torch::cuda::device_count()) : 1);
}

ProcessGroup join_group(const std::string& backend, const DeviceChoice& device,
                        std::chrono::milliseconds timeout) {
  InitOptions init = group_options(backend, device, timeout);
  return init.init_method == "env://" ? ProcessGroup() : init_process_group(init);
}

}  // namespace dtrain::cli
