#pragma once
// The image pipeline: decoding (libjpeg-turbo, libpng), transforms on 8-bit RGB
// buffers, image sources (ImageFolder, packed shards, STL-10, CIFAR-10), the
// threaded ImageLoader and the data-preparation tools behind `dtrain data`.
//
// A sample goes: ImageSource::read (encoded bytes or raw pixels)
//   -> probe_image (size from the header)
//   -> plan_sample (crop box and flip from a per-sample seed)
//   -> decode_image (JPEG: only the crop's rows and columns, DCT-domain
//      downscaled when the crop is at least twice the output size)
//   -> render_sample (bilinear crop+resize, flip, normalise into CHW).
// Every step is a pure function of the bytes and the seed, so the loader's
// output does not depend on its thread count.
//
/// Example:
/// ```
/// void read_imagenet(const dtrain::ProcessGroup& pg) {
///   dtrain::ImageLoader loader(dtrain::open_image_folder("/data/imagenet/train"),
///                              dtrain::LoaderOptions()
///                                  .set_batch_size(256)
///                                  .set_threads(8)
///                                  .set_rank(pg.rank())
///                                  .set_world_size(pg.size()),
///                              dtrain::TransformOptions::imagenet_train(224), {});
///   loader.set_epoch(0);
///   for (dtrain::Batch& batch : loader) {
///     (void)batch;  // [256, 3, 224, 224]
///   }
/// }
/// ```

#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/data.h"
#include "dtrain/options.h"

namespace dtrain {

// ---- Decoding ---------------------------------------------------------------

/// An 8-bit image, rows of width * channels bytes (HWC), RGB when channels == 3.
struct Image {
  int width = 0;
  int height = 0;
  int channels = 0;
  std::vector<uint8_t> pixels;

  /// Sets the shape and resizes `pixels` (keeps its capacity for reuse).
  void reset(int w, int h, int c) {
    width = w, height = h, channels = c;
    pixels.resize(static_cast<size_t>(w) * h * c);
  }
};

enum class ImageFormat { kJpeg, kPng };

struct ImageInfo {
  ImageFormat format = ImageFormat::kJpeg;
  int width = 0;
  int height = 0;
};

/// Reads format and size from the header of an encoded JPEG or PNG (detected
/// by its magic bytes, not the file name). Throws DataError for anything else
/// or a corrupt header. Thread-safe.
ImageInfo probe_image(const uint8_t* data, size_t size);

/// A region in source pixel coordinates (left, top, width, height).
/// RandomResizedCrop yields integers, as torchvision computes them.
struct CropBox {
  double x = 0;
  double y = 0;
  double width = 0;
  double height = 0;
};

/// Where a decode lies in the original image: pixel (u, v) of the decoded
/// buffer is pixel (u + x, v + y) of the original scaled by (scale_x, scale_y).
struct DecodedRegion {
  double scale_x = 1.0;
  double scale_y = 1.0;
  int x = 0;
  int y = 0;
};

/// Decodes a JPEG or PNG into RGB `out` (reusing its buffer). Grayscale,
/// palette, 16-bit and alpha inputs are converted to 8-bit RGB (alpha is
/// dropped, as PIL's convert("RGB") does); CMYK JPEGs are converted too.
///
/// JPEG only, both optional:
///  - `min_scale` in (0, 1] allows DCT-domain downscaling: the image is decoded
///    at the smallest TurboJPEG scaling factor n/8 that is >= min_scale, which
///    is several times faster when the target is much smaller than the image;
///  - `roi` (original pixels) limits the decode to that region plus a pixel of
///    margin, widened to whole iMCU columns: rows above it are skipped, rows
///    below it never decoded.
/// Returns where `out` lies in the original. Throws DataError for corrupt data
/// (a JPEG truncated inside the decoded rows included). Thread-safe.
DecodedRegion decode_image(const uint8_t* data, size_t size, Image& out, double min_scale = 1.0,
                           const CropBox* roi = nullptr);

// ---- Transforms ---------------------------------------------------------------

struct TransformOptions {
  enum class Mode {
    /// Keep the image as is; it must already be size x size (STL-10, CIFAR-10).
    kNone,
    /// torchvision RandomResizedCrop(size, scale, ratio): training.
    kRandomResizedCrop,
    /// torchvision Resize(resize) + CenterCrop(size): evaluation.
    kResizeCenterCrop,
  };
  Mode mode = Mode::kNone;
  /// Output height and width.
  int size = 224;
  /// kResizeCenterCrop: the shorter side is resized to this first.
  int resize = 256;
  /// kRandomResizedCrop: bounds of the crop's area fraction and aspect ratio.
  double scale_min = 0.08;
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;
  double ratio_max = 4.0 / 3.0;
  /// Mirror left-right with probability 1/2.
  bool random_flip = false;
  /// Normalize: (x / 255 - mean) / std per channel (RGB).
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f};
  std::array<float, 3> std{0.229f, 0.224f, 0.225f};
  /// Hand over uint8 pixels instead of normalised floats (a quarter of the
  /// bytes to copy to a GPU); normalise there with normalize_batch().
  bool uint8_output = false;
  /// Use TurboJPEG's DCT-domain scaling when the crop is >= 2x the output.
  bool dct_scaling = true;
  /// Decode only the rows and iMCU columns of a JPEG that the crop needs.
  bool region_decode = true;

