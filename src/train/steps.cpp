// Steps shared by training and evaluation (steps.h), and the public
// per-batch helpers of dtrain/train.h.

#include "train/steps.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>

#include "common/strings.h"
#include "dtrain/config.h"
#include "dtrain/errors.h"
#include "dtrain/optim.h"
#include "dtrain/weights.h"
#if DTRAIN_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

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

void check_device(const std::string& name, const std::string& option) {
  if (name == "auto" || name == "cpu") return;
  if (name.rfind("cuda", 0) == 0) {
    if (!torch::cuda::is_available()) {
      throw InvalidArgument(
          cat(option, " ", name, ": no GPU is visible to this LibTorch; use ", option, " cpu"));
    }
    try {
      if (name == "cuda" || at::Device(name).is_cuda()) return;
    } catch (const c10::Error&) {
    }
  }
  throw InvalidArgument(cat(option, " '", name, "' is not one of auto, cpu, cuda, cuda:N"));
}

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

at::Device pick_device(const std::string& name, int local_rank) {
  detail::check_device(name, "device");
  if (name == "cpu" || (name == "auto" && !torch::cuda::is_available())) {
    return at::Device(at::kCPU);
  }
  const at::Device device =
      name == "auto" || name == "cuda"
          ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(std::max(local_rank, 0) %
                                                                torch::cuda::device_count()))
          : at::Device(name);
#if DTRAIN_HAVE_CUDA
  // The rank's GPU becomes the current one whatever the backend, so that no
  // rank creates a context on GPU 0 (Gloo with CUDA tensors, cuBLAS handles).
  c10::cuda::set_device(device.index());
#endif
  return device;
}

at::Device pick_device(const std::string& name, const ProcessGroup& pg) {
  return pick_device(name, pg.local_rank());
}

}  // namespace dtrain
