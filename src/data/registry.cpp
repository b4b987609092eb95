#include "data/registry.h"

#include <sys/stat.h>

#include <ATen/ATen.h>

#include "common/strings.h"
#include "data/tensor_loader.h"
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

DatasetSplits open_idx(const DatasetOptions& options, const IdxDataset& d) {
  std::string dir = options.data_dir.empty() ? d.default_dir : options.data_dir;
  if (dir.empty()) {
    throw InvalidArgument(cat("dataset '", d.name, "' has no default location; pass --data-dir "
                              "with the directory holding train-images-idx3-ubyte.gz"));
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::string fix = d.package && options.data_dir.empty()
                          ? cat("install it with 'apt-get install ", d.package,
                                "' or pass --data-dir")
                          : std::string("pass --data-dir with the directory holding "
                                        "train-images-idx3-ubyte.gz");
    throw DataError(cat("dataset '", d.name, "': directory '", dir, "' does not exist; ", fix));
  }
  IdxSplit train = load_idx_split(dir, /*train=*/true);
  IdxSplit test = load_idx_split(dir, /*train=*/false);
  DatasetSplits s;
  s.num_classes = 10;
  s.sample_shape = {1, train.images.size(1), train.images.size(2)};
  s.train = std::make_unique<TensorLoader>(normalise(train.images, d), train.labels, options.train);
  s.test = std::make_unique<TensorLoader>(normalise(test.images, d), test.labels, options.test);
  return s;
}

DatasetSplits open_fashion_mnist(const DatasetOptions& o) { return open_idx(o, kFashionMnist); }
DatasetSplits open_mnist(const DatasetOptions& o) { return open_idx(o, kMnist); }

std::vector<DatasetEntry> all_entries() {
  std::vector<DatasetEntry> rows = {
      {"fashion-mnist", "Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)",
       &open_fashion_mnist},
      {"mnist", "MNIST IDX files (--data-dir required)", &open_mnist},
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

DatasetSplits open_dataset(const DatasetOptions& options) {
  for (const auto& e : data::all_entries()) {
    if (options.name == e.name) return e.open(options);
  }
  throw InvalidArgument(
      cat("unknown dataset '", options.name, "'; valid datasets: ", join(dataset_names(), ", ")));
}

}  // namespace dtrain