  /// RandomResizedCrop(size) + RandomHorizontalFlip, ImageNet statistics.
  static TransformOptions imagenet_train(int size);
  /// Resize(size * 8 / 7) + CenterCrop(size), ImageNet statistics.
  static TransformOptions imagenet_eval(int size);

  DTRAIN_SETTER(TransformOptions, mode)
  DTRAIN_SETTER(TransformOptions, size)
  DTRAIN_SETTER(TransformOptions, resize)
  DTRAIN_SETTER(TransformOptions, scale_min)
  DTRAIN_SETTER(TransformOptions, scale_max)
  DTRAIN_SETTER(TransformOptions, ratio_min)
  DTRAIN_SETTER(TransformOptions, ratio_max)
  DTRAIN_SETTER(TransformOptions, random_flip)
  DTRAIN_SETTER(TransformOptions, mean)
  DTRAIN_SETTER(TransformOptions, std)
  DTRAIN_SETTER(TransformOptions, uint8_output)
  DTRAIN_SETTER(TransformOptions, dct_scaling)
  DTRAIN_SETTER(TransformOptions, region_decode)
};

/// What to do to one sample: a pure function of its size and seed.
struct SamplePlan {
  /// The source region that is resized onto the size x size output.
  CropBox region;
  /// Bilinear taps are clamped to this region: the crop for a crop-then-resize
  /// (RandomResizedCrop), the whole image for a resize-then-crop (evaluation).
  CropBox bounds;
  bool flip = false;
};

/// torchvision's RandomResizedCrop.get_params: up to 10 draws of area in
/// [scale_min, scale_max] x image area and log-uniform aspect ratio; the first
/// that fits is placed uniformly; otherwise a centre crop clamped to the ratio
/// bounds. `uniform` returns uniform doubles in [0, 1).
template <typename Uniform>
CropBox random_resized_crop_box(int width, int height, const TransformOptions& o,
                                Uniform&& uniform);

/// torchvision's Resize(resize) + CenterCrop(size) as one region of the
/// source: the part of the original image that ends up in the output.
CropBox center_crop_box(int width, int height, const TransformOptions& o);

/// The crop and flip for a `width` x `height` image and a per-sample seed.
SamplePlan plan_sample(int width, int height, uint64_t seed, const TransformOptions& o);

/// The smallest decode scale that still leaves the plan's region at least
/// o.size pixels wide and high; 1 unless that is <= 1/2 (or !o.dct_scaling).
double min_decode_scale(const SamplePlan& plan, const TransformOptions& o);

/// The part of the original image render_sample() reads for `plan` (the
/// region of interest to decode).
CropBox sample_footprint(const SamplePlan& plan);

/// Renders `plan` (in original image coordinates) from `src`, a decode of the
/// original or of part of it (DCT-downscaled, cropped) located by `where`:
/// bilinear crop+resize (half-pixel centres, taps clamped to plan.bounds like
/// torchvision's crop-then-resize), mirror if plan.flip, then into `dst` as
/// [3, size, size] CHW, uint8 or normalised float per o.uint8_output.
void render_sample(const Image& src, const DecodedRegion& where, const SamplePlan& plan,
                   const TransformOptions& o, void* dst);

/// Normalises a uint8 [B, 3, H, W] batch (from uint8_output) on its device:
/// float (x / 255 - mean) / std.
at::Tensor normalize_batch(const at::Tensor& uint8_batch, const TransformOptions& o);

// ---- Sources ----------------------------------------------------------------

/// One sample as a source hands it over: encoded bytes (JPEG/PNG) or pixels.
struct SampleData {
  bool encoded = true;
  std::vector<uint8_t> bytes;  // when encoded
  Image image;                 // when !encoded
};

