// Synthetic data (tf_cnn_benchmarks --synthetic): one random batch generated
// at construction and handed out at every step, so input costs nothing.

#include <ATen/ATen.h>

#include <cmath>

#include "common/random.h"
#include "common/strings.h"
#include "data/fingerprint.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"

namespace dtrain {
namespace {

class SyntheticLoader : public Loader {
 public:
  SyntheticLoader(const std::vector<int64_t>& shape, int64_t num_classes, int64_t samples,
                  const LoaderOptions& o, c10::Device device)
      : options_(o) {
    if (o.batch_size < 1 || num_classes < 1 || samples < 1 || shape.size() != 3) {
      throw InvalidArgument(cat("synthetic data needs a positive batch size (", o.batch_size,
                                "), class count (", num_classes, ") and sample count (", samples,
                                ") and a {C, H, W} shape"));
    }
    data::FingerprintBuilder spec;
    for (int64_t d : shape) spec.add_name(d);
    fingerprint_ = spec.finish(samples, num_classes);
    // Samples of this rank, as DistributedSampler would pad them.
    samples_ = DistributedSampler(samples, sampler_options(o)).num_samples();
    SplitMix64 rng(mix_seed(o.seed, static_cast<uint64_t>(o.rank), 0x5e7417c));
    inputs_ = at::empty({o.batch_size, shape[0], shape[1], shape[2]}, at::kFloat);
    float* x = inputs_.data_ptr<float>();
    for (int64_t i = 0; i < inputs_.numel(); ++i) {  // Box-Muller
      const double u = 1.0 - rng.uniform(), v = rng.uniform();
      x[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v));
    }
    targets_ = at::empty({o.batch_size}, at::kLong);
    for (int64_t i = 0; i < o.batch_size; ++i) {
      targets_.data_ptr<int64_t>()[i] = static_cast<int64_t>(rng.below(num_classes));
    }
    inputs_ = inputs_.to(device);
    targets_ = targets_.to(device);
  }

  void start_epoch(int64_t) override { cursor_ = 0; }
  bool next(Batch& batch) override {
    if (cursor_ >= batches_per_epoch()) return false;
    const int64_t rows = std::min(options_.batch_size, samples_ - cursor_ * options_.batch_size);
    ++cursor_;
    batch.inputs = rows == options_.batch_size ? inputs_ : inputs_.narrow(0, 0, rows);
    batch.targets = rows == options_.batch_size ? targets_ : targets_.narrow(0, 0, rows);
    return true;
  }
  void skip_to(int64_t batch_index) override {
    if (batch_index < 0 || batch_index > batches_per_epoch()) {
      throw InvalidArgument(cat("synthetic loader: batch ", batch_index, " is outside [0, ",
                                batches_per_epoch(), "]"));
    }
    cursor_ = batch_index;
  }
  int64_t position() const override { return cursor_; }
  int64_t batches_per_epoch() const override {
    const int64_t b = options_.batch_size;
    return options_.drop_last ? samples_ / b : (samples_ + b - 1) / b;
  }
  int64_t samples_per_epoch() const override { return samples_; }
  DataFingerprint fingerprint() const override { return fingerprint_; }

 private:
  LoaderOptions options_;
  DataFingerprint fingerprint_;  // of the spec (Note [Dataset fingerprints])
  int64_t samples_ = 0;
  int64_t cursor_ = 0;
  at::Tensor inputs_;
  at::Tensor targets_;
};

}  // namespace

std::unique_ptr<Loader> make_synthetic_loader(std::vector<int64_t> sample_shape,
                                              int64_t num_classes, int64_t samples,
                                              const LoaderOptions& options, c10::Device device) {
  return std::make_unique<SyntheticLoader>(sample_shape, num_classes, samples, options, device);
}

}  // namespace dtrain
