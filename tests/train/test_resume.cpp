// dtrain::train() with --checkpoint-dir: a run that stops and resumes ends
// where an uninterrupted one does; resuming works across world sizes; bad
// checkpoints are skipped with a log line; the CLI flags. fp16 with its loss
// scaler on a GPU (skipped without one).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/cuda.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>

#include "dtrain/checkpoint.h"
#include "dtrain/errors.h"
#include "dtrain/powersgd.h"
#include "dtrain/train.h"
#include "support/ranks.h"
#include "support/shell.h"
#include "train/fixtures.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

class Resume : public testing::ScratchDir {
 protected:
  void SetUp() override {
    ScratchDir::SetUp();
    // 96 training samples: 12 steps per epoch on one rank, 6 on two, 4 on three.
    testing::write_tiny_dataset(dir_ / "data", 96, 32);
  }

  TrainOptions options(const std::string& ckpt, int64_t epochs) const {
    TrainOptions o;
    o.model = "cnn";
    o.dataset.name = "mnist";
    o.dataset.data_dir = (dir_ / "data").string();
    o.epochs = epochs;
    o.batch_size = 8;
    o.eval_batch_size = 32;
    o.optimizer.lr = 0.05;
    o.optimizer.momentum = 0.9;
    o.threads = 1;
    o.device = DeviceChoice::cpu();
    o.checkpoint_dir = (dir_ / ckpt).string();
    return o;
  }

  // Trains on `world` ranks (threads; one rank: no group) and returns rank 0's log.
  std::string run(const TrainOptions& o, int world = 1,
                  std::vector<EpochMetrics>* history = nullptr) {
    std::ostringstream log;
    if (world == 1) {
      auto h = train(o, ProcessGroup(), &log);
      if (history) *history = h;
    } else {
      std::mutex mu;
      testing::run_ranks(
          world,
          [&](const ProcessGroup& pg) {
            auto h = train(o, pg, pg.rank() == 0 ? &log : nullptr);
            std::lock_guard<std::mutex> lock(mu);
            if (history && pg.rank() == 0) *history = h;
          },
          std::chrono::seconds(120));
    }
    return log.str();
  }

  // Trains on two ranks (threads), each with its own hook from make_hook()
  // (a hook keeps per-rank state), and returns rank 0's log.
  std::string run_hooked(const TrainOptions& o,
                         const std::function<std::shared_ptr<CommHook>()>& make_hook) {
    std::ostringstream log;
    testing::run_ranks(
        2,
        [&](const ProcessGroup& pg) {
          TrainOptions mine = o;
          mine.ddp.comm_hook = make_hook();
          train(mine, pg, pg.rank() == 0 ? &log : nullptr);
        },
        std::chrono::seconds(120));
    return log.str();
  }

  // Returns the uninterrupted run's final model.
  NamedTensors adamw_cosine_resume_equals_straight(const std::string& amp,
                                                   const std::string& device = "cpu");

  Checkpoint latest(const std::string& ckpt) const {
    auto found = load_latest_checkpoint((dir_ / ckpt).string());
    if (!found) throw Error("no checkpoint in " + ckpt);
    return found->checkpoint;
  }

  // Removes checkpoints after `step`, as if the run had died right after it.
  void crash_after(const std::string& ckpt, int64_t step) const {
    for (const std::string& p : list_checkpoints((dir_ / ckpt).string())) {
      auto found = step_in(p);
      if (found > step) {
        fs::remove(p);
        fs::remove(p + ".crc32");
      }
    }
  }

  static int64_t step_in(const std::string& path) {
    const std::string name = fs::path(path).filename().string();  // checkpoint-00000012.pt
    return std::stoll(name.substr(11, name.size() - 14));
  }
};

