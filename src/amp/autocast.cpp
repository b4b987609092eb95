// Autocast regions (include/dtrain/amp.h).
//
// Note [Autocast regions]
// Python's torch.autocast.__enter__ saves the device type's enabled flag and
// dtype, sets the new ones and increments a per-thread nesting count;
// __exit__ decrements it, clears the cast cache when it reaches zero, and
// restores the flag and dtype. AutocastGuard does exactly that. The cache
// holds low-precision copies of fp32 leaf tensors (the weights) made during
// the region; clearing it at the outermost exit is what makes the next
// forward see the weights the optimizer just changed. The version-specific
// calls (LibTorch 2.4 made them per device type) are in autocast_compat.h.

#include <ATen/Context.h>

#include "amp/autocast_compat.h"
#include "common/strings.h"
#include "dtrain/amp.h"
#include "dtrain/errors.h"

namespace dtrain {

std::string to_string(AmpMode mode) {
  switch (mode) {
    case AmpMode::kNone:
      return "none";
    case AmpMode::kBf16:
      return "bf16";
    case AmpMode::kFp16:
      return "fp16";
  }
  return "?";
}

AmpMode parse_amp_mode(const std::string& name) {
  for (AmpMode m : {AmpMode::kNone, AmpMode::kBf16, AmpMode::kFp16}) {
    if (name == to_string(m)) return m;
  }
  throw InvalidArgument(cat("unknown mixed-precision mode '", name,
                            "'; valid modes: none, bf16 (CPU or CUDA), fp16 (CUDA)"));
}

at::ScalarType amp_dtype(AmpMode mode) {
  if (mode == AmpMode::kNone) throw InvalidArgument("amp_dtype: AmpMode::kNone has no dtype");
  return mode == AmpMode::kBf16 ? at::kBFloat16 : at::kHalf;
}

at::ScalarType amp_dtype_from_name(const std::string& name) {
  if (name == "bf16") return at::kBFloat16;
  if (name == "fp16") return at::kHalf;
  throw InvalidArgument(
      cat("unknown mixed-precision dtype '", name, "'; use bf16 (CPU or CUDA) or fp16 (CUDA)"));
}

void check_autocast(c10::DeviceType device_type, at::ScalarType dtype) {
  if (device_type == c10::DeviceType::CPU) {
    if (dtype == at::kHalf) {
      throw InvalidArgument("fp16 autocast needs a CUDA device; use bf16 on the CPU");
    }
    if (dtype != at::kBFloat16) {
      throw InvalidArgument(cat("CPU autocast supports bf16 only, not ", dtype));
    }
    return;
  }
  if (device_type == c10::DeviceType::CUDA) {
    if (dtype != at::kHalf && dtype != at::kBFloat16) {
      throw InvalidArgument(cat("CUDA autocast supports fp16 and bf16, not ", dtype));
    }
    if (!at::hasCUDA()) {
      throw InvalidArgument("CUDA autocast needs a GPU and none is available; autocast on the CPU");
    }
    return;
  }
  throw InvalidArgument(cat("autocast is supported on CPU and CUDA, not ",
                            c10::DeviceTypeName(device_type), "; autocast on the CPU or CUDA"));
}

bool needs_grad_scaler(at::ScalarType dtype) { return dtype == at::kHalf; }

AutocastGuard::AutocastGuard(c10::DeviceType device_type, at::ScalarType dtype, bool enabled)
    : device_type_(device_type) {
  if (enabled) check_autocast(device_type, dtype);
  previous_enabled_ = compat::autocast_enabled(device_type_);
  previous_dtype_ = compat::autocast_dtype(device_type_);
  compat::set_autocast_enabled(device_type_, enabled);
  if (enabled) compat::set_autocast_dtype(device_type_, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  compat::set_autocast_enabled(device_type_, previous_enabled_);
  compat::set_autocast_dtype(device_type_, previous_dtype_);
}

bool autocast_enabled(c10::DeviceType device_type) { return compat::autocast_enabled(device_type); }

at::ScalarType autocast_dtype(c10::DeviceType device_type) {
  return compat::autocast_dtype(device_type);
}

}  // namespace dtrain
