// `dtrain data`: dataset preparation. Flags -> dtrain/image.h functions.
//
//   dtrain data imagenet-train ARCHIVE OUT_DIR
//   dtrain data imagenet-val IMAGES_DIR LABELS_FILE OUT_DIR [--synsets FILE]
//   dtrain data pack IMAGEFOLDER OUT_DIR [--shard-size-mb N] [--shuffle [--seed N]]
#include <functional>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/option_flags.h"
#include "cli/validators.h"
#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"

namespace dtrain::cli {
namespace {

struct DataFlags {
  std::string archive, images_dir, labels_file, synsets, folder, out_dir;
  int64_t shard_size_mb = 1024;
  bool shuffle = false;
  uint64_t seed = 0;
};

// Runs one preparation step; errors become messages and exit codes.
int run_step(const char* what, const std::function<PrepareStats()>& step) {
  try {
    const PrepareStats s = step();
    std::cout << "dtrain data " << what << ": " << s.images << " images in " << s.classes
              << " classes (" << s.bytes / (1 << 20) << " MiB)" << std::endl;
    return 0;
  } catch (const InvalidArgument& e) {
    return report_error("dtrain data", InvalidArgument(name_flags(e.what(), data_field_flags())),
                        2);
  } catch (const std::exception& e) {
    return report_error("dtrain data", e);
  }
}

}  // namespace

void add_data_command(CLI::App& root, int* exit_code) {
  auto f = std::make_shared<DataFlags>();
  CLI::App* data = root.add_subcommand("data", "Prepare datasets (ImageNet, packed shards)");
  data->require_subcommand(1);

  CLI::App* train =
      data->add_subcommand("imagenet-train",
                           "Unpack ImageNet's training archive (a tar of per-class tars) into "
                           "OUT_DIR/<wnid>/ class folders");
  train->add_option("ARCHIVE", f->archive, "ILSVRC2012_img_train.tar")
      ->required()
      ->check(CLI::ExistingFile);
  train->add_option("OUT_DIR", f->out_dir, "Where the class folders go")->required();
  train->callback([f, exit_code] {
    *exit_code =
        run_step("imagenet-train", [&] { return prepare_imagenet_train(f->archive, f->out_dir); });
  });

  CLI::App* val = data->add_subcommand(
      "imagenet-val", "Move the validation images into OUT_DIR/<wnid>/ class folders");
  val->add_option("IMAGES_DIR", f->images_dir, "Directory of ILSVRC2012_val_*.JPEG")
      ->required()
      ->check(CLI::ExistingDirectory);
  val->add_option("LABELS_FILE", f->labels_file,
                  "LOC_val_solution.csv, or the devkit's ILSVRC2012_validation_ground_truth.txt")
      ->required()
      ->check(CLI::ExistingFile);
  val->add_option("OUT_DIR", f->out_dir, "Where the class folders go")->required();
  val->add_option("--synsets", f->synsets,
                  "With the ground-truth list: one wnid per line in ILSVRC2012_ID order")
      ->check(CLI::ExistingFile);
  val->callback([f, exit_code] {
    *exit_code = run_step("imagenet-val", [&] {
      return prepare_imagenet_val(f->images_dir, f->labels_file, f->out_dir, f->synsets);
    });
  });

  CLI::App* pack = data->add_subcommand(
      "pack", "Pack an ImageFolder into a few large shards plus an index ('--dataset packed')");
  // Either may be an s3://bucket/prefix (a missing folder is named by pack_image_folder).
  pack->add_option("IMAGEFOLDER", f->folder,
                   "One split: IMAGEFOLDER/<class>/<image> (a directory or s3://bucket/prefix)")
      ->required();
  pack->add_option("OUT_DIR", f->out_dir,
                   "Where shard-NNNNN.bin and index.bin go (a directory or s3://bucket/prefix)")
      ->required();
  pack->add_option("--shard-size-mb", f->shard_size_mb, "Shard size in MiB")
      ->capture_default_str()
      ->check(positive());
  pack->add_flag("--shuffle", f->shuffle,
                 "Write the images in a seeded random order, so that a training run's "
                 "--shuffle-block reads mixed classes");
  pack->add_option("--seed", f->seed, "Seed of --shuffle's order")->capture_default_str();
  pack->callback([f, exit_code] {
    *exit_code = run_step("pack", [&] {
      PackOptions o;
      o.shard_size_bytes = f->shard_size_mb << 20;
      o.shuffle = f->shuffle;
      o.seed = f->seed;
      return pack_image_folder(f->folder, f->out_dir, o);
    });
  });
}

}  // namespace dtrain::cli
