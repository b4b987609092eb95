#pragma once
// The reference Python of a test: PyTorch of the release of the LibTorch the
// test links. Comparisons against PyTorch's own results (checkpoints read by
// torch.load, DistributedSampler's shares, torchvision's initialisation and
// logits, optimizer steps, learning-rate schedules) depend on kernel numerics
// and on the random-number stream, so they are only a fair reference between
// the same release:
// - dtrain built on Debian's LibTorch 1.13: Debian's python3-torch
//   (/usr/bin/python3);
// - dtrain built on LibTorch 2.x (PyPI's torch wheel): the venv of
//   scripts/peer-torch.sh for that version (PyPI's torch and torchvision),
//   run as that script prints it (an `env LD_LIBRARY_PATH=...` prefix).
// Where that Python is not installed the tests skip, saying how to get it
// (reference_python_missing()).

#include <torch/version.h>

#include <string>

#include "support/peer_torch.h"
#include "support/shell.h"

namespace dtrain::testing {

/// "major.minor" of the linked LibTorch.
inline std::string libtorch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
}

/// "major.minor.patch" of the linked LibTorch (the peer venv's torch version).
inline std::string libtorch_full_version() {
  return libtorch_version() + "." + std::to_string(TORCH_VERSION_PATCH);
}

/// The command prefix that runs the reference Python (a shell word list, e.g.
/// "/usr/bin/python3" or "env LD_LIBRARY_PATH=... <venv>/bin/python"), or ""
/// when it is not installed. Asked once per test program.
inline const std::string& reference_python() {
  static const std::string python =
      TORCH_VERSION_MAJOR >= 2 ? python_torch_2x(libtorch_full_version()) : python_torch_113();
  return python;
}

/// Why the reference Python is missing: the skip message.
inline std::string reference_python_missing() {
  if (TORCH_VERSION_MAJOR >= 2) {
    return "no PyTorch " + libtorch_full_version() +
           " peer (this LibTorch's release): make it with DTRAIN_PEER_TORCH_VERSION=" +
           libtorch_full_version() + " bash scripts/peer-torch.sh";
  }
  return "Debian's python3-torch (PyTorch 1.13, this LibTorch's release) is not installed "
         "(apt-get install python3-torch python3-torchvision)";
}

/// True when the reference Python is there and imports `modules` (e.g.
/// "torch, torchvision").
inline bool reference_python_imports(const std::string& modules) {
  if (reference_python().empty()) return false;
  return run_shell(reference_python() + " -c 'import " + modules + "' >/dev/null 2>&1").code == 0;
}

/// "major.minor" of the reference Python's torch, or "" when it cannot be imported.
inline std::string peer_torch_version() {
  if (reference_python().empty()) return "";
  ShellRun r = run_shell(reference_python() +
                         " -c 'import torch;print(\".\".join(torch.__version__.split(\".\")[:2]))' "
                         "2>/dev/null");
  while (!r.output.empty() && (r.output.back() == '\n' || r.output.back() == '\r')) {
    r.output.pop_back();
  }
  return r.code == 0 ? r.output : "";
}

/// Whether the reference Python's torch is this LibTorch's release (false only
/// when its venv or /usr/bin/python3 holds another one).
inline bool peer_is_same_release() { return peer_torch_version() == libtorch_version(); }

}  // namespace dtrain::testing