/// A random-access set of labelled images. Implementations must make size(),
/// label(), name() and read() safe to call from many threads at once.
///
/// Preconditions (for implementations): the same index gives the same sample
/// for the object's lifetime, and every rank's source lists the same samples
/// in the same order, since ranks share the dataset by index.
class ImageSource {
 public:
  virtual ~ImageSource() = default;
  virtual int64_t size() const = 0;
  /// Class index of sample i, in [0, classes().size()).
  virtual int64_t label(int64_t i) const = 0;
  /// Where sample i comes from (a path, "shard-00003.bin@1234"), for messages.
  virtual std::string name(int64_t i) const = 0;
  /// Fills `out` with sample i (reusing its buffers). Throws DataError if it
  /// cannot be read.
  virtual void read(int64_t i, SampleData& out) const = 0;
  /// Class names, index = label.
  virtual const std::vector<std::string>& classes() const = 0;
  /// How many samples from i on (i, i + 1, ...; at most `max`, at least 1)
  /// read_run() takes from one run of bytes with one request: a packed
  /// shard's or a WebDataset tar's neighbours (Note [Block order] in
  /// dtrain/sampler.h). Called with the fetcher's lock held: it must be
  /// cheap and do no I/O (the built-in sources look at their index).
  /// Default: 1.
  virtual int64_t run_length(int64_t i, int64_t max) const {
    (void)i;
    return max < 1 ? 0 : 1;
  }
  /// Fills out[0, count) with samples first, ..., first + count - 1, where
  /// count <= run_length(first, count), as read() would each. Throws
  /// DataError if the run cannot be read (the caller may then read() them
  /// one by one to find which). Default: read() each.
  virtual void read_run(int64_t first, int64_t count, SampleData* out) const {
    for (int64_t k = 0; k < count; ++k) read(first + k, out[k]);
  }
  /// Whether read() goes over the network (`s3://` data, even through a data
  /// cache): the loader then reads ahead on threads of its own
  /// (ImageLoaderOptions::fetch_threads). Default: false.
  virtual bool remote() const { return false; }
  /// What identifies the samples and their order (DataFingerprint in
  /// dtrain/data.h), from what opening learned; no sample is read. Safe to
  /// call while read() runs on other threads. The default: the classes and
  /// every sample's name() and label(); the built-in sources add sizes and
  /// ETags, and name samples relative to their folder.
  virtual DataFingerprint fingerprint() const;
};

/// An ImageFolder as torchvision builds it: one subdirectory per class, classes
/// sorted by name; files found recursively, ordered by (directory, name);
/// .jpg/.jpeg/.png (any case) kept. `class_names` (optional) fixes the label
/// mapping, e.g. the training split's for the validation split; a class folder
/// not in it is an error. Throws DataError naming the path for a missing or
/// empty directory or a class folder without images. `root` may be an
/// `s3://bucket/prefix`: class folders are key prefixes, listed once, and
/// each image is read with one GET carrying the listing's ETag (or from
/// `cache`, when it has a directory: DataCacheOptions).
std::shared_ptr<ImageSource> open_image_folder(const std::string& root,
                                               const std::vector<std::string>& class_names = {},
                                               const DataCacheOptions& cache = {});

/// WebDataset tar shards (as the webdataset library writes them with Python's
/// tarfile): each sample's .jpg/.jpeg/.png member is the image and its .cls
/// member the label. Samples are numbered in the order of `shards`, then of
/// the members within a shard (the sampler permutes them; so an epoch
/// resumes exactly from a checkpoint's sample cursor). Opening reads every
/// shard's tar headers and cls members, not the images (an `s3://` shard:
/// with 8 MiB GETs front to back). Classes are named
/// "0" .. "K-1" for the largest label K-1 unless `class_names` (the training
/// split's) fixes them. Throws DataError naming the shard and the offset for
/// a corrupt tar, a sample without image or cls, or a label out of range.
/// With a `cache` directory, an `s3://` shard is copied whole to the cache
/// when it is indexed and read from there (DataCacheOptions).
std::shared_ptr<ImageSource> open_webdataset(const std::vector<std::string>& shards,
                                             const std::vector<std::string>& class_names = {},
                                             const DataCacheOptions& cache = {});

/// Expands a shard list as WebDataset's braceexpand does:
/// "shards-{000000..000002}.tar" gives three names (zero-padded as the
/// bounds are), "{a,b}" two, several groups every combination in order.
/// Throws InvalidArgument for an unbalanced or nested brace or a range of
/// more than 1,000,000 numbers.
std::vector<std::string> expand_braces(const std::string& pattern);