// The largest difference between two optimizer states' tensors (same layout).
double max_difference(const OptimizerState& a, const OptimizerState& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.state.size(), b.state.size());
  double worst = 0;
  for (size_t i = 0; i < a.state.size() && i < b.state.size(); ++i) {
    EXPECT_EQ(a.state[i].size(), b.state[i].size()) << "parameter " << i;
    for (const auto& [name, t] : a.state[i]) {
      auto it = b.state[i].find(name);
      if (it == b.state[i].end()) {
        ADD_FAILURE() << name << " of parameter " << i << " missing";
        continue;
      }
      worst = std::max(worst, (t - it->second).abs().max().item<double>());
    }
  }
  return worst;
}

double max_difference(const NamedTensors& a, const NamedTensors& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    worst = std::max(worst, (a[i].second - b[i].second).abs().max().item<double>());
  }
  return worst;
}

TEST_F(Resume, TwoEpochsStraightEqualOneEpochThenAResumedSecond) {
  run(options("straight", 2));
  const std::string first = run(options("resumed", 1));
  EXPECT_NE(
      first.find("no checkpoint in " + (dir_ / "resumed").string() + "; starting from scratch"),
      std::string::npos)
      << first;
  const std::string second = run(options("resumed", 2));
  EXPECT_NE(second.find("resumed from " + (dir_ / "resumed" / "checkpoint-00000012.pt").string() +
                        " (epoch 2, step 12)"),
            std::string::npos)
      << second;
  EXPECT_EQ(second.find("epoch 1/2"), std::string::npos) << "epoch 1 is not trained again";
  EXPECT_NE(second.find("epoch 2/2"), std::string::npos) << second;

  const Checkpoint a = latest("straight"), b = latest("resumed");
  EXPECT_EQ(a.step, 24);
  EXPECT_EQ(b.step, 24);
  EXPECT_EQ(b.epoch, 2);
  EXPECT_LE(max_difference(a.model, b.model), 1e-6);
  EXPECT_LE(max_difference(a.optimizer, b.optimizer), 1e-6);
}

