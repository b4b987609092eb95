// Checkpoints: rank 0 saves the model, the optimizer and the step every few
// steps; a restarted job (by hand, or by `dtrain run --max-restarts`) loads
// the newest valid checkpoint and continues where it stopped, with the same
// result as a run that never stopped. The files open in Python
// (torch.load(path)["model"]).
// Run: build/dtrain run --nproc-per-node 2 -- build/examples/checkpoint_resume DIR STEPS
//      (run again with more STEPS to continue from DIR's newest checkpoint)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <dtrain/checkpoint.h>
#include <dtrain/comm.h>
#include <dtrain/ddp.h>
#include <torch/torch.h>

#include "synthetic_task.h"

constexpr int64_t kSaveEvery = 5;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: checkpoint_resume DIR STEPS\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t steps = std::atoll(argv[2]);
  dtrain::ProcessGroup pg = dtrain::init_process_group();
  const torch::Tensor teacher = example::teacher();

  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(example::kFeatures, 64), torch::nn::ReLU(),
                              torch::nn::Linear(64, example::kClasses));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  // Every rank reads the same newest checkpoint (a shared directory); files
  // that are incomplete or corrupt are passed over and named.
  int64_t start = 0;
  std::vector<std::string> skipped;
  if (auto found = dtrain::load_latest_checkpoint(dir, &skipped)) {
    dtrain::load_model_state(*model, found->checkpoint.model, found->path);
    dtrain::load_optimizer_state(opt, found->checkpoint.optimizer, found->path);  // momentum
    start = found->checkpoint.step;
    if (pg.rank() == 0)
      std::printf("resumed from %s at step %lld\n", found->path.c_str(),
                  static_cast<long long>(start));
  }
  for (const auto& why : skipped) std::fprintf(stderr, "skipped %s\n", why.c_str());

  // Wrap after loading. The constructor is collective: no rank saves before
  // every rank has read.
  dtrain::DistributedDataParallel ddp(model.ptr(), pg);
  for (int64_t step = start; step < steps; ++step) {
    auto [x, y] = example::batch(teacher, step, pg.rank());  // a function of the step:
    opt.zero_grad();                                         // resuming replays nothing
    torch::nn::functional::cross_entropy(ddp.forward(x), y).backward();
    opt.step();
    if ((step + 1) % kSaveEvery == 0 && pg.rank() == 0) {  // one writer per directory
      dtrain::Checkpoint c;
      c.model = dtrain::model_state(*model);
      c.optimizer = dtrain::optimizer_state(opt);
      c.step = step + 1;  // steps taken: where the next run starts
      c.world_size = pg.size();
      dtrain::save_checkpoint(dir, c);  // atomic; keeps the newest 3
    }
  }
  std::printf("rank %d: step %lld, weights checksum %.17g\n", pg.rank(),
              static_cast<long long>(steps), example::checksum(model->parameters()));
}
