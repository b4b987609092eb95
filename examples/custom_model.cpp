// Your own model under DistributedDataParallel: any torch::nn::Module works,
// with parameters, buffers (BatchNorm's running statistics) and a forward of
// your own. Each rank trains on its own data; DDP averages the gradients
// during backward, so every rank ends with the same weights.
// Run: build/dtrain run --nproc-per-node 2 -- build/examples/custom_model [steps]
#include <cstdio>
#include <cstdlib>

#include <dtrain/comm.h>
#include <dtrain/ddp.h>
#include <torch/torch.h>

#include "synthetic_task.h"

// A residual MLP block: a custom forward around registered submodules.
struct ResidualBlockImpl : torch::nn::Module {
  explicit ResidualBlockImpl(int64_t width)
      : fc(register_module("fc", torch::nn::Linear(width, width))),
        norm(register_module("norm", torch::nn::BatchNorm1d(width))) {}
  torch::Tensor forward(torch::Tensor x) { return x + torch::relu(norm->forward(fc->forward(x))); }
  torch::nn::Linear fc;
  torch::nn::BatchNorm1d norm;  // its running statistics are buffers: DDP broadcasts
                                // rank 0's before every forward
};
TORCH_MODULE(ResidualBlock);

struct ClassifierImpl : torch::nn::Module {
  ClassifierImpl()
      : input(register_module("input", torch::nn::Linear(example::kFeatures, 64))),
        block(register_module("block", ResidualBlock(64))),
        output(register_module("output", torch::nn::Linear(64, example::kClasses))),
        temperature(register_parameter("temperature", torch::ones({1}))) {}  // a bare parameter
  torch::Tensor forward(torch::Tensor x) {
    return output->forward(block->forward(torch::relu(input->forward(x)))) / temperature;
  }
  torch::nn::Linear input;
  ResidualBlock block;
  torch::nn::Linear output;
  torch::Tensor temperature;
};
TORCH_MODULE(Classifier);

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300;
  dtrain::ProcessGroup pg = dtrain::init_process_group();  // RANK, WORLD_SIZE, MASTER_ADDR/PORT
  const torch::Tensor teacher = example::teacher();

  torch::manual_seed(pg.rank());  // different initial weights on purpose:
  Classifier model;               // DDP starts every rank from rank 0's
  // Wrap after the model is complete and on its device; do not add or replace
  // parameters afterwards.
  dtrain::DistributedDataParallel ddp(model.ptr(), pg);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  auto [eval_x, eval_y] = example::eval_batch(teacher);
  auto eval_loss = [&] {
    torch::NoGradGuard no_grad;
    model->eval();  // the bare module: no gradient synchronisation needed
    double loss =
        torch::nn::functional::cross_entropy(model->forward(eval_x), eval_y).item<double>();
    model->train();
    return loss;
  };
  const double before = eval_loss();

  for (int64_t step = 0; step < steps; ++step) {
    auto [x, y] = example::batch(teacher, step, pg.rank());  // this rank's data
    opt.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(ddp.forward(x), y);
    loss.backward();  // returns with gradients averaged over all ranks
    opt.step();       // so every rank takes the same step
  }

  std::printf("rank %d: eval loss %.4f -> %.4f, weights checksum %.17g\n", pg.rank(), before,
              eval_loss(), example::checksum(model->parameters()));
}
