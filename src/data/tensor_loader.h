#pragma once
// A Loader over a dataset held in memory as one tensor (MNIST-sized data):
// each batch gathers this rank's sampled rows.

#include "dtrain/data.h"

namespace dtrain::data {

class TensorLoader : public Loader {
 public:
  /// `inputs` [N, ...] float32, `targets` [N] int64; both kept by reference.
  /// `fingerprint`: the dataset's (fingerprint() returns it).
  TensorLoader(at::Tensor inputs, at::Tensor targets, const LoaderOptions& options,
               DataFingerprint fingerprint = {});

  void start_epoch(int64_t epoch) override;
  bool next(Batch& batch) override;
  void skip_to(int64_t batch_index) override;
  void resume_at(int64_t consumed) override;
  int64_t start_sample() const override { return sampler_.start(); }
  int64_t position() const override { return next_batch_; }
  int64_t batches_per_epoch() const override;
  int64_t samples_per_epoch() const override { return sampler_.num_samples(); }
  DataFingerprint fingerprint() const override { return fingerprint_; }

 private:
  DataFingerprint fingerprint_;
  at::Tensor inputs_;
  at::Tensor targets_;
  LoaderOptions options_;
  DistributedSampler sampler_;
  at::Tensor order_;        // this epoch's indices, int64
  int64_t cursor_ = 0;      // next sample position in order_
  int64_t next_batch_ = 0;  // the batch next() returns
};

}  // namespace dtrain::data
