#pragma once
// The CUDA caching allocator's peak memory across LibTorch versions, for the
// trainer's epoch line and `dtrain bench train`; nothing in a CPU-only build.

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
