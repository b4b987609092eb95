#pragma once
// Autocast's per-device-type state across LibTorch versions, for src/amp
// (the only user). <ATen/autocast_mode.h> parses ATen's operator headers,
// hence a header of its own.

#include <ATen/autocast_mode.h>

#include "dtrain/compat.h"

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
