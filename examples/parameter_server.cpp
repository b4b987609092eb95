// Parameter-server training (MXNet's kvstore, ps-lite's protocol): servers
// hold the weights and apply the optimizer; workers push gradients and pull
// the updated weights. Every process runs this same program; DMLC_ROLE says
// which role it plays, and KVStore::create() serves the scheduler and server
// roles until the job ends and then says so (served()), so only workers run
// the training loop.
// Run: build/dtrain run --nproc-per-node 2 --ps-servers 1 -- build/examples/parameter_server
// [steps]
//      (2 workers, 1 server and a scheduler on this machine; docs/ps.md for many)
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <dtrain/kvstore.h>
#include <dtrain/kvstore_torch.h>
#include <torch/torch.h>

#include "synthetic_task.h"

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300;
  // dist_sync: a server sums the pushes of all workers for a key, then updates.
  dtrain::KVStoreOpen kv = dtrain::KVStore::create("dist_sync");
  if (kv.served()) return 0;  // a scheduler or server: the job has ended (MXNet exits 0 here)
  const torch::Tensor teacher = example::teacher();

  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(example::kFeatures, 64), torch::nn::ReLU(),
                              torch::nn::Linear(64, example::kClasses));
  std::vector<torch::Tensor> params = model->parameters();  // contiguous float32 on the CPU

  // The servers run SGD on the summed gradient; rescale_grad turns the sum
  // of the workers' gradients into their mean.
  dtrain::OptimizerSpec sgd;
  sgd.learning_rate = 0.05;
  sgd.momentum = 0.9;
  sgd.rescale_grad = 1.0 / kv->num_workers();
  kv->set_optimizer(sgd);  // sent by rank 0; every worker waits for it
  for (size_t key = 0; key < params.size(); ++key) {
    // One key per parameter: rank 0's initial value is stored, and every
    // worker pulls it into its own parameter (written in place, no copy).
    kv->broadcast(static_cast<int>(key), dtrain::kv_values(params[key].detach().clone()),
                  dtrain::kv_output(params[key]));
  }

  auto [eval_x, eval_y] = example::eval_batch(teacher);
  auto eval_loss = [&] {
    torch::NoGradGuard no_grad;
    return torch::nn::functional::cross_entropy(model->forward(eval_x), eval_y).item<double>();
  };
  const double before = eval_loss();

  for (int64_t step = 0; step < steps; ++step) {
    auto [x, y] = example::batch(teacher, step, kv->rank());  // this worker's data
    model->zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();
    // Push every gradient and pull the updated weights, all in flight at once.
    std::vector<dtrain::KVHandle> pending;
    for (size_t key = 0; key < params.size(); ++key) {
      pending.push_back(kv->pushpull_async(static_cast<int>(key),
                                           dtrain::kv_values(params[key].grad()),
                                           dtrain::kv_output(params[key])));
    }
    for (auto& h : pending) h.wait(kv->timeout());  // the tensors must outlive the wait
  }

  std::printf("worker %d: eval loss %.4f -> %.4f, weights checksum %.17g\n", kv->rank(), before,
              eval_loss(), example::checksum(params));
  kv->close();  // leave the job; the scheduler and servers exit when all workers have
}
