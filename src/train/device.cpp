// DeviceChoice (dtrain/device.h): its spelling, and the device it names for a
// rank (pick_device), checked by detail::check_device (steps.h).

#include "dtrain/device.h"

#include <algorithm>
#include <cctype>

#include <torch/cuda.h>

#include "common/strings.h"
#include "dtrain/config.h"
#include "dtrain/errors.h"
#include "train/steps.h"
#if DTRAIN_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace dtrain {

std::string to_string(const DeviceChoice& choice) {
  const char* name = choice.kind == DeviceChoice::Kind::kAuto  ? "auto"
                     : choice.kind == DeviceChoice::Kind::kCpu ? "cpu"
                                                               : "cuda";
  return choice.index == -1 ? name : cat(name, ":", choice.index);
}

DeviceChoice parse_device_choice(const std::string& text) {
  if (text == "auto") return DeviceChoice::automatic();
  if (text == "cpu") return DeviceChoice::cpu();
  if (text == "cuda") return DeviceChoice::cuda();
  const std::string digits = text.rfind("cuda:", 0) == 0 ? text.substr(5) : "";
  const bool decimal = !digits.empty() && digits.size() <= 9 &&
                       (digits == "0" || digits[0] != '0') &&
                       std::all_of(digits.begin(), digits.end(),
                                   [](unsigned char c) { return std::isdigit(c) != 0; });
  if (!decimal) {
    throw InvalidArgument(cat("device '", text, "' is not one of auto, cpu, cuda, cuda:N"));
  }
  return DeviceChoice::cuda(std::stoi(digits));
}

namespace detail {

void check_device(const DeviceChoice& choice, const std::string& option) {
  const bool cuda = choice.kind == DeviceChoice::Kind::kCuda;
  if (choice.index < -1 || (!cuda && choice.index != -1)) {
    throw InvalidArgument(
        cat(option, " '", to_string(choice), "' is not one of auto, cpu, cuda, cuda:N"));
  }
  if (!cuda) return;
  if (!torch::cuda::is_available()) {
    throw InvalidArgument(cat(option, " ", to_string(choice),
                              ": no GPU is visible to this LibTorch; use ", option, " cpu"));
  }
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (choice.index >= gpus) {
    throw InvalidArgument(cat(option, " ", to_string(choice), ": this LibTorch sees ", gpus,
                              " GPU(s), cuda:0 to cuda:", gpus - 1));
  }
}

bool uses_cuda(const DeviceChoice& choice) {
  return choice.kind == DeviceChoice::Kind::kCuda ||
         (choice.kind == DeviceChoice::Kind::kAuto && torch::cuda::is_available());
}

}  // namespace detail

at::Device pick_device(const DeviceChoice& choice, int local_rank) {
  detail::check_device(choice, "device");
  if (!detail::uses_cuda(choice)) return at::Device(at::kCPU);
  const int index = choice.index >= 0
                        ? choice.index
                        : std::max(local_rank, 0) % static_cast<int>(torch::cuda::device_count());
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
#if DTRAIN_HAVE_CUDA
  // The rank's GPU becomes the current one whatever the backend, so that no
  // rank creates a context on GPU 0 (Gloo with CUDA tensors, cuBLAS handles).
  c10::cuda::set_device(device.index());
#endif
  return device;
}

at::Device pick_device(const DeviceChoice& choice, const ProcessGroup& pg) {
  return pick_device(choice, pg.local_rank());
}

}  // namespace dtrain
