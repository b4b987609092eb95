// `dtrain bench ddp|collective`: benchmarks reported like their peers.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/validators.h"
#include "common/strings.h"
#include "dtrain/bench.h"
#include "dtrain/errors.h"
#include "dtrain/models.h"

namespace dtrain::cli {
namespace {

// Runs `body` with the process group from the environment; errors become
// exit codes (2 for bad arguments, 1 otherwise).
int with_group(const char* name, const std::function<void(const ProcessGroup&)>& body) {
  try {
    ProcessGroup pg = init_process_group();
    body(pg);
    return 0;
  } catch (const InvalidArgument& e) {
    return report_error(cat("dtrain bench ", name), e, 2);
  } catch (const std::exception& e) {
    return report_error(cat("dtrain bench ", name), e);
  }
}

void print_ddp(const DdpBenchResult& r) {
  std::printf(
      "dtrain bench ddp: model %s, %d rank(s) x batch %lld, %lldx%lld, %d steps\n"
      "  step %.2f ms (p50 %.2f)  images/sec %.1f\n"
      "  forward %.2f ms  backward %.2f ms  optimizer %.2f ms\n"
      "  no_sync step %.2f ms (p50 %.2f)  backward compute %.2f ms\n"
      "  communication %.2f ms (allreduce %.2f, broadcast %.2f)  exposed %.2f ms  hidden %.0f%%"
      "  (reducer's own overlap %.0f%%)\n"
      "  %zu buckets, %.2f MiB of gradients\n",
      r.options.model.c_str(), r.world_size, static_cast<long long>(r.options.batch_size),
      static_cast<long long>(r.options.image_size), static_cast<long long>(r.options.image_size),
      r.options.steps, r.step_ms, r.step_p50_ms, r.images_per_sec, r.forward_ms, r.backward_ms,
      r.optimizer_ms, r.step_nosync_ms, r.step_nosync_p50_ms, r.backward_compute_ms, r.comm_ms,
      r.allreduce_ms, r.broadcast_ms, r.exposed_comm_ms, r.hidden_fraction * 100,
      r.reducer_overlap_fraction * 100, r.bucket_bytes.size(), r.grad_bytes / 1048576.0);
}

void add_ddp(CLI::App& bench, int* exit_code) {
  struct Flags {
    DdpBenchOptions o;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = bench.add_subcommand(
      "ddp", "DDP step time, throughput and hidden communication on synthetic data");
  cmd->add_option("--model", f->o.model, "Model: " + join(model_names(), ", "))
      ->capture_default_str();
  cmd->add_option("--batch-size", f->o.batch_size, "Samples per step per process")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--image-size", f->o.image_size, "Input size (0: 28 for cnn, else 32)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--steps", f->o.steps, "Measured steps of each kind")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--warmup", f->o.warmup, "Warm-up steps")->capture_default_str()->check(non_negative());
  cmd->add_option("--threads", f->o.threads, "Intra-op threads per process (0: default)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--bucket-cap-mb", f->o.bucket_cap_mb, "DDP bucket size in MiB")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--comm-hook", f->o.comm_hook, "none, fp16, bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "fp16", "bf16"}));
  cmd->add_flag("--find-unused-parameters", f->o.find_unused_parameters,
                "DDP searches the graph for unused parameters after each forward");
  cmd->add_flag("--json", f->json, "Print one JSON object (rank 0)");
  cmd->callback([f, exit_code] {
    *exit_code = with_group("ddp", [&](const ProcessGroup& pg) {
      DdpBenchResult r = run_ddp_bench(f->o, pg);
      if (pg.rank() != 0) return;
      if (f->json) {
        std::cout << to_json(r) << std::endl;
      } else {
        print_ddp(r);
      }
    });
  });
}

void add_collective(CLI::App& bench, int* exit_code) {
  auto o = std::make_shared<CollectiveBenchOptions>();
  CLI::App* cmd =
      bench.add_subcommand("collective", "Collective bandwidth per message size (nccl-tests style)");
  cmd->add_option("--op", o->op, "allreduce, allgather, broadcast")
      ->capture_default_str()
      ->check(CLI::IsMember({"allreduce", "allgather", "broadcast"}));
  cmd->add_option("-b,--min-bytes", o->min_bytes, "Smallest message")->capture_default_str();
  cmd->add_option("-e,--max-bytes", o->max_bytes, "Largest message")->capture_default_str();
  cmd->add_option("-f,--step-factor", o->step_factor, "Size multiplier")->capture_default_str();
  cmd->add_option("-n,--iters", o->iterations, "Iterations per size")->capture_default_str();
  cmd->add_option("-w,--warmup-iters", o->warmup, "Warm-up iterations")->capture_default_str();
  cmd->callback([o, exit_code] {
    *exit_code = with_group("collective", [&](const ProcessGroup& pg) {
      auto rows = run_collective_bench(*o, pg);
      if (pg.rank() != 0) return;
      std::printf("# %s, %d ranks, float32, Gloo\n#%12s %12s %12s %12s\n", o->op.c_str(),
                  pg.size(), "size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)");
      for (const auto& r : rows) {
        std::printf(" %12lld %12.1f %12.3f %12.3f\n", static_cast<long long>(r.bytes), r.time_us,
                    r.algbw_gbps, r.busbw_gbps);
      }
    });
  });
}

}  // namespace

void add_bench_command(CLI::App& root, int* exit_code) {
  CLI::App* bench = root.add_subcommand("bench", "Benchmarks (start under 'dtrain run')");
  bench->require_subcommand(1);
  add_ddp(*bench, exit_code);
  add_collective(*bench, exit_code);
}

}  // namespace dtrain::cli
