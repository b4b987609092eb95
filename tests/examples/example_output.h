#pragma once
// Running an example under `dtrain run` and reading the line each rank
// prints at the end: "<rank|worker> R: [eval loss A -> B, ]weights checksum C".

#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/shell.h"

namespace dtrain::testing {

struct ExampleRank {
  int rank = -1;
  std::optional<double> loss_before, loss_after;  ///< on the held-out batch
  std::string checksum;                           ///< every digit of the weights' sum
};

/// The final line of every rank in `output`, in the order printed.
inline std::vector<ExampleRank> example_ranks(const std::string& output) {
  static const std::regex line(
      R"((?:rank|worker) (\d+): (?:eval loss ([0-9.]+) -> ([0-9.]+), )?(?:step \d+, )?weights checksum (\S+))");
  std::vector<ExampleRank> ranks;
  std::istringstream in(output);
  std::string text;
  while (std::getline(in, text)) {
    std::smatch m;
    if (!std::regex_search(text, m, line)) continue;
    ExampleRank r;
    r.rank = std::stoi(m[1]);
    if (m[2].matched) r.loss_before = std::stod(m[2]);
    if (m[3].matched) r.loss_after = std::stod(m[3]);
    r.checksum = m[4];
    ranks.push_back(r);
  }
  return ranks;
}

/// `dtrain run <launch_flags> -- <program> <args>` with stderr joined to
/// stdout, killed after `timeout_s`.
inline ShellRun run_example(const std::string& dtrain, const std::string& launch_flags,
                            const std::string& program, const std::string& args = "",
                            int timeout_s = 120) {
  return run_shell("timeout -k 5 " + std::to_string(timeout_s) + " " + dtrain + " run " +
                   launch_flags + " -- " + program + " " + args + " 2>&1");
}

}  // namespace dtrain::testing
