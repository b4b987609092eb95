// The README's mixed-precision example, built with the project so that it
// stays correct: bf16 autocast on the CPU, fp16 with loss scaling on a GPU.
// Run: build/dtrain run --nproc-per-node 2 -- build/examples/amp
#include <cstdio>

#include <dtrain/amp.h>
#include <dtrain/comm.h>
#include <dtrain/data.h>
#include <dtrain/ddp.h>
#include <torch/torch.h>

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    return fc2->forward(torch::relu(fc1->forward(x.flatten(1))));
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

int main() {
  dtrain::ProcessGroup pg = dtrain::init_process_group();
  const bool gpu = torch::cuda::is_available();
  const auto device = gpu ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  const at::ScalarType dtype = gpu ? at::kHalf : at::kBFloat16;  // fp16 needs CUDA

  Net model;  // parameters stay fp32
  model->to(device);
  dtrain::DistributedDataParallel ddp(model.ptr(), pg);
  torch::optim::SGD opt(model->parameters(), 0.1);
  dtrain::GradScalerOptions so;
  so.enabled = dtrain::needs_grad_scaler(dtype);  // bf16: no scaling needed
  so.process_group = pg;                          // ranks skip steps together
  dtrain::GradScaler scaler(so);

  dtrain::DatasetSplits splits =
      dtrain::open_dataset(dtrain::DatasetOptions(), pg);  // this rank's share

  splits.train->start_epoch(0);
  dtrain::Batch b;
  int64_t step = 0, skipped = 0;
  while (splits.train->next(b)) {
    opt.zero_grad();
    torch::Tensor loss;
    {
      dtrain::AutocastGuard autocast(device, dtype);  // forward and loss in low precision
      loss = torch::nn::functional::cross_entropy(ddp.forward(b.inputs.to(device)),
                                                  b.targets.to(device));
    }                               // autocast off, cast cache cleared
    scaler.scale(loss).backward();  // DDP averages the scaled gradients
    scaler.unscale_(opt);           // true gradients, for clipping
    torch::nn::utils::clip_grad_norm_(model->parameters(), 5.0);
    if (!scaler.step(opt)) ++skipped;  // skipped on inf/NaN
    scaler.update();                   // adapt the scale
    if (++step % 200 == 0 && pg.rank() == 0) {
      std::printf("step %lld loss %.4f scale %.0f skipped %lld\n", (long long)step,
                  loss.item<double>(), scaler.get_scale(), (long long)skipped);
    }
  }
}
