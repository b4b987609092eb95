#pragma once
// Helpers shared by the AMP tests: the reference model, Python, scratch files.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace dtrain::testing {

/// Linear(3, 2) with fixed weights; grad_scaler_reference.py's model().
inline torch::nn::Linear make_reference_model() {
  torch::nn::Linear lin(3, 2);
  torch::NoGradGuard no_grad;
  lin->weight.copy_(torch::arange(6, torch::kFloat).reshape({2, 3}) * 0.1 - 0.2);
  lin->bias.copy_(torch::tensor({0.05f, -0.05f}));
  return lin;
}

/// Deep copies of the module's parameters, in order.
inline std::vector<at::Tensor> snapshot(const torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  for (const auto& p : module.parameters()) out.push_back(p.detach().clone());
  return out;
}

// Note: the python3 first on PATH may lack torch; the system one is asked.
inline bool python_has_torch() {
  return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

/// A path under the temporary directory unique to this process and `name`.
inline std::filesystem::path scratch_path(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("dtrain-amp-" + std::to_string(::getpid()) + "-" + name);
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Runs tests/amp/grad_scaler_reference.py under `python3 -O` with `args`;
/// returns its output, or fails the test with it when the exit status is
/// not 0.
inline std::string run_reference(const std::string& args) {
  const auto out = scratch_path("python.txt");
  const std::string cmd = "/usr/bin/python3 -O " DTRAIN_SOURCE_DIR
                          "/tests/amp/grad_scaler_reference.py " +
                          args + " > " + out.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::string text = read_text(out);
  std::filesystem::remove(out);
  EXPECT_EQ(rc, 0) << cmd << "\n" << text;
  return text;
}

}  // namespace dtrain::testing