// AdamW (two weight-decay groups) + cosine with warm-up + label smoothing +
// clipping, optionally under bf16 or fp16 autocast: straight vs. stopped after
// step 7 and resumed. Under fp16 the loss scaler's state continues too.
NamedTensors Resume::adamw_cosine_resume_equals_straight(const std::string& amp,
                                                         const std::string& device) {
  TrainOptions o = options(amp + "-straight", 2);
  o.amp = parse_amp_mode(amp);
  o.device = parse_device_choice(device);
  o.optimizer.type = OptimizerType::kAdamW;
  o.optimizer.lr = 2e-3;
  o.optimizer.weight_decay = 0.05;
  o.optimizer.norm_weight_decay = 0.0;  // two parameter groups
  o.optimizer.bias_weight_decay = 0.0;
  o.lr_schedule = LrScheduleKind::kCosine;
  o.lr_warmup_steps = 5;
  o.lr_min = 1e-4;
  o.label_smoothing = 0.1;
  o.clip_grad_norm = 1.0;
  o.metrics_file = (dir_ / "straight.jsonl").string();
  std::vector<EpochMetrics> straight_history;
  run(o, 1, &straight_history);
  const Checkpoint straight = latest(amp + "-straight");
  EXPECT_EQ(straight.optimizer.type, OptimizerType::kAdamW);
  if (straight.optimizer.groups.size() != 2u) {
    ADD_FAILURE() << straight.optimizer.groups.size() << " parameter groups, expected 2";
    return {};
  }
  EXPECT_DOUBLE_EQ(straight.optimizer.groups[1].weight_decay, 0.0);
  const double adamw_steps = straight.optimizer.state.at(0).at("step").item<double>();
  if (amp == "fp16") {  // a step whose gradients overflowed is skipped
    EXPECT_GT(adamw_steps, 0.0);
    EXPECT_LE(adamw_steps, 24.0);
  } else {
    EXPECT_EQ(adamw_steps, 24.0);
  }

  o.checkpoint_dir = (dir_ / (amp + "-resumed")).string();
  o.metrics_file = (dir_ / "resumed.jsonl").string();
  o.checkpoint_every_steps = 7;  // mid-epoch 1, then the next run crosses the epoch boundary
  o.keep_checkpoints = 10;
  run(o);
  crash_after(amp + "-resumed", 7);
  std::vector<EpochMetrics> resumed_history;
  const std::string log = run(o, 1, &resumed_history);
  EXPECT_NE(log.find("(epoch 1, step 7)"), std::string::npos) << log;
  const Checkpoint resumed = latest(amp + "-resumed");
  EXPECT_EQ(resumed.step, 24);
  const double model_diff = max_difference(straight.model, resumed.model);
  const double state_diff = max_difference(straight.optimizer, resumed.optimizer);
  std::cout << "  amp " << amp << ": max difference after resume: model " << model_diff
            << ", AdamW state " << state_diff << "\n";
  EXPECT_LE(model_diff, 1e-6);
  EXPECT_LE(state_diff, 1e-6);
  // The lr of the last step is the schedule's, in the metrics too.
  LrSchedule s = lr_schedule_for(o, 12, 1);
  if (straight_history.size() != 2u) {
    ADD_FAILURE() << straight_history.size() << " epochs in the history, expected 2";
    return {};
  }
  EXPECT_DOUBLE_EQ(straight_history[1].lr, lr_at(s, 23));
  EXPECT_DOUBLE_EQ(resumed.optimizer.groups[0].lr, lr_at(s, 23));
  EXPECT_NE(testing::read_text(o.metrics_file).find("\"lr\":"), std::string::npos);
  if (amp == "fp16") {
    // The scale and its growth tracker went on from the step-7 checkpoint:
    // a fresh scaler (2^16, tracker 0) would end elsewhere.
    EXPECT_EQ(testing::read_text(o.metrics_file).find("\"loss_scale\":null"), std::string::npos);
    if (!straight.scaler || !resumed.scaler || resumed_history.empty()) {
      ADD_FAILURE() << "no loss scaler state in the checkpoints or no resumed epoch";
      return {};
    }
    std::cout << "  fp16 loss scale after 24 steps: " << straight.scaler->scale << " (tracker "
              << straight.scaler->growth_tracker << ")\n";
    EXPECT_EQ(resumed.scaler->scale, straight.scaler->scale);
    EXPECT_EQ(resumed.scaler->growth_tracker, straight.scaler->growth_tracker);
    EXPECT_GT(straight_history[1].loss_scale, 0);
    EXPECT_EQ(resumed_history.back().loss_scale, straight_history[1].loss_scale);
  } else {
    EXPECT_NE(testing::read_text(o.metrics_file).find("\"loss_scale\":null"), std::string::npos);
  }
  EXPECT_NE(testing::read_text(o.metrics_file).find("\"test_top5\":"), std::string::npos);
  return straight.model;
}

TEST_F(Resume, AdamWWithCosineScheduleAndWarmUpResumedMidEpochEqualsTheUninterruptedRun) {
  adamw_cosine_resume_equals_straight("none");
}

TEST_F(Resume, TheSameUnderBf16AutocastEqualsTheUninterruptedRun) {
  const NamedTensors bf16 = adamw_cosine_resume_equals_straight("bf16");
  const NamedTensors fp32 = adamw_cosine_resume_equals_straight("none");
  EXPECT_GT(max_difference(bf16, fp32), 1e-4) << "autocast changed the arithmetic";
}

// fp16 needs CUDA (skipped without a GPU). cuDNN is made deterministic so that
// the two runs compute the same gradients and overflow at the same steps.
class ResumeOnGpu : public Resume {};

TEST_F(ResumeOnGpu, Fp16WithLossScalingResumedMidEpochEqualsTheUninterruptedRun) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible to LibTorch";
  at::Context& ctx = at::globalContext();
  const bool deterministic = ctx.deterministicCuDNN(), benchmark = ctx.benchmarkCuDNN();
  ctx.setDeterministicCuDNN(true);
  ctx.setBenchmarkCuDNN(false);
  adamw_cosine_resume_equals_straight("fp16", "cuda");
  ctx.setDeterministicCuDNN(deterministic);
  ctx.setBenchmarkCuDNN(benchmark);
}

