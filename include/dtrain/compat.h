#pragma once
// The one place where LibTorch 1.13 and 2.x differ for dtrain. Everything
// version-specific is expressed here as a small function or alias, so the rest
// of the code is written once.

#include <sstream>
#include <string>
#include <type_traits>

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

/// 2.4+ TCPStore defaults to the libuv backend, which Debian's 2.6 build
/// lacks; dtrain always asks for the classic backend.
template <typename TcpStoreOptions>
void disable_libuv(TcpStoreOptions& options) {
#if DTRAIN_TORCH_VERSION >= 204
  options.useLibUV = false;
#else
  (void)options;
#endif
}

/// Gloo allreduces bfloat16 tensors from 2.0 on; 1.13 rejects them
/// ("Invalid scalar type"), so the bf16 comm hook gathers instead there.
constexpr bool kGlooAllreducesBFloat16 = DTRAIN_TORCH_VERSION >= 200;

/// The key of a parameter in torch::optim::Optimizer::state(): 1.13 uses the
/// parameter's TensorImpl address printed as a string (c10::guts::to_string),
/// 2.x the address itself (void*). `StateMap` is the type of state(), so the
/// right form is chosen whichever version made the switch:
///   auto key = compat::optimizer_state_key<
///       std::decay_t<decltype(opt.state())>>(p.unsafeGetTensorImpl());
template <typename StateMap>
typename StateMap::key_type optimizer_state_key(const void* tensor_impl) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << tensor_impl;
    return s.str();
  } else {
    return const_cast<void*>(tensor_impl);
  }
}

}  // namespace dtrain::compat
