// `dtrain models`: the model zoo as a table (name, parameters for 3 channels and 1000
// classes, default and minimum input size). Computed from the registry; no model is built.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "dtrain/models.h"

namespace dtrain::cli {
namespace {

// 25557032 -> "25,557,032"
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void print_models(std::ostream& out) {
  char line[128];
  std::snprintf(line, sizeof line, "%-18s %14s %7s %5s\n", "model", "parameters", "input", "min");
  out << line;
  for (const ModelInfo& m : model_infos()) {
    std::snprintf(line, sizeof line, "%-18s %14s %7lld %5lld\n", m.name.c_str(),
                  with_commas(m.parameters).c_str(), static_cast<long long>(m.default_image_size),
                  static_cast<long long>(m.min_image_size));
    out << line;
  }
  out << "parameters for 3 input channels and 1000 classes (torchvision's counts); input: the\n"
         "default image size (--image-size); min: the smallest size the model takes\n";
}

}  // namespace

void add_models_command(CLI::App& root, int* exit_code) {
  CLI::App* cmd = root.add_subcommand(
      "models", "List the models (--model) with parameter counts and input sizes");
  cmd->callback([exit_code] {
    try {
      print_models(std::cout);
      *exit_code = 0;
    } catch (const std::exception& e) {
      *exit_code = report_error("dtrain models", e);
    }
  });
}

}  // namespace dtrain::cli
