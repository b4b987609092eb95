#include "data/registry.h"

#include <sys/stat.h>

#include <ATen/ATen.h>

#include "common/strings.h"
#include "data/fingerprint.h"
#include "data/tensor_loader.h"
#include "dtrain/comm.h"
#include "dtrain/errors.h"
#include "dtrain/idx.h"

namespace dtrain {
namespace data {
namespace {

struct IdxDataset {
  const char* name;
  const char* default_dir;
  const char* package;  // Debian package that installs it, or nullptr
  double mean;          // normalisation statistics of the training split
  double stddev;
};

constexpr IdxDataset kFashionMnist{"fashion-mnist", "/usr/share/datasets/fashion-mnist",
                                   "dataset-fashion-mnist", 0.2860, 0.3530};
constexpr IdxDataset kMnist{"mnist", "", nullptr, 0.1307, 0.3081};

at::Tensor normalise(const at::Tensor& images, const IdxDataset& d) {
  // [N, H, W] uint8 -> [N, 1, H, W] float, (x / 255 - mean) / std.
  return images.to(at::kFloat).div_(255.0).sub_(d.mean).div_(d.stddev).unsqueeze(1).contiguous();
}

// Note [Dataset fingerprints]: the labels in order and the pixels, both in
// memory already. Computed at open (a CRC over 47 MB for MNIST's training
// split, tens of milliseconds) since the pixels are dropped once normalised.
DataFingerprint idx_fingerprint(const IdxSplit& split) {
  FingerprintBuilder b;
  const at::Tensor labels = split.labels.contiguous(), images = split.images.contiguous();
  for (int64_t i = 0; i < labels.numel(); ++i) b.add_name(labels.data_ptr<int64_t>()[i]);
  b.add_bytes(images.data_ptr(), images.nbytes());
  return b.finish(labels.numel(), 10);
}

DatasetSplits open_idx(const DatasetOptions& options, const IdxDataset& d) {
  std::string dir = options.data_dir.empty() ? d.default_dir : options.data_dir;
  if (dir.empty()) {
    throw InvalidArgument(cat("dataset '", d.name,
                              "' has no default location; set DatasetOptions::data_dir to "
                              "the directory holding train-images-idx3-ubyte.gz"));
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::string fix = d.package && options.data_dir.empty()
                          ? cat("install it with 'apt-get install ", d.package,
                                "' or set DatasetOptions::data_dir")
                          : std::string(
                                "set DatasetOptions::data_dir to the directory holding "
                                "train-images-idx3-ubyte.gz");
    throw DataError(cat("dataset '", d.name, "': directory '", dir, "' does not exist; ", fix));
  }
  IdxSplit train = load_idx_split(dir, /*train=*/true);
  IdxSplit test = load_idx_split(dir, /*train=*/false);
  DatasetSplits s;
  s.num_classes = 10;
  s.sample_shape = {1, train.images.size(1), train.images.size(2)};
  s.train = std::make_unique<TensorLoader>(normalise(train.images, d), train.labels, options.train,
                                           idx_fingerprint(train));
  s.test = std::make_unique<TensorLoader>(normalise(test.images, d), test.labels, options.test);
  return s;
}

DatasetSplits open_fashion_mnist(const DatasetOptions& o, const ProcessGroup*) {
  return open_idx(o, kFashionMnist);
}
DatasetSplits open_mnist(const DatasetOptions& o, const ProcessGroup*) {
  return open_idx(o, kMnist);
}

std::vector<DatasetEntry> all_entries() {
  std::vector<DatasetEntry> rows = {
      {"fashion-mnist", "Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)",
       &open_fashion_mnist},
      {"mnist", "MNIST IDX files (needs a data directory)", &open_mnist},
  };
  for (const DatasetEntry& e : image_dataset_entries()) rows.push_back(e);
  return rows;
}

}  // namespace
}  // namespace data

std::vector<std::string> dataset_names() {
  std::vector<std::string> names;
  for (const auto& e : data::all_entries()) names.emplace_back(e.name);
  return names;
}

namespace {

// Note [Dataset shares]
// Forgetting the rank used to leave every rank at rank 0 of 1: each trained
// on the whole dataset, silently. A split's share is now unset (-1) until
// open_dataset(options, pg) fills it from the group, and everything that
// builds a loader (sampler_options) refuses an unset share, so the mistake
// is an error naming the fix. A share set by hand that contradicts the group
// is refused too; a deliberate other share goes through the one-argument
// open_dataset.
void fill_share(LoaderOptions& split, const char* which, const ProcessGroup& pg) {
  if (split.rank == -1) split.rank = pg.rank();
  if (split.world_size == -1) split.world_size = pg.size();
  if (split.rank != pg.rank() || split.world_size != pg.size()) {
    throw InvalidArgument(cat("open_dataset: the ", which, " split's share is rank ", split.rank,
                              " of ", split.world_size, " but the process group is rank ",
                              pg.rank(), " of ", pg.size(), "; leave ", which,
                              ".rank and .world_size unset (-1) to take the group's, or call "
                              "open_dataset(options) without a group for an explicit share"));
  }
}

void require_share(const LoaderOptions& split, const char* which) {
  if (split.rank == -1 || split.world_size == -1) {
    throw InvalidArgument(cat("open_dataset: the ", which,
                              " split has no share (rank and world_size unset); call "
                              "open_dataset(options, pg) to give each rank of the group its "
                              "share (ProcessGroup() for a single process), or set ",
                              which, ".rank and .world_size"));
  }
}

// Note [Resizing to --image-size]
// Every dataset honours DatasetOptions::image_size. The folder datasets crop
// to it in their loaders (RandomResizedCrop / Resize + CenterCrop) and
// synthetic data is made at that size; a dataset whose images have one fixed
// size (fashion-mnist, mnist 28, cifar10 32, stl10 96, synthetic with an
// explicit CxHxW) is resized per batch after normalisation, on whatever
// device the batch is on: torchvision's Resize((size, size)) on tensors with
// antialias=True, i.e. interpolate(bilinear, align_corners=False,
// antialias=True), which PIL's bilinear resize also computes (up to its 8-bit
// rounding). Resizing is linear with weights summing to 1, so resizing the
// normalised floats equals normalising the resized pixels. A whole split is
// never resized up front: 60,000 Fashion-MNIST images at 224 px would take 12 GB.
DatasetSplits fit_image_size(DatasetSplits s, const DatasetOptions& o) {
  const int64_t size = o.image_size;
  if (size == 0 || s.sample_shape.size() != 3 ||
      (s.sample_shape[1] == size && s.sample_shape[2] == size)) {
    return s;
  }
  s.normalize = [before = std::move(s.normalize), size](const at::Tensor& batch) {
    const at::Tensor x = before ? before(batch) : batch;
    return at::_upsample_bilinear2d_aa(x, {size, size}, /*align_corners=*/false);
  };
  s.sample_shape[1] = s.sample_shape[2] = size;
  return s;
}

// `group`: the ranks opening it together, or null (Note [Shared listing]).
DatasetSplits open_shares(const DatasetOptions& options, const ProcessGroup* group) {
  require_share(options.train, "train");
  require_share(options.test, "test");
  if (options.image_size < 0) {
    throw InvalidArgument(cat("dataset '", options.name, "': image_size ", options.image_size,
                              " is negative; give a size in pixels, or 0 for the dataset's own"));
  }
  for (const auto& e : data::all_entries()) {
    if (options.name == e.name) return fit_image_size(e.open(options, group), options);
  }
  throw InvalidArgument(
      cat("unknown dataset '", options.name, "'; valid datasets: ", join(dataset_names(), ", ")));
}

}  // namespace

DatasetSplits open_dataset(const DatasetOptions& options) { return open_shares(options, nullptr); }

DatasetSplits open_dataset(DatasetOptions options, const ProcessGroup& pg) {
  fill_share(options.train, "train", pg);
  fill_share(options.test, "test", pg);
  return open_shares(options, pg.size() > 1 ? &pg : nullptr);
}

}  // namespace dtrain
