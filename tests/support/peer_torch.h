#pragma once
// The two Python peers of the interoperability tests: Debian's python3-torch
// 1.13 (/usr/bin/python3) and PyPI's torch 2.x in the venv that
// scripts/peer-torch.sh makes. Each returns the command prefix that runs that
// python, or "" when it is not installed (the test skips, saying why).

#include <string>

#include "support/shell.h"

namespace dtrain::testing {

/// "/usr/bin/python3" when it imports torch, else "".
inline std::string python_torch_113() {
  const ShellRun r = run_shell("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 && echo yes");
  return r.output.rfind("yes", 0) == 0 ? "/usr/bin/python3" : "";
}

/// "env LD_LIBRARY_PATH=... <venv>/bin/python" for scripts/peer-torch.sh's
/// venv of torch `version` (default: the script's, 2.11.0), else "".
inline std::string python_torch_2x(const std::string& version = "") {
  const std::string set_version =
      version.empty() ? "" : "DTRAIN_PEER_TORCH_VERSION=" + version + " ";
  ShellRun r = run_shell(set_version + "bash " DTRAIN_SOURCE_DIR
                                       "/scripts/peer-torch.sh command 2>/dev/null");
  if (r.code != 0) return "";
  while (!r.output.empty() && (r.output.back() == '\n' || r.output.back() == '\r')) {
    r.output.pop_back();
  }
  return r.output;
}

constexpr const char* kNoPeer2x =
    "no PyTorch 2.x peer venv: run scripts/peer-torch.sh (PyPI's torch 2.11 in a venv)";
constexpr const char* kNoPeer113 = "Debian's python3-torch (1.13) is not installed";

}  // namespace dtrain::testing
