#include "cli/powersgd_flags.h"

#include "cli/validators.h"
#include "common/strings.h"
#include "dtrain/ddp.h"
#include "dtrain/errors.h"

namespace dtrain::cli {

void add_comm_hook_flags(CLI::App* cmd, CommHookFlags* f) {
  PowerSGDOptions& p = f->powersgd;
  cmd->add_option("--comm-hook", f->name,
                  "Gradient communication: " + join(comm_hook_names(), ", ") +
                      " (noop: none at all, each rank keeps its own gradient divided by the world "
                      "size; for measuring the step without communication, never for training)")
      ->capture_default_str()
      ->check(CLI::IsMember(comm_hook_names()));
  auto& v = f->powersgd_flags;
  v.push_back(cmd->add_option("--powersgd-rank", p.matrix_approximation_rank,
                              "PowerSGD: rank of the approximation (matrix_approximation_rank; "
                              "clamped per layer to min(rows, cols))")
                  ->capture_default_str());
  v.push_back(cmd->add_option("--powersgd-start-iter", p.start_powersgd_iter,
                              "PowerSGD: iterations of plain allreduce first (start_powerSGD_iter)")
                  ->capture_default_str());
  v.push_back(cmd->add_option("--powersgd-min-compression-rate", p.min_compression_rate,
                              "PowerSGD: compress a layer only above this size ratio")
                  ->capture_default_str()
                  ->check(non_negative()));
  v.push_back(cmd->add_flag("--powersgd-no-error-feedback", f->no_error_feedback,
                            "PowerSGD: no error feedback (use_error_feedback=False)"));
  v.push_back(cmd->add_flag("--powersgd-no-warm-start", f->no_warm_start,
                            "PowerSGD: a random Q every step (warm_start=False)"));
  v.push_back(cmd->add_option("--powersgd-orthogonalization-epsilon", p.orthogonalization_epsilon,
                              "PowerSGD: added to column norms when orthogonalizing")
                  ->capture_default_str()
                  ->check(non_negative()));
  v.push_back(cmd->add_flag("--powersgd-batch-same-shape", p.batch_tensors_with_same_shape,
                            "PowerSGD: compress same-shaped layers as one batch"));
  v.push_back(cmd->add_option("--powersgd-seed", p.random_seed,
                              "PowerSGD: seed of the random Qs (random_seed)")
                  ->capture_default_str());
  v.push_back(cmd->add_option("--powersgd-stats-every", p.compression_stats_logging_frequency,
                              "PowerSGD: iterations between compression statistics lines")
                  ->capture_default_str());
}

PowerSGDOptions powersgd_options_from_flags(const CommHookFlags& f) {
  if (f.name != "powersgd") {
    for (const CLI::Option* o : f.powersgd_flags) {
      if (o->count() > 0) {
        throw InvalidArgument(cat(o->get_name(), " is an option of --comm-hook powersgd, not ",
                                  f.name, "; drop it or use --comm-hook powersgd"));
      }
    }
    return f.powersgd;
  }
  PowerSGDOptions p = f.powersgd;
  if (p.matrix_approximation_rank < 1) {
    throw InvalidArgument(cat("--powersgd-rank must be at least 1, got ",
                              p.matrix_approximation_rank, " (1 to 4 is usual)"));
  }
  p.use_error_feedback = !f.no_error_feedback;
  p.warm_start = !f.no_warm_start;
  if ((p.use_error_feedback || p.warm_start) && p.start_powersgd_iter <= 1) {
    throw InvalidArgument(
        cat("--powersgd-start-iter must be at least 2 with error feedback or "
            "warm start (got ",
            p.start_powersgd_iter,
            "): DDP rebuilds its buckets after the first iteration; use "
            "--powersgd-start-iter 2 or more, or add --powersgd-no-error-feedback "
            "--powersgd-no-warm-start"));
  }
  return p;
}

std::shared_ptr<CommHook> comm_hook_from_flags(const CommHookFlags& f, std::ostream* log) {
  PowerSGDOptions p = powersgd_options_from_flags(f);
  p.log = log;
  return comm_hook_by_name(f.name, p);
}

}  // namespace dtrain::cli
