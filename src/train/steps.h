#pragma once
// Pieces shared by train() (trainer.cpp) and evaluate() (eval.cpp): the
// device, the model for a dataset, moving a batch to the device, and one
// pass over an evaluation split.

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "dtrain/amp.h"
#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/models.h"
#include "dtrain/train.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace dtrain::detail {

/// Throws InvalidArgument naming `option` (the field that holds `name`, e.g.
/// "TrainOptions::device") when `name` is not auto, cpu, cuda or cuda:N, or
/// names CUDA while no GPU is visible (the message says to use cpu).
/// The optimizer step of train() and the live trainer (Note [Mixed precision
/// step]): sets `lr`; with clip_grad_norm > 0 unscales and clips `params`;
/// steps through the scaler (which skips an overflowed step), updates it and
/// zeroes the gradients.
void scaled_optimizer_step(torch::optim::Optimizer& optimizer, GradScaler& scaler,
                           const std::vector<at::Tensor>& params, double lr, double clip_grad_norm);

void check_device(const std::string& name, const std::string& option);

/// make_model(name) sized for `splits` (channels, image size, classes),
/// initialised from the current CPU generator, then from `init_weights` when
/// not empty (load_weights(), dtrain/weights.h), moved to `device` (and to
/// channels-last when asked).
std::shared_ptr<ImageClassifier> build_model(const std::string& name, const DatasetSplits& splits,
                                             at::Device device, bool channels_last,
                                             const std::string& init_weights = "");

/// The batch's inputs on `device` (non-blocking: the image loader pins its
/// buffers when CUDA is present), normalised there by `normalize` when given
/// (DatasetSplits::normalize), channels-last when asked.
at::Tensor device_inputs(const at::Tensor& inputs, at::Device device, bool channels_last,
                         const InputTransform& normalize = {});

/// One pass over `loader`'s epoch 0 in eval mode without gradients; this
/// rank's counts. When `logits` is not null, this rank's logits (CPU, float)
/// are appended to it batch by batch. Leaves the model in train mode.
ClassificationCounts evaluate_split(ImageClassifier& model, Loader& loader, at::Device device,
                                    bool channels_last, std::vector<at::Tensor>* logits = nullptr,
                                    const InputTransform& normalize = {});

}  // namespace dtrain::detail
