#include "data/tensor_loader.h"

#include <ATen/ATen.h>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::data {

TensorLoader::TensorLoader(at::Tensor inputs, at::Tensor targets, const LoaderOptions& options,
                           DataFingerprint fingerprint)
    : fingerprint_(fingerprint),
      inputs_(std::move(inputs)),
      targets_(std::move(targets)),
      options_(options),
      sampler_(inputs_.size(0), sampler_options(options)) {
  if (options_.batch_size < 1) {
    throw InvalidArgument(cat("batch size must be positive, got ", options_.batch_size));
  }
  start_epoch(0);
}

void TensorLoader::start_epoch(int64_t epoch) {
  sampler_.set_epoch(epoch);
  resume_at(0);
}

void TensorLoader::resume_at(int64_t consumed) {
  sampler_.set_start(consumed);
  std::vector<int64_t> idx = sampler_.indices();
  order_ = at::tensor(idx, at::kLong);
  cursor_ = 0;
  next_batch_ = 0;
}

void TensorLoader::skip_to(int64_t batch_index) {
  if (batch_index < 0 || batch_index > batches_per_epoch()) {
    throw InvalidArgument(
        cat("TensorLoader: batch ", batch_index, " is outside [0, ", batches_per_epoch(), "]"));
  }
  // Batches are consecutive runs of the sampler's order, so batch b starts
  // at position b * batch_size.
  cursor_ = std::min<int64_t>(batch_index * options_.batch_size, order_.numel());
  next_batch_ = batch_index;
}

int64_t TensorLoader::batches_per_epoch() const { return loader_batches(sampler_, options_); }

bool TensorLoader::next(Batch& batch) {
  if (next_batch_ >= batches_per_epoch()) return false;
  // Exact loaders' last batches may be short or empty (LoaderOptions::exact).
  const int64_t take = loader_batch_rows(sampler_, options_, next_batch_);
  at::Tensor idx = order_.narrow(0, cursor_, take);
  cursor_ += take;
  ++next_batch_;
  batch.inputs = inputs_.index_select(0, idx);
  batch.targets = targets_.index_select(0, idx);
  return true;
}

}  // namespace dtrain::data