/// A packed dataset written by pack_image_folder (format in image/packed.h),
/// in a directory or under an `s3://bucket/prefix` (ranged GETs; with a
/// `cache` directory, each shard is copied whole to the cache at its first
/// read and read from there: DataCacheOptions).
std::shared_ptr<ImageSource> open_packed(const std::string& dir,
                                         const std::vector<std::string>& class_names = {},
                                         const DataCacheOptions& cache = {});

/// STL-10 binary split ("train" or "test") from `dir` or dir/stl10_binary.
std::shared_ptr<ImageSource> open_stl10(const std::string& dir, bool train);

/// CIFAR-10 binary batches (data_batch_1..5 or test_batch) from `dir` or
/// dir/cifar-10-batches-bin.
std::shared_ptr<ImageSource> open_cifar10(const std::string& dir, bool train);

// ---- Loader -----------------------------------------------------------------

struct ImageLoaderOptions {
  /// Batches decoded ahead of the consumer (each one preallocated buffer).
  int prefetch_batches = 4;
  /// A corrupt or unreadable image throws DataError from next() instead of
  /// being replaced by another sample of its batch and counted.
  bool strict = false;
  /// Allocate batch buffers in pinned memory when a CUDA device is present.
  bool pin_memory = true;
  /// Longest next() waits for a batch before throwing TimeoutError.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  /// Threads that read samples ahead of the decode threads, in the sampler's
  /// order, each with one request open at a time, so that decoding does not
  /// wait on the network in steady state (Note [Fetch ahead] in
  /// src/data/image/fetcher.cpp). -1 (default): 16 when the source is
  /// remote (ImageSource::remote(): `s3://` data), else 0. 0: each decode
  /// thread reads its own samples. At most 256. Samples are fetched at most
  /// prefetch_batches batches past the highest position being decoded (a
  /// run of neighbours read with one request, LoaderOptions::shuffle_block,
  /// may end up to 64 positions past that); a decode thread that gets ahead
  /// of them reads its sample itself (so a loader has at most fetch_threads
  /// + threads requests open). As an epoch ends they read the next epoch's
  /// first batch, which start_epoch(epoch + 1) then takes without reading
  /// it again (Note [Across the epoch boundary]); start_epoch and the
  /// destructor wait for those reads in flight (each bounded by the
  /// source's deadlines), and after a loader's last epoch they were one
  /// batch read for nothing.
  int fetch_threads = -1;
  /// No new read ahead starts while the samples read and not yet decoded
  /// hold this many bytes (memory: this plus, per fetch thread, the run it
  /// reads -- one sample, or up to 64 neighbours and 16 MiB -- and a sample).
  int64_t fetch_bytes = int64_t{64} << 20;

  DTRAIN_SETTER(ImageLoaderOptions, prefetch_batches)
  DTRAIN_SETTER(ImageLoaderOptions, strict)
  DTRAIN_SETTER(ImageLoaderOptions, pin_memory)
  DTRAIN_SETTER(ImageLoaderOptions, timeout)
  DTRAIN_SETTER(ImageLoaderOptions, fetch_threads)
  DTRAIN_SETTER(ImageLoaderOptions, fetch_bytes)
};

/// Decodes and augments an ImageSource into batches with worker threads.
///
/// Order: DistributedSampler(seed, epoch, rank). Sample i of epoch e is
/// augmented with the seed mix(seed, e, i), so batches are identical for any
/// thread count. Workers write straight into `prefetch_batches` preallocated
/// batch buffers; a buffer is reused only once the consumer has dropped every
/// reference to the tensors next() handed out (else a new one is allocated).
/// A bad sample (non-strict) is replaced by the next good sample of the same
/// batch, so every rank still gets full batches; it is counted in
/// skipped_samples() and named in a warning on stderr.
///
/// Not thread-safe (one consumer). The destructor stops and joins the workers,
/// also in the middle of an epoch.
///
/// Preconditions: the loader options carry this rank's share (rank and
/// world_size set, as open_dataset(options, pg) does; InvalidArgument
/// otherwise) and every rank uses the same source, seed and batch size.
class ImageLoader : public Loader {
 public:
  ImageLoader(std::shared_ptr<const ImageSource> source, LoaderOptions loader,
              TransformOptions transform, ImageLoaderOptions options);
  ~ImageLoader() override;
  ImageLoader(const ImageLoader&) = delete;
  ImageLoader& operator=(const ImageLoader&) = delete;

