// The one place where LibTorch 1.13 and 2.x differ for dtrain. Everything
// version-specific is expressed here as a small function or alias, so the rest
// of the code is written once.
//
// Classic include guards instead of #pragma once: the autocast section at the
// end needs <ATen/autocast_mode.h> (which parses ATen's operator headers), so
// it is compiled only where DTRAIN_COMPAT_AUTOCAST is defined before this
// header is included (src/amp), even when the rest was included earlier; the
// CUDA allocator section likewise needs DTRAIN_COMPAT_CUDA_MEMORY (src/train).
#ifndef DTRAIN_COMPAT_H_
#define DTRAIN_COMPAT_H_

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

/// ATen's kernels behind GradScaler (_amp_foreach_non_finite_check_and_unscale_,
/// _amp_update_scale_) exist for CUDA tensors in every version and for CPU
/// tensors from 2.3 on (pytorch/pytorch#109281); before that dtrain computes
/// the same arithmetic with plain tensor ops on the CPU (src/amp/grad_scaler.cpp).
constexpr bool kAmpKernelsOnCpu = DTRAIN_TORCH_VERSION >= 203;

}  // namespace dtrain::compat

#endif  // DTRAIN_COMPAT_H_

#if defined(DTRAIN_COMPAT_AUTOCAST) && !defined(DTRAIN_COMPAT_AUTOCAST_H_)
#define DTRAIN_COMPAT_AUTOCAST_H_
#include <ATen/autocast_mode.h>

namespace dtrain::compat {

/// Autocast's per-thread state for one device type (CPU or CUDA). LibTorch
/// 2.4 replaced set_enabled / set_cpu_enabled / set_autocast_gpu_dtype /
/// set_autocast_cpu_dtype (and their getters) by set_autocast_enabled(device
/// type, ...) and set_autocast_dtype(device type, ...); the old names are
/// deprecated there.
inline bool autocast_enabled(c10::DeviceType device_type) {
#if DTRAIN_TORCH_VERSION >= 204
  return at::autocast::is_autocast_enabled(device_type);
#else
  return device_type == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                              : at::autocast::is_cpu_enabled();
#endif
}

inline void set_autocast_enabled(c10::DeviceType device_type, bool enabled) {
#if DTRAIN_TORCH_VERSION >= 204
  at::autocast::set_autocast_enabled(device_type, enabled);
#else
  if (device_type == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

inline at::ScalarType autocast_dtype(c10::DeviceType device_type) {
#if DTRAIN_TORCH_VERSION >= 204
  return at::autocast::get_autocast_dtype(device_type);
#else
  return device_type == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                              : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void set_autocast_dtype(c10::DeviceType device_type, at::ScalarType dtype) {
#if DTRAIN_TORCH_VERSION >= 204
  at::autocast::set_autocast_dtype(device_type, dtype);
#else
  if (device_type == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

}  // namespace dtrain::compat
#endif  // DTRAIN_COMPAT_AUTOCAST

#if defined(DTRAIN_COMPAT_CUDA_MEMORY) && !defined(DTRAIN_COMPAT_CUDA_MEMORY_H_)
#define DTRAIN_COMPAT_CUDA_MEMORY_H_
#include <cstdint>

#include "dtrain/config.h"
#if DTRAIN_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace dtrain::compat {

/// The CUDA caching allocator's peak allocated bytes on `device` since the
/// last reset_cuda_peak_allocated (torch.cuda.max_memory_allocated); 0 in a
/// CPU-only build. 1.13's getDeviceStats(int) returns
/// c10::cuda::CUDACachingAllocator::DeviceStats, 2.x's
/// getDeviceStats(c10::DeviceIndex) c10::CachingDeviceAllocator::DeviceStats;
/// both hold allocated_bytes[StatType::AGGREGATE == 0].peak.
/// Precondition: the allocator is initialised (a tensor was made on a GPU).
inline int64_t cuda_peak_allocated_bytes(int device) {
#if DTRAIN_HAVE_CUDA
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return stats.allocated_bytes[0].peak;
#else
  (void)device;
  return 0;
#endif
}

/// torch.cuda.reset_peak_memory_stats(device); nothing in a CPU-only build.
inline void reset_cuda_peak_allocated(int device) {
#if DTRAIN_HAVE_CUDA
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
#else
  (void)device;
#endif
}

}  // namespace dtrain::compat
#endif  // DTRAIN_COMPAT_CUDA_MEMORY
