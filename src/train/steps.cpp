// Steps shared by training and evaluation (steps.h), and the public
// per-batch helpers of dtrain/train.h.

#include "train/steps.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/optim.h"
#include "dtrain/weights.h"

namespace dtrain {

ClassificationCounts& ClassificationCounts::operator+=(const ClassificationCounts& o) {
  samples += o.samples;
  top1 += o.top1;
  top5 += o.top5;
  loss_sum += o.loss_sum;
  return *this;
}

ClassificationCounts classification_counts(const at::Tensor& logits, const at::Tensor& targets) {
  ClassificationCounts c;
  c.samples = targets.size(0);
  if (c.samples == 0) return c;
  const int64_t k = std::min<int64_t>(5, logits.size(1));
  // topk(sorted): column 0 is the arg-max, as argmax(1) would give barring ties.
  const at::Tensor top = std::get<1>(logits.topk(k, /*dim=*/1, /*largest=*/true, /*sorted=*/true));
  const at::Tensor hit = top.eq(targets.view({-1, 1}));
  c.top1 = hit.select(1, 0).sum().item<int64_t>();
  c.top5 = hit.any(1).sum().item<int64_t>();
  c.loss_sum = torch::nn::functional::cross_entropy(
                   logits.to(at::kFloat), targets,
                   torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                   .item<double>();
  return c;
}

at::Tensor classification_loss(const at::Tensor& logits, const at::Tensor& targets,
                               double label_smoothing) {
  return torch::nn::functional::cross_entropy(
      logits, targets,
      torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(label_smoothing));
}

void to_channels_last(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  auto convert = [](at::Tensor t) {
    if (!t.defined() || t.dim() != 4) return;
    t.set_data(t.data().contiguous(at::MemoryFormat::ChannelsLast));
    if (t.grad().defined()) {
      t.mutable_grad() = t.grad().contiguous(at::MemoryFormat::ChannelsLast);
    }
  };
  for (auto& p : module.parameters(/*recurse=*/true)) convert(p);
  for (auto& b : module.buffers(/*recurse=*/true)) convert(b);
}

namespace detail {

std::shared_ptr<ImageClassifier> build_model(const std::string& name, const DatasetSplits& splits,
                                             at::Device device, bool channels_last,
                                             const std::string& init_weights) {
  ModelOptions mo;
  mo.in_channels = splits.sample_shape.at(0);
  mo.image_size = splits.sample_shape.at(1);
  mo.num_classes = splits.num_classes;
  auto model = make_model(name, mo);
  if (!init_weights.empty()) load_weights(*model, init_weights);
  model->to(device);
  if (channels_last) to_channels_last(*model);
  return model;
}

at::Tensor device_inputs(const at::Tensor& inputs, at::Device device, bool channels_last,
                         const InputTransform& normalize) {
  at::Tensor x = inputs.to(device, /*non_blocking=*/true);
  if (normalize) x = normalize(x);
  return channels_last && x.dim() == 4 ? x.contiguous(at::MemoryFormat::ChannelsLast) : x;
}

ClassificationCounts evaluate_split(ImageClassifier& model, Loader& loader, at::Device device,
                                    bool channels_last, std::vector<at::Tensor>* logits,
                                    const InputTransform& normalize) {
  torch::NoGradGuard no_grad;
  model.eval();
  ClassificationCounts counts;
  loader.start_epoch(0);
  Batch batch;
  while (loader.next(batch)) {
    at::Tensor out = model.forward(device_inputs(batch.inputs, device, channels_last, normalize));
    counts += classification_counts(out, batch.targets.to(device, /*non_blocking=*/true));
    if (logits) logits->push_back(out.to(at::kCPU, at::kFloat));
  }
  model.train();
  return counts;
}

void scaled_optimizer_step(torch::optim::Optimizer& optimizer, GradScaler& scaler,
                           const std::vector<at::Tensor>& params, double lr,
                           double clip_grad_norm) {  // Note [Mixed precision step]
  set_learning_rate(optimizer, lr);
  if (clip_grad_norm > 0) {
    scaler.unscale_(optimizer);
    dtrain::clip_grad_norm(params, clip_grad_norm);
  }
  scaler.step(optimizer);
  scaler.update();
  optimizer.zero_grad();
}

}  // namespace detail

}  // namespace dtrain