TEST_F(Resume, MidEpochResumeOnTwoRanksReproducesTheUninterruptedRun) {
  TrainOptions o = options("run", 2);
  o.checkpoint_every_steps = 4;  // 6 steps per epoch: 4 and 8 are mid-epoch
  o.keep_checkpoints = 10;
  run(o, 2);
  EXPECT_EQ(list_checkpoints(o.checkpoint_dir).size(), 3u) << "steps 4, 8 and the final 12";
  const Checkpoint uninterrupted = latest("run");
  EXPECT_EQ(uninterrupted.step, 12);

  crash_after("run", 8);
  const Checkpoint mid = latest("run");
  EXPECT_EQ(mid.epoch, 1);
  EXPECT_EQ(mid.samples_in_epoch, 2 * 8 * 2);
  const std::string log = run(o, 2);
  EXPECT_NE(log.find("(epoch 2, step 8)"), std::string::npos) << log;
  EXPECT_NE(log.find("epoch 2 continues at batch 2 of 6"), std::string::npos) << log;
  EXPECT_LE(max_difference(uninterrupted.model, latest("run").model), 1e-6);

  // From the middle of the first epoch too, across the epoch boundary.
  crash_after("run", 4);
  run(o, 2);
  EXPECT_LE(max_difference(uninterrupted.model, latest("run").model), 1e-6);
}

TEST_F(Resume, PowerSGDResumedOnTwoRanksWithEveryRanksHookStateEqualsTheUninterruptedRun) {
  TrainOptions o = options("powersgd", 2);
  o.checkpoint_every_steps = 4;  // compression starts at iteration 2: step 8 has its state
  o.keep_checkpoints = 10;
  auto hook = [] {
    return powersgd_hook(
        PowerSGDOptions().set_matrix_approximation_rank(2).set_start_powersgd_iter(2));
  };
  run_hooked(o, hook);
  const Checkpoint uninterrupted = latest("powersgd");
  EXPECT_EQ(uninterrupted.step, 12);
  ASSERT_TRUE(uninterrupted.comm_hook_state);
  std::map<std::string, at::Tensor> saved(uninterrupted.comm_hook_state->begin(),
                                          uninterrupted.comm_hook_state->end());
  ASSERT_TRUE(saved.count("rank0.iter") && saved.count("rank1.iter"));
  EXPECT_EQ(saved["rank1.iter"].item<int64_t>(), 12);
  const std::string error = "error.fc2.weight";
  ASSERT_TRUE(saved.count("rank0." + error) && saved.count("rank1." + error));
  EXPECT_FALSE(torch::equal(saved["rank0." + error], saved["rank1." + error]))
      << "error feedback is per rank";

  crash_after("powersgd", 8);
  const std::string log = run_hooked(o, hook);
  EXPECT_NE(log.find("(epoch 2, step 8)"), std::string::npos) << log;
  EXPECT_LE(max_difference(uninterrupted.model, latest("powersgd").model), 1e-6);

  // The same checkpoint without the hook's state: a line says so, and the
  // run no longer ends where the uninterrupted one does.
  crash_after("powersgd", 8);
  Checkpoint stateless = latest("powersgd");
  stateless.comm_hook_state.reset();
  save_checkpoint(o.checkpoint_dir, stateless, 10);
  const std::string fresh = run_hooked(o, hook);
  EXPECT_NE(fresh.find("comm hook powersgd: the checkpoint has no state for world size 2; "
                       "starting its state (error feedback, warm start) afresh"),
            std::string::npos)
      << fresh;
  EXPECT_GT(max_difference(uninterrupted.model, latest("powersgd").model), 1e-6);
}

