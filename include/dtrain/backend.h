#pragma once
// Choosing a process group's collective backend from where its tensors live:
// the rule behind --backend of `dtrain train`, `dtrain eval` and
// `dtrain bench`. InitOptions::backend (dtrain/comm.h) takes the result; it
// does not accept "auto" itself, because which backend fits depends on where
// the caller's tensors live, which only the caller knows.
//
/// Example:
/// ```
/// dtrain::ProcessGroup join(const std::string& requested, const at::Device& device) {
///   dtrain::InitOptions init = dtrain::resolve_init_options({}, dtrain::process_env());
///   init.backend = dtrain::resolve_backend(requested, device);  // "auto": nccl on a GPU
///   if (init.init_method == "env://") return dtrain::ProcessGroup();  // no launcher
///   return dtrain::init_process_group(init);
/// }
/// ```

#include <string>
#include <vector>

#include <c10/core/Device.h>

namespace dtrain {

/// The names resolve_backend() accepts: "auto", "gloo", "nccl".
std::vector<std::string> backend_names();

/// The one rule for choosing a collective backend, for ranks whose tensors
/// live on `device`, `ranks_per_device` of this node's ranks sharing it:
///   "auto"  "nccl" when `device` is CUDA, this build has NCCL
///           (DTRAIN_HAVE_NCCL) and each rank has a GPU of its own
///           (ranks_per_device 1), else "gloo" (a CUDA-less build never fails)
///   "gloo"  "gloo" on any device (CUDA tensors are staged through the host)
///   "nccl"  "nccl"; InvalidArgument naming InitOptions::backend gloo when this
///           build has no NCCL, `device` is not CUDA, or ranks share the GPU
///           (NCCL refuses two ranks of one communicator on one GPU)
/// Any other name: InvalidArgument listing backend_names(). Pure and
/// thread-safe: it touches no GPU.
std::string resolve_backend(const std::string& requested, const c10::Device& device,
                            int ranks_per_device = 1);

/// How many of a node's `local_world_size` ranks share each of its
/// `device_count` GPUs when local rank r takes GPU r % device_count (as
/// pick_device does): ceil(local_world_size / device_count), at least 1.
int ranks_per_gpu(int local_world_size, int device_count);

}  // namespace dtrain
