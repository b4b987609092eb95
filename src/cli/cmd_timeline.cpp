// `dtrain timeline merge`: per-rank Chrome traces into one.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "dtrain/errors.h"
#include "dtrain/timeline.h"

namespace dtrain::cli {

void add_timeline_command(CLI::App& root, int* exit_code) {
  CLI::App* timeline = root.add_subcommand("timeline", "Per-rank timelines (Chrome traces)");
  timeline->require_subcommand(1);
  struct Flags {
    std::vector<std::string> inputs;
    std::string output;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* merge = timeline->add_subcommand(
      "merge",
      "Join ranks' timelines into one trace (a process per rank) for Perfetto or chrome://tracing");
  merge->add_option("inputs", f->inputs, "The ranks' timeline files")->required();
  merge->add_option("-o,--output", f->output, "The merged trace")->required();
  merge->callback([f, exit_code] {
    try {
      const size_t n = merge_timelines(f->inputs, f->output);
      std::printf("dtrain timeline merge: %zu events from %zu files -> %s\n", n, f->inputs.size(),
                  f->output.c_str());
      *exit_code = 0;
    } catch (const InvalidArgument& e) {
      *exit_code = report_error("dtrain timeline merge", e, 2);
    } catch (const std::exception& e) {
      *exit_code = report_error("dtrain timeline merge", e);
    }
  });
}

}  // namespace dtrain::cli
