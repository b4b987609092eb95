#pragma once
// Running the PyTorch peer scripts (tests/train/peer/*.py) from a test: the
// reference Python of this LibTorch's release (support/peer_version.h: Debian's
// /usr/bin/python3 for 1.13, scripts/peer-torch.sh's venv for 2.x), tensors
// handed over as torch.load-able files.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/serialize.h>

#include "support/peer_version.h"
#include "support/shell.h"

namespace dtrain::testing {

/// Whether the reference Python is there with torch and torchvision; tests
/// skip with reference_python_missing() when not.
inline bool python_has_torch() { return reference_python_imports("torch, torchvision"); }

/// Writes {name: tensor} as a file torch.load reads.
inline void save_tensors(const std::string& path,
                         const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  c10::Dict<std::string, at::Tensor> d;
  for (const auto& [name, t] : tensors) d.insert(name, t.detach().cpu().contiguous());
  const std::vector<char> bytes = torch::pickle_save(d);
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

using PythonRun = ShellRun;  // output: stdout and stderr

/// Runs tests/train/peer/<script> with `args` (each single-quoted).
inline PythonRun run_peer(const std::string& script, const std::vector<std::string>& args) {
  std::string cmd = "timeout -k 5 300 " + reference_python() +
                    " " DTRAIN_SOURCE_DIR "/tests/train/peer/" + script;
  for (const std::string& a : args) cmd += " '" + a + "'";
  return run_shell(cmd + " 2>&1");
}

/// The last line of `text` that starts with `key` + " ", without the key.
inline std::string value_of(const std::string& text, const std::string& key) {
  std::string found;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    if (line.rfind(key + " ", 0) == 0) found = line.substr(key.size() + 1);
    pos = end + 1;
  }
  return found;
}

}  // namespace dtrain::testing