TEST_F(Resume, ADifferentWorldSizeContinuesFromTheSamplerPosition) {
  TrainOptions o = options("run", 2);
  o.checkpoint_every_steps = 4;
  o.keep_checkpoints = 10;
  run(o, 2);
  crash_after("run", 4);  // epoch 1, 4 x 8 x 2 = 64 of 96 samples consumed
  fs::copy(dir_ / "run", dir_ / "shrink");

  // Three ranks take 24 samples a step: they continue at sample 64 (Note
  // [Sample cursor]), 32 left padded to 33, 2 steps, then 4 in epoch 2.
  std::vector<EpochMetrics> history;
  std::string log = run(o, 3, &history);
  EXPECT_NE(log.find("resumed from " + (dir_ / "run" / "checkpoint-00000004.pt").string() +
                     " (epoch 1, step 4)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("epoch 1 continues after sample 64 of its global order (saved by 2 "
                     "rank(s) x batch 8 after 64 samples)"),
            std::string::npos)
      << log;
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[1].world_size, 3);
  Checkpoint grown = latest("run");
  EXPECT_EQ(grown.step, 4 + 2 + 4);
  EXPECT_EQ(grown.world_size, 3);

  // One rank: batch 64 / 8 = 8 of 12, then 12 steps in epoch 2.
  TrainOptions one = o;
  one.checkpoint_dir = (dir_ / "shrink").string();
  log = run(one, 1);
  EXPECT_NE(log.find("epoch 1 continues at batch 8 of 12"), std::string::npos) << log;
  EXPECT_EQ(latest("shrink").step, 4 + 4 + 12);
}

TEST_F(Resume, ExactlyOnceResumesAtFiveRanksWhereSomeRanksLastBatchIsEmpty) {
  TrainOptions o = options("run", 2);
  o.dataset.train.exact = true;
  o.checkpoint_every_steps = 4;
  o.keep_checkpoints = 10;
  run(o, 2);
  crash_after("run", 4);  // 64 of 96 samples consumed
  // Five ranks of batch 6 take 30 a step: 2 steps for the 32 left, the second
  // with one sample on ranks 0 and 1 and none on ranks 2-4; epoch 2 takes 4.
  TrainOptions five = o;
  five.batch_size = 6;
  std::vector<EpochMetrics> history;
  const std::string log = run(five, 5, &history);
  EXPECT_NE(log.find("epoch 1 continues after sample 64 of its global order"), std::string::npos)
      << log;
  ASSERT_EQ(history.size(), 2u);
  for (const EpochMetrics& m : history) EXPECT_TRUE(std::isfinite(m.train_loss)) << m.epoch;
  EXPECT_EQ(latest("run").step, 4 + 2 + 4);
}

// Note [Block order]: with a shuffle block a step still consumes B x W
// positions, so an exactly-once epoch resumes at another world size and batch.
TEST_F(Resume, ExactlyOnceWithAShuffleBlockResumesAtFourRanksOfAnotherBatch) {
  TrainOptions o = options("run", 2);
  o.dataset.train.exact = true;
  o.dataset.train.shuffle_block = 4;
  o.checkpoint_every_steps = 4;
  o.keep_checkpoints = 10;
  run(o, 2);
  crash_after("run", 4);  // 4 x 8 x 2 = 64 of 96 samples consumed
  fs::copy(dir_ / "run", dir_ / "other");
  // Four ranks of batch 12 (three blocks each) take 48 a step: 1 step for
  // the 32 left, then 2 in epoch 2.
  TrainOptions four = o;
  four.batch_size = 12;
  std::vector<EpochMetrics> history;
  const std::string log = run(four, 4, &history);
  EXPECT_NE(log.find("epoch 1 continues after sample 64 of its global order"), std::string::npos)
      << log;
  ASSERT_EQ(history.size(), 2u);
  for (const EpochMetrics& m : history) EXPECT_TRUE(std::isfinite(m.train_loss)) << m.epoch;
  EXPECT_EQ(latest("run").step, 4 + 1 + 2);
  EXPECT_EQ(latest("run").shuffle_block, 4);

  // Mid-epoch, another block is another order: refused, naming both.
  TrainOptions other = o;
  other.checkpoint_dir = (dir_ / "other").string();
  other.dataset.train.shuffle_block = 8;
  const std::string error = testing::error_of([&] { run(other); });
  EXPECT_NE(error.find("TrainOptions::dataset.train.shuffle_block 8 differs from the 4 of " +
                       (dir_ / "other" / "checkpoint-00000004.pt").string() +
                       ", saved mid-epoch after 64 samples"),
            std::string::npos)
      << error;
}

