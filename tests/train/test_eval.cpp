// dtrain::evaluate(): each sample of the evaluation split counts once on any
// world size, with the same results and logits (in dataset order) as one
// process; bad weights fail on every rank.
#include <gtest/gtest.h>

#include <mutex>
#include <sstream>

#include <ATen/ATen.h>
#include <torch/serialize.h>

#include "dtrain/checkpoint.h"
#include "dtrain/eval.h"
#include "dtrain/models.h"
#include "dtrain/train.h"
#include "dtrain/weights.h"
#include "support/ranks.h"
#include "train/fixtures.h"

namespace dtrain {
namespace {

class Eval : public testing::ScratchDir {
 protected:
  void SetUp() override {
    ScratchDir::SetUp();
    // 31 test samples: shares of 11, 10 and 10 on three ranks.
    testing::write_tiny_dataset(dir_ / "data", 48, 31);
    TrainOptions t;
    t.model = "cnn";
    t.dataset.name = "mnist";
    t.dataset.data_dir = (dir_ / "data").string();
    t.epochs = 1;
    t.batch_size = 8;
    t.threads = 1;
    t.device = DeviceChoice::cpu();
    t.progress = TrainOptions::Progress::kNone;
    t.checkpoint_dir = (dir_ / "ckpt").string();
    train(t, ProcessGroup(), nullptr);
  }

  EvalOptions options(const std::string& logits) const {
    EvalOptions o;
    o.model = "cnn";
    o.dataset.name = "mnist";
    o.dataset.data_dir = (dir_ / "data").string();
    o.batch_size = 4;  // several batches, the last one short, on every rank
    o.checkpoint_dir = (dir_ / "ckpt").string();
    o.logits_file = (dir_ / logits).string();
    o.threads = 1;
    o.device = DeviceChoice::cpu();
    return o;
  }

  at::Tensor read_logits(const std::string& name) const {
    std::ifstream in(dir_ / name, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    return torch::pickle_load(bytes).toTensor();
  }
};

TEST_F(Eval, ThreeRanksWithAnUnevenSplitCountEachSampleOnceAsOneProcessDoes) {
  std::ostringstream one_log;
  const EvalResult one = evaluate(options("one.pt"), ProcessGroup(), &one_log);
  EXPECT_EQ(one.samples, 31);
  EXPECT_NE(one_log.str().find("evaluated 31 samples on 1 rank(s)"), std::string::npos)
      << one_log.str();

  std::vector<EvalResult> results(3);
  std::ostringstream log;
  testing::run_ranks(
      3,
      [&](const ProcessGroup& pg) {
        results[pg.rank()] = evaluate(options("three.pt"), pg, pg.rank() == 0 ? &log : nullptr);
      },
      std::chrono::seconds(120));
  for (const EvalResult& r : results) {
    EXPECT_EQ(r.samples, 31);
    EXPECT_DOUBLE_EQ(r.top1, one.top1);
    EXPECT_DOUBLE_EQ(r.top5, one.top5);
    EXPECT_NEAR(r.loss, one.loss, 1e-6);
  }
  EXPECT_NE(log.str().find("evaluated 31 samples on 3 rank(s)"), std::string::npos) << log.str();

  const at::Tensor a = read_logits("one.pt"), b = read_logits("three.pt");
  ASSERT_EQ(a.sizes(), (std::vector<int64_t>{31, 10}));
  ASSERT_EQ(b.sizes(), a.sizes());
  EXPECT_LE((a - b).abs().max().item<double>(), 1e-6) << "rows in dataset order";
}

TEST_F(Eval, InitWeightsSavedFromTheCheckpointsModelGiveTheSameResults) {
  const EvalResult from_checkpoint = evaluate(options("a.pt"), ProcessGroup(), nullptr);
  ModelOptions mo;  // the tiny dataset: 1 x 12 x 12, 10 classes
  mo.image_size = 12;
  auto model = make_model("cnn", mo);
  load_model_state(*model, load_latest_checkpoint((dir_ / "ckpt").string())->checkpoint.model,
                   "test");
  save_weights(*model, (dir_ / "w.pt").string());
  EvalOptions o = options("b.pt");
  o.checkpoint_dir.clear();
  o.init_weights = (dir_ / "w.pt").string();
  std::vector<EvalResult> results(2);
  testing::run_ranks(
      2, [&](const ProcessGroup& pg) { results[pg.rank()] = evaluate(o, pg, nullptr); },
      std::chrono::seconds(120));
  for (const EvalResult& r : results) {
    EXPECT_EQ(r.samples, 31);
    EXPECT_DOUBLE_EQ(r.top1, from_checkpoint.top1);
    EXPECT_NEAR(r.loss, from_checkpoint.loss, 1e-6);
  }
}

TEST_F(Eval, AMissingCheckpointFailsOnEveryRankNamingTheDirectory) {
  EvalOptions o = options("x.pt");
  o.checkpoint_dir = (dir_ / "nothing").string();
  std::vector<std::string> errors(2);
  testing::run_ranks(
      2,
      [&](const ProcessGroup& pg) {
        errors[pg.rank()] = testing::error_of([&] { evaluate(o, pg, nullptr); });
      },
      std::chrono::seconds(60));
  EXPECT_EQ(errors[0], "no valid checkpoint in EvalOptions::checkpoint_dir " + o.checkpoint_dir);
  EXPECT_EQ(errors[1], "rank 1: rank 0 could not load the weights");
}

TEST_F(Eval, WeightsComeFromExactlyOneSource) {
  EvalOptions o = options("x.pt");
  o.init_weights = "w.pt";
  EXPECT_EQ(testing::error_of([&] { validate(o); }),
            "give the weights with exactly one of EvalOptions::checkpoint_dir, "
            "EvalOptions::init_weights");
}

}  // namespace
}  // namespace dtrain
