// STL-10 and CIFAR-10 binary files, loaded into memory as HWC RGB images.
//
// STL-10 (stl10_binary/): {train,test}_X.bin hold N images of 3x96x96 bytes,
// each channel stored column-major (MATLAB order); {train,test}_y.bin hold N
// labels 1..10. CIFAR-10 (cifar-10-batches-bin/): data_batch_1..5.bin and
// test_batch.bin hold 10000 records of 1 label byte (0..9) + 3x32x32 bytes,
// each channel row-major.

#include <utility>
#include <vector>

#include "common/strings.h"
#include "data/fingerprint.h"
#include "data/image/io.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"

namespace dtrain {
namespace image {
namespace {

class RawSource : public ImageSource {
 public:
  RawSource(std::string origin, int side, std::vector<std::string> classes)
      : origin_(std::move(origin)), side_(side), classes_(std::move(classes)) {}

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  int64_t label(int64_t i) const override { return labels_[i]; }
  std::string name(int64_t i) const override { return cat(origin_, "[", i, "]"); }
  void read(int64_t i, SampleData& out) const override {
    out.encoded = false;
    out.image.reset(side_, side_, 3);
    const uint8_t* p = pixels_.data() + static_cast<size_t>(i) * bytes_per_image();
    std::copy(p, p + bytes_per_image(), out.image.pixels.begin());
  }
  const std::vector<std::string>& classes() const override { return classes_; }
  // Note [Dataset fingerprints]: labels in order, and the decoded pixels
  // (held in memory already).
  DataFingerprint fingerprint() const override {
    data::FingerprintBuilder b;
    for (const std::string& c : classes_) b.add_name(c);
    for (int64_t label : labels_) b.add_name(label);
    b.add_bytes(pixels_.data(), pixels_.size());
    return b.finish(size(), static_cast<int64_t>(classes_.size()));
  }

  size_t bytes_per_image() const { return static_cast<size_t>(side_) * side_ * 3; }
  /// Appends one image whose channel c, row y, column x is at
  /// planes[c * side^2 + y * row_step + x * col_step].
  void add(const uint8_t* planes, size_t row_step, size_t col_step, int64_t label) {
    const size_t plane = static_cast<size_t>(side_) * side_;
    for (int y = 0; y < side_; ++y) {
      for (int x = 0; x < side_; ++x) {
        for (int c = 0; c < 3; ++c)
          pixels_.push_back(planes[c * plane + y * row_step + x * col_step]);
      }
    }
    labels_.push_back(label);
  }
  void reserve(size_t n) {
    pixels_.reserve(n * bytes_per_image());
    labels_.reserve(n);
  }

 private:
  std::string origin_;
  int side_;
  std::vector<std::string> classes_;
  std::vector<uint8_t> pixels_;
  std::vector<int64_t> labels_;
};

// `dir` itself, or dir/sub when the files live there (as the archives unpack).
std::string locate(const std::string& dir, const std::string& sub, const std::string& probe,
                   const std::string& dataset) {
  for (const std::string& d : {dir, dir + "/" + sub}) {
    try {
      File::open_read(d + "/" + probe);
      return d;
    } catch (const DataError&) {
    }
  }
  throw DataError(cat(dataset, ": '", probe, "' is in neither '", dir, "' nor '", dir, "/", sub,
                      "'; set DatasetOptions::data_dir to the directory of the binary files"));
}

}  // namespace
}  // namespace image

std::shared_ptr<ImageSource> open_stl10(const std::string& dir, bool train) {
  using namespace image;
  const std::string split = train ? "train" : "test";
  const std::string root = locate(dir, "stl10_binary", split + "_X.bin", "stl10");
  std::vector<uint8_t> x, y;
  read_file(root + "/" + split + "_X.bin", x);
  read_file(root + "/" + split + "_y.bin", y);
  constexpr size_t kImage = 3 * 96 * 96;
  if (x.size() % kImage != 0 || x.size() / kImage != y.size() || y.empty()) {
    throw DataError(cat("stl10: '", root, "/", split, "_X.bin' (", x.size(), " bytes) and '", split,
                        "_y.bin' (", y.size(), " labels) do not match: expected ", kImage,
                        " bytes per image and one label each"));
  }
  auto source = std::make_shared<RawSource>(
      root + "/" + split + "_X.bin", 96,
      std::vector<std::string>{"airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey",
                               "ship", "truck"});
  source->reserve(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] < 1 || y[i] > 10) {
      throw DataError(cat("stl10: '", root, "/", split, "_y.bin' label ", i, " is ", int{y[i]},
                          ", expected 1..10"));
    }
    source->add(x.data() + i * kImage, /*row_step=*/1, /*col_step=*/96, y[i] - 1);
  }
  return source;
}

std::shared_ptr<ImageSource> open_cifar10(const std::string& dir, bool train) {
  using namespace image;
  std::vector<std::string> files;
  if (train) {
    for (int b = 1; b <= 5; ++b) files.push_back(cat("data_batch_", b, ".bin"));
  } else {
    files.push_back("test_batch.bin");
  }
  const std::string root = locate(dir, "cifar-10-batches-bin", files[0], "cifar10");
  auto source = std::make_shared<RawSource>(
      root + "/" + (train ? "data_batch_*.bin" : "test_batch.bin"), 32,
      std::vector<std::string>{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                               "horse", "ship", "truck"});
  constexpr size_t kRecord = 1 + 3 * 32 * 32;
  std::vector<uint8_t> bytes;
  for (const std::string& f : files) {
    read_file(root + "/" + f, bytes);
    if (bytes.empty() || bytes.size() % kRecord != 0) {
      throw DataError(cat("cifar10: '", root, "/", f, "' has ", bytes.size(),
                          " bytes, not a multiple of the ", kRecord, "-byte record"));
    }
    source->reserve(source->size() + bytes.size() / kRecord);
    for (size_t at = 0; at < bytes.size(); at += kRecord) {
      if (bytes[at] > 9) {
        throw DataError(cat("cifar10: '", root, "/", f, "' record ", at / kRecord, " has label ",
                            int{bytes[at]}, ", expected 0..9"));
      }
      source->add(bytes.data() + at + 1, /*row_step=*/32, /*col_step=*/1, bytes[at]);
    }
  }
  return source;
}

}  // namespace dtrain
