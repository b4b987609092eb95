#pragma once
// How a `dtrain train`, `dtrain eval` or `dtrain bench` worker joins its
// process group: the launcher's variables (env://), this rank's device, and
// the collective backend that follows from it (--backend, Note [Choosing the
// backend] in src/comm/process_group.cpp).

#include <chrono>
#include <string>

#include "dtrain/comm.h"
#include "dtrain/device.h"

namespace CLI {
class App;
}

namespace dtrain::cli {

/// Adds `--backend auto|gloo|nccl` (default "auto": NCCL when the rank's
/// device is CUDA and the build has NCCL, else Gloo), stored in `backend`.
/// `help` replaces the description where a command allows less (bench ddp).
void add_backend_flag(CLI::App* cmd, std::string& backend, const std::string& help = "");

/// Adds `--device auto|cpu|cuda|cuda:N` (default "auto"), stored as text in
/// `device` for parse_device_flag.
void add_device_flag(CLI::App* cmd, std::string& device);

/// The DeviceChoice --device names (parse_device_choice, dtrain/device.h);
/// InvalidArgument naming --device otherwise ("--device 'tpu' is not one of
/// auto, cpu, cuda, cuda:N").
DeviceChoice parse_device_flag(const std::string& text);

/// Resolves env:// (resolve_init_options), picks this rank's device from
/// `device` (pick_device, dtrain/device.h: a CUDA device becomes the current
/// one) and the backend from `backend` and that device (resolve_backend,
/// dtrain/backend.h), then forms the
/// group with `timeout` per collective; without a launcher's variables the
/// single-process group. Bad names throw InvalidArgument before any peer is
/// contacted, also without a launcher. Blocks until every rank joined (the
/// store timeout bounds it).
ProcessGroup join_group(const std::string& backend, const DeviceChoice& device,
                        std::chrono::milliseconds timeout = InitOptions{}.timeout);

/// What join_group forms the group with (the same steps, without forming
/// it): for callers that form it another way, e.g. join_training_group
/// (commands.h) in an MXJob pod.
InitOptions group_options(const std::string& backend, const DeviceChoice& device,
                          std::chrono::milliseconds timeout = InitOptions{}.timeout);

/// The backend each generation of a live group uses (LiveOptions::backend,
/// `dtrain train` under `dtrain run --recovery live`): as group_options
/// picks it, from LOCAL_RANK and LOCAL_WORLD_SIZE alone (a joiner has no
/// RANK yet); makes this rank's GPU the current device.
std::string live_backend(const std::string& backend, const DeviceChoice& device);

}  // namespace dtrain::cli