  void start_epoch(int64_t epoch) override;
  /// Blocks at most options.timeout; rethrows a worker's DataError (strict).
  bool next(Batch& batch) override;
  int64_t batches_per_epoch() const override;
  int64_t samples_per_epoch() const override;

  /// Resumes the current epoch at `batch_index` (a checkpoint's position):
  /// the next next() returns that batch, identical to an uninterrupted run.
  void skip_to(int64_t batch_index) override;
  /// Restarts the workers after `consumed` samples of the epoch's global order.
  void resume_at(int64_t consumed) override;
  int64_t start_sample() const override;
  /// Batches handed out so far in this epoch (the position to checkpoint).
  int64_t position() const override;
  /// The source's fingerprint (ImageSource::fingerprint).
  DataFingerprint fingerprint() const override;
  /// Bad samples replaced since construction.
  int64_t skipped_samples() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

/// Inputs of a fixed random batch set, generated once: costs nothing per step
/// (tf_cnn_benchmarks --synthetic). `samples` per epoch, values ~ N(0, 1),
/// made on the CPU from the seed and rank (the same values on every device)
/// and handed out on `device`.
std::unique_ptr<Loader> make_synthetic_loader(std::vector<int64_t> sample_shape,
                                              int64_t num_classes, int64_t samples,
                                              const LoaderOptions& options,
                                              c10::Device device = c10::kCPU);

// ---- Preparation (`dtrain data`) -----------------------------------------------

struct PrepareStats {
  int64_t classes = 0;
  int64_t images = 0;
  int64_t bytes = 0;
};

/// ImageNet's training archive (a tar of per-class tars, e.g.
/// ILSVRC2012_img_train.tar) into out_dir/<wnid>/<file>. Reads the ustar
/// headers itself; nested tars are read in place, not extracted to disk.
PrepareStats prepare_imagenet_train(const std::string& archive, const std::string& out_dir);

/// Moves the flat validation images into out_dir/<wnid>/ from either
///  - LOC_val_solution.csv ("ImageId,PredictionString", the first token of the
///    prediction string is the wnid), synsets_file empty; or
///  - the devkit's ILSVRC2012_validation_ground_truth.txt (line k: the
///    ILSVRC2012_ID of ILSVRC2012_val_<k, 8 digits>.JPEG) with synsets_file
///    listing one wnid per line in ILSVRC2012_ID order (first token used).
/// Files are renamed (copied and removed across filesystems).
PrepareStats prepare_imagenet_val(const std::string& images_dir, const std::string& labels_file,
                                  const std::string& out_dir, const std::string& synsets_file = "");

struct PackOptions {
  /// A shard is closed once it reaches this size.
  int64_t shard_size_bytes = int64_t{1} << 30;
  /// Write the samples in seeded_permutation(N, seed, 0)'s order instead of
  /// the folder's, so that neighbours -- what a shuffle block reads together
  /// (LoaderOptions::shuffle_block) -- are not one class. Default: false.
  bool shuffle = false;
  uint64_t seed = 0;
};

/// Packs an ImageFolder (same order and labels as open_image_folder, or its
/// seeded shuffle: PackOptions::shuffle) into
/// out_dir/shard-NNNNN.bin files plus out_dir/index.bin. Either may be an
/// `s3://bucket/prefix`; a shard for S3 is uploaded as one object when it is
/// complete (held in memory up to shard_size_bytes), index.bin last.
PrepareStats pack_image_folder(const std::string& folder, const std::string& out_dir,
                               const PackOptions& options = {});

// ---- Implementation of the template above -------------------------------------

namespace detail {
CropBox fallback_crop_box(int width, int height, const TransformOptions& o);
double round_half_even(double x);
}  // namespace detail

template <typename Uniform>
CropBox random_resized_crop_box(int width, int height, const TransformOptions& o,
                                Uniform&& uniform) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(o.ratio_min), log_hi = std::log(o.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * (o.scale_min + (o.scale_max - o.scale_min) * uniform());
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * uniform());
    const int w = static_cast<int>(detail::round_half_even(std::sqrt(target_area * aspect)));
    const int h = static_cast<int>(detail::round_half_even(std::sqrt(target_area / aspect)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      CropBox box{0, 0, static_cast<double>(w), static_cast<double>(h)};
      box.y = std::floor(uniform() * (height - h + 1));
      box.x = std::floor(uniform() * (width - w + 1));
      return box;
    }
  }
  return detail::fallback_crop_box(width, height, o);
}

}  // namespace dtrain
