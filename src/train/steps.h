#pragma once
// Pieces shared by train() (trainer.cpp, live_trainer.cpp) and evaluate()
// (eval.cpp): the device check (device.cpp), the model for a dataset, moving
// a batch to the device, one pass over an evaluation split, the optimizer
// step. What only the two training drivers share is in training_state.h.

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "dtrain/amp.h"
#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/device.h"
#include "dtrain/models.h"
#include "dtrain/train.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace dtrain::detail {

/// The optimizer step of train() and the live trainer (Note [Mixed precision
/// step]): sets `lr`; with clip_grad_norm > 0 unscales and clips `params`;
/// steps through the scaler (which skips an overflowed step), updates it and
/// zeroes the gradients.
void scaled_optimizer_step(torch::optim::Optimizer& optimizer, GradScaler& scaler,
                           const std::vector<at::Tensor>& params, double lr, double clip_grad_norm);

/// Throws InvalidArgument naming `option` (the field that holds `choice`,
/// e.g. "TrainOptions::device") when `choice` is malformed (an index other
/// than -1 on auto or cpu, below -1 on cuda), names CUDA while no GPU is
/// visible (the message says to use cpu), or a GPU index that is not visible.
void check_device(const DeviceChoice& choice, const std::string& option);

/// Whether `choice` resolves to a CUDA device: cuda, or auto while a GPU is
/// visible.
bool uses_cuda(const DeviceChoice& choice);

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
