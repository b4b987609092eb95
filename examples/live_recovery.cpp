// Live recovery in your own training loop (dtrain/live.h, docs/live_recovery.md):
// when a worker dies, hangs or is cut off, the others carry on in their
// running processes, at the same step, with the same global batch. The job
// has W0 logical ranks (WORLD_SIZE at start); each step every live worker
// runs the logical ranks mapped onto it, each on the micro-batch rank r of
// a W0-rank job would read (DistributedSampler rank r of W0), so every
// sample is used exactly once and the final weights are a failure-free
// run's. A replacement started with DTRAIN_LIVE_JOIN=1 joins at a step
// boundary and receives the state from a live worker.
//
// Run: build/dtrain run --recovery live --nproc-per-node 4 -- build/examples/live_recovery
// Options: --steps N (40)  --batch B (8, per logical rank)  --out DIR (sample
// log, weights)  --die-at-step S --die-rank R --die-how kill|stop (inject a
// failure: worker RANK R sends itself SIGKILL or SIGSTOP in step S, after
// its backward, or before it with --die-when before, so that the others'
// gradient allreduce of that step waits for it)
// --pause-ms M (sleep M ms per step, as a bigger model would take)
// --device cpu|cuda (cpu)  --backend gloo|nccl (gloo; nccl needs --device
// cuda and a GPU per worker: its communicators are aborted on a failure).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include <dtrain/comm.h>
#include <dtrain/device.h>
#include <dtrain/errors.h>
#include <dtrain/live.h>
#include <dtrain/sampler.h>
#include <torch/torch.h>

#include "synthetic_task.h"

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(example::kFeatures, 32))),
        norm(register_module("norm", torch::nn::BatchNorm1d(32))),
        drop(register_module("drop", torch::nn::Dropout(0.2))),
        fc2(register_module("fc2", torch::nn::Linear(32, example::kClasses))) {}
  torch::Tensor forward(torch::Tensor x) {
    return fc2->forward(drop->forward(torch::relu(norm->forward(fc1->forward(x)))));
  }
  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d norm;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

// Sample i of the dataset: a function of i alone.
torch::Tensor features(int64_t i) {
  return torch::sin(torch::arange(example::kFeatures, torch::kFloat) * (0.37f * (i % 997 + 1)) +
                    0.11f * static_cast<float>(i));
}

