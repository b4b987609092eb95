#pragma once
// Whether the Python peer (/usr/bin/python3's torch) is the same PyTorch
// release as the LibTorch this test links. Comparisons that depend on kernel
// numerics (convolution and BatchNorm backward, accumulated over steps) or on
// the random-number stream (dropout, stochastic depth from one seed) are only
// a fair reference between the same release: the CUDA LibTorch 2.x CI stage
// links 2.11 while Debian's peer is 1.13, and there such comparisons skip
// (they run in the LibTorch 1.13 stage).

#include <cstdio>
#include <string>

#include <torch/version.h>

namespace dtrain::testing {

/// "major.minor" of the peer's torch, or "" when it cannot be imported.
inline std::string peer_torch_version() {
  FILE* p = ::popen(
      "/usr/bin/python3 -c 'import torch;print(\".\".join(torch.__version__.split(\".\")[:2]))' "
      "2>/dev/null",
      "r");
  if (!p) return "";
  char buf[64] = {0};
  std::string out = fgets(buf, sizeof buf, p) ? buf : "";
  ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

/// "major.minor" of the linked LibTorch.
inline std::string libtorch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
}

inline bool peer_is_same_release() { return peer_torch_version() == libtorch_version(); }

}  // namespace dtrain::testing
