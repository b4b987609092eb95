// The README's quick start, built with the project so that it stays correct.
// Run: build/dtrain run --nproc-per-node 2 -- build/examples/quickstart
#include <cstdio>

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
  dtrain::ProcessGroup pg = dtrain::init_process_group();  // RANK, WORLD_SIZE, MASTER_ADDR/PORT
  Net model;
  dtrain::DistributedDataParallel ddp(model.ptr(),
                                      pg);  // checks shapes, broadcasts rank 0's weights
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));

  dtrain::DatasetSplits splits =  // Fashion-MNIST, this rank's share
      dtrain::open_dataset(dtrain::DatasetOptions(), pg);

  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    splits.train->set_epoch(epoch);  // DistributedSampler: seed + epoch
    double loss_sum = 0, n = 0;
    for (dtrain::Batch& b : *splits.train) {
      opt.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(ddp.forward(b.inputs), b.targets);
      loss.backward();  // gradients averaged across ranks,
      opt.step();       // overlapped with backward
      loss_sum += loss.item<double>() * b.targets.size(0);
      n += b.targets.size(0);
    }
    auto totals = dtrain::all_reduce_sum(pg, {loss_sum, n});
    if (pg.rank() == 0)
      std::printf("epoch %lld loss %.4f\n", (long long)epoch, totals[0] / totals[1]);
  }
}