int run(int argc, char** argv) {
  int64_t steps = 40, batch = 8, die_at = -1, pause_ms = 0;
  int die_rank = -1;
  std::string out_dir, die_how = "kill", die_when = "after", device_name = "cpu", backend = "gloo";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--steps")
      steps = std::atoll(value.c_str());
    else if (flag == "--batch")
      batch = std::atoll(value.c_str());
    else if (flag == "--out")
      out_dir = value;
    else if (flag == "--die-at-step")
      die_at = std::atoll(value.c_str());
    else if (flag == "--die-rank")
      die_rank = std::atoi(value.c_str());
    else if (flag == "--die-how")
      die_how = value;
    else if (flag == "--die-when")
      die_when = value;
    else if (flag == "--pause-ms")
      pause_ms = std::atoll(value.c_str());
    else if (flag == "--device")
      device_name = value;
    else if (flag == "--backend")
      backend = value;
  }
  const torch::Tensor teacher = example::teacher();
  torch::manual_seed(7);  // the same initial weights everywhere (joiners get them anyway)
  Net model;
  // The rank's GPU (cuda:LOCAL_RANK of the visible ones) becomes current.
  const char* local_rank = std::getenv("LOCAL_RANK");
  const torch::Device device = dtrain::pick_device(dtrain::parse_device_choice(device_name),
                                                   local_rank ? std::atoi(local_rank) : 0);
  model->to(device);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  dtrain::LiveOptions options = dtrain::LiveOptions::from_env(dtrain::process_env());
  options.backend = backend;
  options.on_event = [](const dtrain::RecoveryEvent& e) {
    std::fprintf(stderr, "%s\n", e.to_string().c_str());
  };
  const bool joiner = options.join;
  dtrain::LiveGroup live(options);
  live.register_module(*model);
  live.register_optimizer(opt);
  live.wrap_ddp(*model);

  const int w0 = options.logical_world_size;
  const int64_t dataset = w0 * batch * steps;  // one epoch
  std::ofstream samples;
  if (!out_dir.empty()) samples.open(out_dir + "/samples." + std::to_string(::getpid()) + ".txt");

  try {
    while (live.step() < steps) {
      const dtrain::LiveStep& s = live.begin_step();
      const auto inject = [&](const std::string& when) {
        if (!joiner && s.step == die_at && when == die_when &&
            std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "-1") == die_rank) {
          std::fprintf(stderr, "live_recovery: RANK %d injects %s in step %lld (%s backward)\n",
                       die_rank, die_how.c_str(), static_cast<long long>(s.step), when.c_str());
          ::raise(die_how == "stop" ? SIGSTOP : SIGKILL);
        }
      };
      inject("before");
      std::vector<int64_t> used;
      opt.zero_grad();
      const bool ok = live.run_logical([&](int r) {
        dtrain::DistributedSampler sampler(
            dataset, dtrain::SamplerOptions().set_rank(r).set_world_size(w0).set_seed(3));
        const std::vector<int64_t> mine = sampler.indices();
        std::vector<torch::Tensor> xs;
        std::vector<int64_t> ids(mine.begin() + s.step * batch,
                                 mine.begin() + (s.step + 1) * batch);
        for (int64_t i : ids) xs.push_back(features(i));
        torch::Tensor x = torch::stack(xs);
        torch::Tensor y = x.mm(teacher).argmax(1);
        x = x.to(device);
        y = y.to(device);
        s.ddp->prepare_forward();
        torch::Tensor logits = model->forward(x);
        s.ddp->finish_forward({logits});
        torch::nn::functional::cross_entropy(logits, y).backward();
        used.insert(used.end(), ids.begin(), ids.end());
      });
      inject("after");
      if (pause_ms > 0) ::usleep(static_cast<useconds_t>(pause_ms * 1000));  // a slower model
      if (ok && live.should_commit()) {
        opt.step();
        if (samples.is_open()) {
          samples << s.step;
          for (int64_t i : used) samples << ' ' << i;
          samples << '\n' << std::flush;
        }
      }
    }
  } catch (const dtrain::FencedError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 3;
  } catch (const dtrain::BelowMinWorkersError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 4;
  } catch (const dtrain::JobEndedError& e) {
    std::fprintf(stderr, "%s\n", e.what());  // a replacement too late: nothing to do
    return 0;
  }
  std::vector<torch::Tensor> flat;
  for (const auto& p : model->parameters()) flat.push_back(p.detach().cpu().flatten());
  for (const auto& b : model->buffers()) {
    flat.push_back(b.detach().cpu().to(torch::kFloat).flatten());
  }
  torch::Tensor weights = torch::cat(flat);
  if (!out_dir.empty())
    torch::save(weights, out_dir + "/weights." + std::to_string(::getpid()) + ".pt");
  std::printf("live_recovery: member %s pid %d step %lld weights checksum %.17g\n",
              live.member().c_str(), static_cast<int>(::getpid()),
              static_cast<long long>(live.step()), weights.to(torch::kDouble).sum().item<double>());
  // What live recovery cost this member in steady state (dtrain::LiveStats).
  const dtrain::LiveStats st = live.stats();
  const double committed = static_cast<double>(std::max<int64_t>(1, st.committed_steps));
  std::printf(
      "live_recovery: live protocol %.3f ms per step (%.2f%% of %.2f s); buffer broadcast "
      "(plain DDP's too) %.3f ms per step\n",
      std::chrono::duration<double, std::milli>(st.protocol).count() / committed,
      st.protocol_share() * 100, std::chrono::duration<double>(st.wall).count(),
      std::chrono::duration<double, std::milli>(st.buffers).count() / committed);
  return 0;
}

// Errors outside the step loop (no WORLD_SIZE, a bad --device, a store that
// cannot be reached) end the program with one line, not an uncaught
// exception: 2 for a usage error, 1 otherwise.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "live_recovery: error: %s\n", e.what());
    return dynamic_cast<const dtrain::InvalidArgument*>(&e) ? 2 : 1;
  }
}
