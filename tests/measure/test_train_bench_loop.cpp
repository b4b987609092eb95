// `dtrain bench train` runs train(), the loop of `dtrain train`: the same
// options and seed on the synthetic dataset take the same steps, loss for
// loss, and the benchmark's lines and result come from those steps.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dtrain/bench.h"
#include "dtrain/comm.h"
#include "dtrain/train.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

int count(const std::vector<std::string>& lines, const std::string& what) {
  int n = 0;
  for (const std::string& line : lines) n += line.find(what) != std::string::npos;
  return n;
}

TEST(TrainBenchLoop, TakesTheStepsOfDtrainTrainOnSyntheticDataWithTheSameLosses) {
  TrainBenchOptions b;
  b.train.model = "cnn";
  b.train.device = DeviceChoice::cpu();
  b.train.batch_size = 4;
  b.train.threads = 1;
  b.train.seed = 7;
  b.num_classes = 10;
  b.warmup_steps = 2;
  b.steps = 3;
  b.display_every = 1;
  std::vector<double> bench_losses;
  b.train.step_observer = [&](const TrainStep& s) {
    if (s.step > 0) bench_losses.push_back(s.loss);
  };
  std::vector<std::string> lines;
  const TrainBenchResult r =
      run_train_bench(b, ProcessGroup(), [&](const std::string& l) { lines.push_back(l); });

  // What `dtrain train --model cnn --dataset synthetic --data-dir 1x28x28:10:20
  // --batch-size 4 --epochs 1 --seed 7 --device cpu --threads 1` runs: 5 steps.
  TrainOptions t;
  t.model = "cnn";
  t.dataset.name = "synthetic";
  t.dataset.data_dir = "1x28x28:10:20";
  t.batch_size = 4;
  t.epochs = 1;
  t.seed = 7;
  t.device = DeviceChoice::cpu();
  t.threads = 1;
  t.progress = TrainOptions::Progress::kNone;
  std::vector<double> train_losses;
  t.step_observer = [&](const TrainStep& s) {
    if (s.step > 0) train_losses.push_back(s.loss);
  };
  train(t, ProcessGroup(), nullptr);

  ASSERT_EQ(train_losses.size(), 5u);
  EXPECT_EQ(bench_losses, train_losses);  // bit for bit: the same steps
  EXPECT_EQ(r.final_loss, train_losses.back());
  for (double loss : train_losses) EXPECT_TRUE(std::isfinite(loss));
  // A line per timed step and the total, as before.
  EXPECT_EQ(count(lines, "\ttotal images/sec: "), 3);
  EXPECT_EQ(count(lines, "total images/sec: "), 4);
  EXPECT_GT(r.images_per_sec, 0);
  EXPECT_EQ(r.options.image_size, 28);
}

TEST(TrainBenchLoop, BadBenchmarkOptionsNameTheirField) {
  TrainBenchOptions b;
  b.train.model = "cnn";
  b.train.device = DeviceChoice::cpu();
  b.steps = 0;
  EXPECT_EQ(testing::error_of([&] { run_train_bench(b, ProcessGroup()); }),
            "TrainBenchOptions::steps must be positive, got 0");
  b.steps = 1;
  b.train.batch_size = 0;
  EXPECT_EQ(testing::error_of([&] { run_train_bench(b, ProcessGroup()); }),
            "TrainOptions::batch_size must be positive, got 0");
}

}  // namespace
}  // namespace dtrain
