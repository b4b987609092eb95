// The image datasets' rows in the dataset registry (data/registry.h).

#include <algorithm>
#include <utility>

#include "common/strings.h"
#include "data/image/folder.h"
#include "data/image/io.h"
#include "data/image/location.h"
#include "data/image/packed.h"
#include "data/image/webdataset.h"
#include "data/registry.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"

namespace dtrain::data {
namespace {

constexpr int kImageNetSize = 224;

using image::Storage;

// The Storage of one open_dataset() call, read by all its splits: shared with
// the group while they open (Note [Shared listing]), never after, so the
// sources it is left in do not hold on to the group.
class OpenStorage {
 public:
  OpenStorage(const DatasetOptions& o, const ProcessGroup* group)
      : storage_(std::make_shared<Storage>(o.cache)) {
    storage_->share_with(group);
  }
  ~OpenStorage() { storage_->share_with(nullptr); }
  OpenStorage(const OpenStorage&) = delete;
  OpenStorage& operator=(const OpenStorage&) = delete;
  const std::shared_ptr<Storage>& get() const { return storage_; }
  Storage& operator*() const { return *storage_; }

 private:
  std::shared_ptr<Storage> storage_;
};

std::string require_dir(Storage& storage, const DatasetOptions& o, const char* what) {
  if (o.data_dir.empty()) {
    throw InvalidArgument(cat("dataset '", o.name, "' needs DatasetOptions::data_dir: ", what));
  }
  // Local directories and s3:// prefixes alike (Note [Data locations]).
  if (!storage.is_directory(o.data_dir)) {
    throw DataError(cat("dataset '", o.name, "': directory '", o.data_dir, "' does not exist"));
  }
  return o.data_dir;
}

// DATA_DIR/train and DATA_DIR/val (or DATA_DIR/test).
std::pair<std::string, std::string> split_dirs(Storage& storage, const DatasetOptions& o,
                                               const char* layout) {
  const std::string root = require_dir(storage, o, layout);
  const std::string train = root + "/train";
  if (!storage.is_directory(train)) {
    throw DataError(cat("dataset '", o.name, "': '", train, "' does not exist; expected ", layout));
  }
  for (const char* name : {"/val", "/test"}) {
    if (storage.is_directory(root + name)) return {train, root + name};
  }
  throw DataError(cat("dataset '", o.name, "': neither '", root, "/val' nor '", root,
                      "/test' exists; expected ", layout));
}

// The training crop / evaluation size of the folder datasets, and the size of
// synthetic samples.
int crop_size(const DatasetOptions& o) {
  return o.image_size > 0 ? static_cast<int>(o.image_size) : kImageNetSize;
}

DatasetSplits make_splits(std::shared_ptr<ImageSource> train, std::shared_ptr<ImageSource> test,
                          const DatasetOptions& o, TransformOptions train_t,
                          TransformOptions test_t) {
  DatasetSplits s;
  s.num_classes = static_cast<int64_t>(train->classes().size());
  s.sample_shape = {3, train_t.size, train_t.size};
  if (o.uint8_inputs) {
    // Both splits normalise with the same statistics (the dataset's).
    train_t.uint8_output = test_t.uint8_output = true;
    s.normalize = [t = train_t](const at::Tensor& pixels) { return normalize_batch(pixels, t); };
  }
  ImageLoaderOptions lo;
  lo.strict = o.strict;
  s.train = std::make_unique<ImageLoader>(std::move(train), o.train, train_t, lo);
  s.test = std::make_unique<ImageLoader>(std::move(test), o.test, test_t, lo);
  return s;
}

constexpr const char* kFolderLayout = "DATA_DIR/{train,val}/<class>/<image>.{jpg,png}";
constexpr const char* kPackedLayout =
    "DATA_DIR/{train,val}/ made by 'dtrain data pack IMAGEFOLDER DATA_DIR/train' (and val)";

using OpenSplit = std::shared_ptr<ImageSource> (*)(std::shared_ptr<Storage> storage,
                                                   const std::string& dir,
                                                   const std::vector<std::string>& classes);

// ImageNet-style splits (train plus val or test); the test split takes the
// training split's class order (an empty list lets the opener find them).
DatasetSplits open_imagenet_like(const DatasetOptions& o, const ProcessGroup* group,
                                 const char* layout, OpenSplit open_split) {
  OpenStorage storage(o, group);
  const auto [train_dir, test_dir] = split_dirs(*storage, o, layout);
  auto train = open_split(storage.get(), train_dir, {});
  auto test = open_split(storage.get(), test_dir, train->classes());
  return make_splits(std::move(train), std::move(test), o,
                     TransformOptions::imagenet_train(crop_size(o)),
                     TransformOptions::imagenet_eval(crop_size(o)));
}

DatasetSplits open_folder(const DatasetOptions& o, const ProcessGroup* group) {
  return open_imagenet_like(o, group, kFolderLayout, &image::open_image_folder);
}

DatasetSplits open_packed_dataset(const DatasetOptions& o, const ProcessGroup* group) {
  return open_imagenet_like(o, group, kPackedLayout, &image::open_packed);
}

constexpr const char* kWebDatasetLayout =
    "DATA_DIR/{train,val}/*.tar, or 'TRAIN_SHARDS::EVAL_SHARDS' brace lists such as "
    "'/data/train-{000000..000146}.tar::/data/val-{000000..000006}.tar'";

// A split's shards: the *.tar files of a directory in name order, or a brace list.
std::vector<std::string> webdataset_shards(Storage& storage, const DatasetOptions& o,
                                           const std::string& spec) {
  if (spec.find('{') != std::string::npos || !storage.is_directory(spec)) {
    return expand_braces(spec);
  }
  std::vector<std::string> shards;
  for (const image::Listed& f : storage.list(spec)) {
    const bool tar = f.name.size() > 4 && f.name.compare(f.name.size() - 4, 4, ".tar") == 0;
    if (tar && f.name.find('/') == std::string::npos) shards.push_back(spec + "/" + f.name);
  }
  if (shards.empty()) {
    throw DataError(cat("dataset '", o.name, "': no .tar shards in '", spec, "'; expected ",
                        kWebDatasetLayout));
  }
  return shards;
}

DatasetSplits open_webdataset_splits(const DatasetOptions& o, const ProcessGroup* group) {
  if (o.data_dir.empty()) {
    throw InvalidArgument(
        cat("dataset '", o.name, "' needs DatasetOptions::data_dir: ", kWebDatasetLayout));
  }
  OpenStorage storage(o, group);
  std::string train_spec, test_spec;
  const size_t sep = o.data_dir.find("::");
  if (sep != std::string::npos) {
    train_spec = o.data_dir.substr(0, sep);
    test_spec = o.data_dir.substr(sep + 2);
  } else {
    std::tie(train_spec, test_spec) = split_dirs(*storage, o, kWebDatasetLayout);
  }
  auto train =
      image::open_webdataset(storage.get(), webdataset_shards(*storage, o, train_spec), {});
  auto test = image::open_webdataset(storage.get(), webdataset_shards(*storage, o, test_spec),
                                     train->classes());
  return make_splits(std::move(train), std::move(test), o,
                     TransformOptions::imagenet_train(crop_size(o)),
                     TransformOptions::imagenet_eval(crop_size(o)));
}

// Fixed-size sets: random flip for training, pixels as they are otherwise.
DatasetSplits open_fixed(std::shared_ptr<ImageSource> train, std::shared_ptr<ImageSource> test,
                         const DatasetOptions& o, int size, std::array<float, 3> mean,
                         std::array<float, 3> std) {
  TransformOptions t;
  t.size = size;
  t.mean = mean;
  t.std = std;
  TransformOptions train_t = t;
  train_t.random_flip = true;
  return make_splits(std::move(train), std::move(test), o, train_t, t);
}

DatasetSplits open_stl(const DatasetOptions& o, const ProcessGroup*) {
  Storage storage;  // local files only: nothing to share
  const std::string dir = require_dir(storage, o, "the directory of train_X.bin (stl10_binary)");
  return open_fixed(open_stl10(dir, true), open_stl10(dir, false), o, 96,
                    {0.4467f, 0.4398f, 0.4066f}, {0.2603f, 0.2566f, 0.2713f});
}

DatasetSplits open_cifar(const DatasetOptions& o, const ProcessGroup*) {
  Storage storage;  // local files only: nothing to share
  const std::string dir = require_dir(storage, o, "the directory of data_batch_1.bin");
  return open_fixed(open_cifar10(dir, true), open_cifar10(dir, false), o, 32,
                    {0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f});
}

// --data-dir for synthetic data is an optional spec "CxHxW[:CLASSES[:SAMPLES]]";
// without one the samples are 3 x image_size x image_size (224 by default),
// as `dtrain bench train --image-size` makes them. (An explicit HxW that
// differs from image_size is resized: Note [Resizing to --image-size].)
DatasetSplits open_synthetic(const DatasetOptions& o, const ProcessGroup*) {
  std::vector<int64_t> shape{3, crop_size(o), crop_size(o)};
  long long classes = 1000, samples = 12800;
  if (!o.data_dir.empty()) {
    const std::vector<std::string> parts = split(o.data_dir, ':');
    const std::vector<std::string> dims = split(parts[0], 'x');
    long long v = 0;
    bool ok = dims.size() == 3 && parts.size() <= 3;
    for (size_t i = 0; ok && i < dims.size(); ++i) {
      ok = parse_int(dims[i], &v) && v > 0;
      shape[i] = v;
    }
    if (ok && parts.size() > 1) ok = parse_int(parts[1], &classes) && classes > 0;
    if (ok && parts.size() > 2) ok = parse_int(parts[2], &samples) && samples > 0;
    if (!ok) {
      throw InvalidArgument(cat("synthetic: DatasetOptions::data_dir '", o.data_dir,
                                "' is not CxHxW[:CLASSES[:SAMPLES]], e.g. 3x224x224:1000:12800"));
    }
  }
  DatasetSplits s;
  s.num_classes = classes;
  s.sample_shape = shape;
  s.train = make_synthetic_loader(shape, classes, samples, o.train, o.device);
  s.test = make_synthetic_loader(shape, classes, std::max(1LL, samples / 10), o.test, o.device);
  return s;
}

}  // namespace

std::vector<DatasetEntry> image_dataset_entries() {
  return {
      {"imagefolder", "JPEG/PNG class folders: DATA_DIR/{train,val}/<class>/<image>", &open_folder},
      {"packed", "an ImageFolder packed by 'dtrain data pack': DATA_DIR/{train,val}",
       &open_packed_dataset},
      {"webdataset",
       "WebDataset tar shards (.jpg/.png + .cls): DATA_DIR/{train,val}/*.tar or "
       "'TRAIN_SHARDS::EVAL_SHARDS' brace lists",
       &open_webdataset_splits},
      {"stl10", "STL-10 binary files (stl10_binary/) in DATA_DIR", &open_stl},
      {"cifar10", "CIFAR-10 binary batches (cifar-10-batches-bin/) in DATA_DIR", &open_cifar},
      {"synthetic",
       "random inputs made once; the data directory may be a spec CxHxW[:CLASSES[:SAMPLES]] "
       "(3x224x224:1000:12800)",
       &open_synthetic},
  };
}

}  // namespace dtrain::data
