#pragma once
// The differences between LibTorch 1.13 and 2.x that dtrain's sources meet,
// each as a small function or constant, so the rest is written once. The
// public part (DTRAIN_TORCH_VERSION, compat::CollectiveBackend) is
// dtrain/compat.h; the autocast calls are src/amp/autocast_compat.h and the
// CUDA allocator's statistics src/common/cuda_memory.h, because their
// LibTorch headers are heavy.

#include <sstream>
#include <string>
#include <type_traits>

#include "dtrain/compat.h"

namespace dtrain::compat {

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

/// ATen's kernels behind GradScaler (_amp_foreach_non_finite_check_and_unscale_,
/// _amp_update_scale_) exist for CUDA tensors in every version and for CPU
/// tensors from 2.3 on (pytorch/pytorch#109281); before that dtrain computes
/// the same arithmetic with plain tensor ops on the CPU (src/amp/grad_scaler.cpp).
constexpr bool kAmpKernelsOnCpu = DTRAIN_TORCH_VERSION >= 203;

}  // namespace dtrain::compat
