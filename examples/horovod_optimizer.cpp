// Horovod's way instead of the DDP wrapper: the model stays as it is, and
// DistributedOptimizer averages every gradient across ranks (fused into
// large buffers) just before the optimizer steps. Start from the same
// weights and optimizer state with the two broadcasts.
// Run: build/dtrain run --nproc-per-node 2 -- build/examples/horovod_optimizer [steps]
#include <cstdio>
#include <cstdlib>

#include <dtrain/comm.h>
#include <dtrain/ddp.h>
#include <dtrain/horovod.h>
#include <torch/torch.h>

#include "synthetic_task.h"

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300;
  dtrain::ProcessGroup pg = dtrain::init_process_group();
  const torch::Tensor teacher = example::teacher();

  torch::manual_seed(pg.rank());  // each rank starts elsewhere...
  torch::nn::Sequential model(torch::nn::Linear(example::kFeatures, 64), torch::nn::ReLU(),
                              torch::nn::Linear(64, example::kClasses));
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  dtrain::broadcast_parameters(*model, pg);    // ...until rank 0's weights
  dtrain::broadcast_optimizer_state(sgd, pg);  // and optimizer state are everyone's
  dtrain::DistributedOptimizer opt(sgd, pg);   // wraps sgd; sgd must outlive it

  auto [eval_x, eval_y] = example::eval_batch(teacher);
  auto eval_loss = [&] {
    torch::NoGradGuard no_grad;
    return torch::nn::functional::cross_entropy(model->forward(eval_x), eval_y).item<double>();
  };
  const double before = eval_loss();

  for (int64_t step = 0; step < steps; ++step) {
    auto [x, y] = example::batch(teacher, step, pg.rank());
    opt.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();  // local gradients
    opt.step();  // averaged across ranks (one fused allreduce), then sgd.step()
  }

  std::printf("rank %d: eval loss %.4f -> %.4f, weights checksum %.17g\n", pg.rank(), before,
              eval_loss(), example::checksum(model->parameters()));
}