TEST_F(Resume, ACorruptNewestCheckpointIsSkippedWithALogLineAndMetricsAreAppended) {
  TrainOptions o = options("run", 1);
  o.checkpoint_every_steps = 6;
  o.keep_checkpoints = 5;
  o.metrics_file = (dir_ / "metrics.jsonl").string();
  run(o);  // checkpoints at steps 6 and 12
  const fs::path newest = dir_ / "run" / "checkpoint-00000012.pt";
  testing::flip_byte(newest, fs::file_size(newest) / 3);

  o.epochs = 2;
  const std::string log = run(o);
  EXPECT_NE(log.find("skipped " + newest.string() + ": checksum mismatch (corrupt)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("resumed from " + (dir_ / "run" / "checkpoint-00000006.pt").string() +
                     " (epoch 1, step 6)"),
            std::string::npos)
      << log;
  // One line from the first run, then epochs 1 (again) and 2.
  std::istringstream lines(testing::read_text(o.metrics_file));
  std::string line;
  std::vector<std::string> epochs;
  while (std::getline(lines, line)) epochs.push_back(line.substr(0, line.find(',')));
  EXPECT_EQ(epochs, (std::vector<std::string>{"{\"epoch\":1", "{\"epoch\":1", "{\"epoch\":2"}));
  EXPECT_EQ(latest("run").step, 24);
}

TEST_F(Resume, CheckpointOptionsAreValidatedBeforeTraining) {
  TrainOptions o = options("", 1);
  o.checkpoint_dir.clear();
  o.checkpoint_every_steps = 5;
  EXPECT_EQ(testing::error_of([&] { validate(o); }),
            "TrainOptions::checkpoint_every_steps or checkpoint_every_epochs is set but "
            "TrainOptions::checkpoint_dir is empty");
  o = options("run", 1);
  o.keep_checkpoints = 0;
  EXPECT_EQ(testing::error_of([&] { validate(o); }),
            "TrainOptions::keep_checkpoints must be >= 1, got 0");
  EXPECT_EQ(resume_batch(64, 8, 3, 4), 2);
  EXPECT_EQ(resume_batch(1000, 8, 1, 12), 12);
}

// ---- The data's fingerprint (Note [Refusing changed data]) --------------------------

