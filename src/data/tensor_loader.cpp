#include "data/tensor_loader.h"

#include <ATen/ATen.h>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::data {

TensorLoader::TensorLoader(at::Tensor inputs, at::Tensor targets, const LoaderOptions& options)
    : inputs_(std::move(inputs)),
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

int64_t TensorLoader::batches_per_epoch() const {
  const int64_t n = sampler_.num_samples();
  return options_.drop_last ? n / options_.batch_size
                            : (n + options_.batch_size - 1) / options_.batch_size;
}

bool TensorLoader::next(Batch& batch) {
  const int64_t n = order_.numel();
  int64_t take = std::min<int64_t>(options_.batch_size, n - cursor_);
  if (take <= 0 || (options_.drop_last && take < options_.batch_size)) return false;
  at::Tensor idx = order_.narrow(0, cursor_, take);
  cursor_ += take;
  ++next_batch_;
  batch.inputs = inputs_.index_select(0, idx);
  batch.targets = targets_.index_select(0, idx);
  return true;
}

}  // namespace dtrain::data
