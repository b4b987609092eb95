#pragma once
// What a dtrain user meets of the difference between LibTorch 1.13 and 2.x:
// the version number dtrain was built against, and the type of the object
// that runs collectives (ProcessGroup::backend(), dtrain/comm.h). Everything
// else version-specific that dtrain's own sources need lives in private
// headers under src/ (src/common/torch_compat.h, src/common/cuda_memory.h,
// src/amp/autocast_compat.h), so this header has no switches.

#include <torch/version.h>

#define DTRAIN_TORCH_VERSION (TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR)

namespace c10d {
class ProcessGroup;
class Backend;
}  // namespace c10d

namespace dtrain::compat {

/// The object that runs collectives for one backend (Gloo, NCCL): in 1.13
/// ProcessGroupGloo derives from c10d::ProcessGroup, in 2.x from
/// c10d::Backend. Both expose allreduce/broadcast/allgather/barrier -> Work.
#if DTRAIN_TORCH_VERSION >= 200
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

}  // namespace dtrain::compat