TEST_F(Resume, ResumingAgainstChangedDataIsRefusedNamingTheCheckpointAndBothSampleCounts) {
  TrainOptions o = options("run", 1);
  run(o);  // checkpoint at step 12
  const Checkpoint saved = latest("run");
  ASSERT_TRUE(saved.data_fingerprint.has_value());
  EXPECT_EQ(saved.data_fingerprint->samples, 96);
  EXPECT_EQ(saved.data_fingerprint->classes, 10);

  // Eight more training samples: the cursor would point elsewhere.
  testing::write_tiny_dataset(dir_ / "data", 104, 32);
  o.epochs = 2;
  const std::string error = testing::error_of([&] { run(o); });
  const std::string ckpt = (dir_ / "run" / "checkpoint-00000012.pt").string();
  EXPECT_EQ(error.rfind("rank 0: " + ckpt +
                            " was saved training on 96 samples (96 samples, 10 "
                            "classes, names ",
                        0),
            0u)
      << error;
  EXPECT_NE(error.find("but dataset 'mnist' at '" + (dir_ / "data").string() +
                       "' now has 104 (104 samples, 10 classes"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("96 samples then, 104 now"), std::string::npos) << error;
  EXPECT_NE(error.find("; resume against the same data, or start a new run in a fresh checkpoint "
                       "directory (TrainOptions::checkpoint_dir)"),
            std::string::npos)
      << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << "one line";
  EXPECT_EQ(latest("run").step, 12) << "nothing trained, nothing written";

  // The same count with other labels and pixels is refused too; the original data resumes.
  testing::write_tiny_dataset(dir_ / "data", 96, 32, /*size=*/12, /*seed=*/99);
  EXPECT_NE(
      testing::error_of([&] { run(o); }).find("): the samples' names, labels or order differ"),
      std::string::npos);
  testing::write_tiny_dataset(dir_ / "data", 96, 32);
  EXPECT_NE(run(o).find("resumed from " + ckpt), std::string::npos);
  EXPECT_EQ(latest("run").step, 24);
}

TEST_F(Resume, ACheckpointWithoutADataFingerprintStillResumes) {
  TrainOptions o = options("run", 1);
  run(o);
  // As written before fingerprints existed: the entry is absent.
  const std::string path = (dir_ / "run" / "checkpoint-00000012.pt").string();
  Checkpoint c = latest("run");
  c.data_fingerprint.reset();
  fs::remove(path);
  fs::remove(path + ".crc32");
  save_checkpoint((dir_ / "run").string(), c);
  testing::write_tiny_dataset(dir_ / "data", 104, 32);  // not checked, so not refused
  o.epochs = 2;
  EXPECT_NE(run(o).find("resumed from " + path + " (epoch 2, step 12)"), std::string::npos);
  EXPECT_TRUE(latest("run").data_fingerprint.has_value()) << "the next one records it";
}

TEST_F(Resume, ResumingOnTwoRanksAgainstTheSameDataPassesTheCheck) {
  TrainOptions o = options("run", 1);
  run(o);  // on one rank
  o.epochs = 2;
  const std::string log = run(o, 2);
  EXPECT_NE(log.find("resumed from " + (dir_ / "run" / "checkpoint-00000012.pt").string()),
            std::string::npos)
      << log;
  EXPECT_EQ(latest("run").step, 18) << "6 steps of 2 ranks x 8";
}

// ---- The CLI --------------------------------------------------------------------

using Shell = testing::ShellRun;

Shell dtrain_cli(const std::string& args) {
  return testing::run_shell("timeout -k 5 120 " DTRAIN_BINARY_DIR "/dtrain " + args + " 2>&1");
}

TEST_F(Resume, CliBadCheckpointEveryIsAOneLineUsageError) {
  for (const char* bad : {"3days", "0", "-2", "epochs", "1.5epochs"}) {
    Shell r = dtrain_cli(std::string("train --checkpoint-dir ") + (dir_ / "c").string() +
                         " --checkpoint-every " + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("--checkpoint-every"), std::string::npos) << r.output;
  }
  Shell r = dtrain_cli("train --checkpoint-every 2epochs --data-dir " + (dir_ / "data").string() +
                       " --dataset mnist");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "dtrain train: error: --checkpoint-every needs --checkpoint-dir\n");
}

TEST_F(Resume, CliRunResumesFromItsCheckpointDirectory) {
  const std::string args = "train --dataset mnist --data-dir " + (dir_ / "data").string() +
                           " --batch-size 8 --threads 1 --device cpu --checkpoint-dir " +
                           (dir_ / "c").string() + " --checkpoint-every 1epoch";
  Shell r = dtrain_cli(args + " --epochs 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "c" / "checkpoint-00000012.pt")) << r.output;
  r = dtrain_cli(args + " --epochs 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from " + (dir_ / "c" / "checkpoint-00000012.pt").string() +
                          " (epoch 2, step 12)"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "c" / "checkpoint-00000024.pt")) << r.output;
}

}  // namespace
}  // namespace dtrain
