#pragma once
// Where a rank trains or evaluates (TrainOptions::device, EvalOptions::device):
// a typed choice, parsed once from its text ("auto", "cpu", "cuda", "cuda:N",
// the spelling of `dtrain train --device`), and resolved per rank by
// pick_device().
//
/// Example:
/// ```
/// at::Device my_device(const dtrain::ProcessGroup& pg) {
///   dtrain::DeviceChoice choice = dtrain::parse_device_choice("cuda");  // cuda:<local rank>
///   if (!torch::cuda::is_available()) choice = dtrain::DeviceChoice::cpu();
///   return dtrain::pick_device(choice, pg);
/// }
/// ```

#include <string>

#include <c10/core/Device.h>

#include "dtrain/comm.h"

namespace dtrain {

/// Which device a rank uses. The default is kAuto.
struct DeviceChoice {
  /// kAuto  cuda:<local rank mod GPUs> when LibTorch sees a GPU, else cpu;
  /// kCpu   the CPU;
  /// kCuda  GPU `index`, or cuda:<local rank mod GPUs> when index is -1.
  enum class Kind { kAuto, kCpu, kCuda };
  Kind kind = Kind::kAuto;
  /// kCuda only: the GPU's index (>= 0), or -1 (the default) for the local
  /// rank's GPU. Must be -1 for kAuto and kCpu.
  int index = -1;

  static DeviceChoice automatic() { return {}; }
  static DeviceChoice cpu() { return {Kind::kCpu, -1}; }
  /// cuda:<local rank mod GPUs> with the default index, else cuda:index.
  static DeviceChoice cuda(int index = -1) { return {Kind::kCuda, index}; }

  bool operator==(const DeviceChoice& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const DeviceChoice& o) const { return !(*this == o); }
};

/// "auto", "cpu", "cuda", "cuda:N" (N = index); a choice whose index does not
/// fit its kind is spelled with it, e.g. "cpu:3".
std::string to_string(const DeviceChoice& choice);

/// The choice to_string() spells `text` as: "auto", "cpu", "cuda" or "cuda:N"
/// with N a decimal index without sign or leading zeros. Anything else throws
/// InvalidArgument naming the text and the accepted forms ("device 'tpu' is
/// not one of auto, cpu, cuda, cuda:N"). Pure: it touches no GPU.
DeviceChoice parse_device_choice(const std::string& text);

/// The device `choice` names for a rank with `local_rank` (negative: 0):
/// kAuto is cuda:<local rank mod GPUs> when a GPU is visible, else cpu; kCuda
/// with index -1 is cuda:<local rank mod GPUs>. A CUDA device also becomes the
/// current one (c10::cuda::set_device), whatever the backend. Throws
/// InvalidArgument naming `choice` when it is malformed, names CUDA while no
/// GPU is visible ("... use cpu"), or names a GPU index that is not visible.
/// Used where the local rank is known before the group forms (`dtrain train`
/// picks the device, then the backend from it: resolve_backend,
/// dtrain/backend.h).
at::Device pick_device(const DeviceChoice& choice, int local_rank);

/// The same for a rank of `pg` (its local_rank()).
at::Device pick_device(const DeviceChoice& choice, const ProcessGroup& pg);

}  // namespace dtrain
