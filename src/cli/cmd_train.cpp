// `dtrain train`: flags -> TrainOptions -> dtrain::train().
#include <cctype>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/validators.h"
#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/models.h"
#include "dtrain/train.h"

namespace dtrain::cli {
namespace {

struct TrainFlags {
  TrainOptions options;
  std::string comm_hook = "none";
  std::string backend = "gloo";
  double timeout_s = 1800;
  std::string checkpoint_every;
};

// --checkpoint-every: "N" or "Nsteps" (optimizer steps), "Nepochs" (epochs);
// the singular and a space before the unit are accepted too. False when
// `text` is none of these or N is not a positive integer.
bool parse_checkpoint_every(std::string text, int64_t* steps, int64_t* epochs) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit = text.substr(digits);
  unit.erase(0, unit.find_first_not_of(' '));
  long long n = 0;
  if (digits == 0 || !parse_int(text.substr(0, digits), &n) || n < 1) return false;
  if (unit.empty() || unit == "step" || unit == "steps") {
    *steps = n, *epochs = 0;
  } else if (unit == "epoch" || unit == "epochs") {
    *steps = 0, *epochs = n;
  } else {
    return false;
  }
  return true;
}

CLI::Validator checkpoint_every_syntax() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        int64_t steps = 0, epochs = 0;
        if (parse_checkpoint_every(v, &steps, &epochs)) return "";
        return "must be N (steps), Nsteps or Nepochs with N a positive integer, got '" + v + "'";
      },
      "N|Nsteps|Nepochs");
}

int run_train(const TrainFlags& f) {
  try {
    TrainOptions o = f.options;
    o.ddp.comm_hook = comm_hook_by_name(f.comm_hook);
    if (!f.checkpoint_every.empty() &&
        !parse_checkpoint_every(f.checkpoint_every, &o.checkpoint_every_steps,
                                &o.checkpoint_every_epochs)) {
      throw InvalidArgument(cat("--checkpoint-every '", f.checkpoint_every,
                                "' is not N (steps), Nsteps or Nepochs"));
    }
    validate(o);  // before joining the group: bad flags never leave peers waiting
    InitOptions init = resolve_init_options({}, process_env());
    init.backend = f.backend;
    init.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
    ProcessGroup pg =
        init.init_method == "env://" ? ProcessGroup() : init_process_group(init);
    train(o, pg, &std::cout);
    return 0;
  } catch (const InvalidArgument& e) {
    return report_error("dtrain train", e, 2);
  } catch (const std::exception& e) {
    return report_error("dtrain train", e);
  }
}

}  // namespace

void add_train_command(CLI::App& root, int* exit_code) {
  auto flags = std::make_shared<TrainFlags>();
  TrainOptions& o = flags->options;
  CLI::App* cmd = root.add_subcommand(
      "train", "Train an image classifier data-parallel (start it with 'dtrain run')");
  cmd->add_option("--model", o.model, "Model: " + join(model_names(), ", "))
      ->capture_default_str();
  cmd->add_option("--init-weights", o.init_weights,
                  "Start from these weights: torch.save(dict(model.state_dict()), PATH)");
  cmd->add_option("--dataset", o.dataset.name, "Dataset: " + join(dataset_names(), ", "))
      ->capture_default_str();
  cmd->add_option("--data-dir", o.dataset.data_dir, "Dataset directory (default per dataset)");
  cmd->add_option("--image-size", o.dataset.image_size,
                  "Crop size for imagefolder/packed (0: 224)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_flag("--strict", o.dataset.strict,
                "Fail on a corrupt or unreadable image instead of skipping it");
  cmd->add_option("--epochs", o.epochs, "Epochs")->capture_default_str()->check(positive());
  cmd->add_option("--batch-size", o.batch_size, "Samples per step on each process")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--eval-batch-size", o.eval_batch_size, "Samples per evaluation batch")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--lr", o.lr, "SGD learning rate")->capture_default_str()->check(positive());
  cmd->add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str()->check(non_negative());
  cmd->add_option("--weight-decay", o.weight_decay, "SGD weight decay")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--seed", o.seed, "Seed for initialisation and shuffling")->capture_default_str();
  cmd->add_option("--threads", o.threads, "Intra-op threads per process (0: LibTorch default)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--loader-threads", o.loader_threads, "Data loader threads per process")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--metrics-file", o.metrics_file, "Write one JSON object per epoch here");
  cmd->add_option("--checkpoint-dir", o.checkpoint_dir,
                  "Resume from the newest valid checkpoint here and write new ones (rank 0)");
  cmd->add_option("--checkpoint-every", flags->checkpoint_every,
                  "Checkpoint cadence: N or Nsteps (optimizer steps), Nepochs (epochs); "
                  "default 1epochs when --checkpoint-dir is given. A checkpoint is also "
                  "written after the last epoch")
      ->check(checkpoint_every_syntax());
  cmd->add_option("--keep-checkpoints", o.keep_checkpoints, "Newest checkpoints kept")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--bucket-cap-mb", o.ddp.bucket_cap_mb, "DDP bucket size in MiB")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--comm-hook", flags->comm_hook, "Gradient communication: none, fp16, bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "fp16", "bf16"}));
  cmd->add_option("--accumulation-steps", o.accumulation_steps,
                  "Batches accumulated (no_sync) per optimizer step")
      ->capture_default_str()
      ->check(positive());
  cmd->add_flag("--find-unused-parameters", o.ddp.find_unused_parameters,
                "Tolerate parameters that get no gradient");
  cmd->add_flag("--gradient-as-bucket-view", o.ddp.gradient_as_bucket_view,
                "Let gradients alias DDP's buckets");
  cmd->add_option("--device", o.device, "auto, cpu, cuda (cuda:<local rank>) or cuda:N")
      ->capture_default_str();
  cmd->add_option("--backend", flags->backend, "Collective backend: gloo, nccl")
      ->capture_default_str()
      ->check(CLI::IsMember({"gloo", "nccl"}));
  cmd->add_option("--timeout", flags->timeout_s, "Seconds a collective may take before failing")
      ->capture_default_str()
      ->check(positive());
  cmd->add_flag("-v,--verbose", o.verbose, "Print DDP's runtime statistics each epoch");
  cmd->callback([flags, exit_code] { *exit_code = run_train(*flags); });
}

}  // namespace dtrain::cli
