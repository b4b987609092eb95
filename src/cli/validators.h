#pragma once
// Flag checks shared by the subcommands, with short messages (CLI11's own
// PositiveNumber prints the whole range of a double).

#include <string>

#include <CLI/CLI.hpp>

namespace dtrain::cli {

inline CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(v, x) || !(x > 0)) return "must be positive, got " + v;
        return "";
      },
      "POSITIVE");
}

inline CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(v, x) || !(x >= 0)) return "must be >= 0, got " + v;
        return "";
      },
      "NONNEGATIVE");
}

}  // namespace dtrain::cli
