// Checkpoint files: round trip, atomic writes, pruning, corruption detection,
// the loaders' skip_to, and the format as Python's torch.load sees it.
#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "dtrain/checkpoint.h"
#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/errors.h"
#include "dtrain/models.h"
#include "support/peer_version.h"
#include "support/ranks.h"
#include "train/fixtures.h"

namespace dtrain {
namespace {

using testing::ScratchDir;
namespace fs = std::filesystem;

// A model and optimizer with a momentum buffer after one step.
struct Trained {
  torch::nn::Linear model{torch::nn::LinearOptions(4, 3)};
  torch::optim::SGD sgd{model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};
  Trained() {
    model->forward(at::randn({5, 4})).sum().backward();
    sgd.step();
  }
};

Checkpoint sample_checkpoint(int64_t step, Trained& t) {
  Checkpoint c;
  c.model = model_state(*t.model);
  c.optimizer = optimizer_state(t.sgd);
  c.epoch = 2;
  c.step = step;
  c.samples_in_epoch = 96;
  c.world_size = 3;
  c.batch_size = 16;
  c.seed = 42;
  c.rng_state = cpu_rng_state();
  return c;
}

bool same(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.sizes() == b.sizes() && at::equal(a, b);
}

using Checkpoints = ScratchDir;

TEST_F(Checkpoints, SaveThenLoadReturnsTheSameTensorsCountersAndRngState) {
  Trained t;
  const Checkpoint saved = sample_checkpoint(7, t);
  const std::string path = save_checkpoint(dir_.string(), saved);
  EXPECT_EQ(path, (dir_ / "checkpoint-00000007.pt").string());

  std::vector<std::string> skipped;
  auto loaded = load_latest_checkpoint(dir_.string(), &skipped);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_TRUE(skipped.empty());
  EXPECT_EQ(loaded->path, path);
  const Checkpoint& c = loaded->checkpoint;
  ASSERT_EQ(c.model.size(), 2u);
  for (size_t i = 0; i < c.model.size(); ++i) {
    EXPECT_EQ(c.model[i].first, saved.model[i].first);
    EXPECT_TRUE(same(c.model[i].second, saved.model[i].second)) << c.model[i].first;
  }
  ASSERT_EQ(c.optimizer.state.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(same(c.optimizer.state[i].at("momentum_buffer"),
                     saved.optimizer.state[i].at("momentum_buffer")));
  }
  EXPECT_EQ(c.optimizer.type, OptimizerType::kSgd);
  ASSERT_EQ(c.optimizer.groups.size(), 1u);
  EXPECT_DOUBLE_EQ(c.optimizer.groups[0].lr, 0.1);
  EXPECT_DOUBLE_EQ(c.optimizer.groups[0].momentum, 0.9);
  EXPECT_EQ(c.epoch, 2);
  EXPECT_EQ(c.step, 7);
  EXPECT_EQ(c.samples_in_epoch, 96);
  EXPECT_EQ(c.world_size, 3);
  EXPECT_EQ(c.batch_size, 16);
  EXPECT_EQ(c.seed, 42u);
  EXPECT_TRUE(same(c.rng_state, saved.rng_state));

  // The restored generator continues the saved stream.
  const at::Tensor expected = at::rand({8});
  at::rand({100});
  set_cpu_rng_state(c.rng_state);
  EXPECT_TRUE(same(at::rand({8}), expected));
}

TEST_F(Checkpoints, ScalerStateRoundTripsAndIsNoneWithoutLossScaling) {
  Trained t;
  Checkpoint c = sample_checkpoint(3, t);
  save_checkpoint(dir_.string(), c);
  EXPECT_FALSE(load_latest_checkpoint(dir_.string())->checkpoint.scaler.has_value());
  ScalerState s;
  s.scale = 1024.0;
  s.growth_tracker = 17;
  s.growth_interval = 100;
  c.scaler = s;
  c.step = 4;
  save_checkpoint(dir_.string(), c);
  const auto loaded = load_latest_checkpoint(dir_.string())->checkpoint.scaler;
  ASSERT_TRUE(loaded.has_value());
  EXPECT_DOUBLE_EQ(loaded->scale, 1024.0);
  EXPECT_EQ(loaded->growth_tracker, 17);
  EXPECT_EQ(loaded->growth_interval, 100);
  EXPECT_DOUBLE_EQ(loaded->growth_factor, 2.0);
  EXPECT_DOUBLE_EQ(loaded->backoff_factor, 0.5);
}

TEST_F(Checkpoints, ServersOptimizerStateRoundTripsAndIsNoneWithoutParameterServers) {
  Trained t;
  Checkpoint c = sample_checkpoint(3, t);
  save_checkpoint(dir_.string(), c);
  EXPECT_FALSE(load_latest_checkpoint(dir_.string())->checkpoint.server_optimizer.has_value());
  ServerOptimizerState s;
  s.momentum = {{"bias", at::randn({3})}, {"weight", at::randn({3, 4})}};
  s.updates = {{"bias", 12}, {"weight", 11}};
  c.server_optimizer = s;
  c.step = 4;
  save_checkpoint(dir_.string(), c);
  const auto loaded = load_latest_checkpoint(dir_.string())->checkpoint.server_optimizer;
  ASSERT_TRUE(loaded.has_value());
  ASSERT_EQ(loaded->momentum.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(loaded->momentum[i].first, s.momentum[i].first);
    EXPECT_TRUE(same(loaded->momentum[i].second, s.momentum[i].second)) << s.momentum[i].first;
  }
  EXPECT_EQ(loaded->updates, s.updates);
}

TEST_F(Checkpoints, DataFingerprintRoundTripsAndIsAbsentWhenNotGiven) {
  Trained t;
  Checkpoint c = sample_checkpoint(3, t);
  save_checkpoint(dir_.string(), c);
  EXPECT_FALSE(load_latest_checkpoint(dir_.string())->checkpoint.data_fingerprint.has_value());
  DataFingerprint f;
  f.samples = 1281167;
  f.classes = 1000;
  f.names = 0xfedcba98;  // above INT32_MAX: stored as a non-negative int
  f.sizes = 7;
  f.etags = 0x80000000;
  c.data_fingerprint = f;
  c.step = 4;
  save_checkpoint(dir_.string(), c);
  const auto loaded = load_latest_checkpoint(dir_.string())->checkpoint.data_fingerprint;
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->str(), f.str());
  EXPECT_TRUE(loaded->matches(f));
  EXPECT_EQ(loaded->etags, f.etags);
}

TEST_F(Checkpoints, RestoredModelAndMomentumTakeTheSameNextStep) {
  Trained a;
  const Checkpoint c = sample_checkpoint(1, a);
  Trained b;  // different initialisation and momentum
  load_model_state(*b.model, c.model, "test");
  load_optimizer_state(b.sgd, c.optimizer, "test");
  const at::Tensor x = at::randn({5, 4});
  for (Trained* t : {&a, &b}) {
    t->sgd.zero_grad();
    t->model->forward(x).sum().backward();
    t->sgd.step();
  }
  EXPECT_TRUE(same(a.model->weight, b.model->weight));
  EXPECT_TRUE(same(a.model->bias, b.model->bias));
}

TEST_F(Checkpoints, LoadingIntoADifferentModelNamesTheParameterAndChangesNothing) {
  Trained t;
  const Checkpoint c = sample_checkpoint(1, t);
  torch::nn::Linear other(torch::nn::LinearOptions(4, 5));
  const at::Tensor before = other->weight.clone();
  const std::string err =
      testing::error_of([&] { load_model_state(*other, c.model, "/ckpt/checkpoint-1.pt"); });
  // The first mismatch in state_dict order (dtrain/weights.h).
  EXPECT_NE(err.find("/ckpt/checkpoint-1.pt: 'weight' is [3, 4] in the checkpoint but [5, 4] in "
                     "the model"),
            std::string::npos)
      << err;
  EXPECT_TRUE(same(other->weight, before));
}

TEST_F(Checkpoints, AWriteLeavesTheCheckpointItsChecksumFileAndNoTemporary) {
  Trained t;
  save_checkpoint(dir_.string(), sample_checkpoint(3, t));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"checkpoint-00000003.pt", "checkpoint-00000003.pt.crc32"}));
  const std::string sum = testing::read_text(dir_ / "checkpoint-00000003.pt.crc32");
  EXPECT_EQ(
      sum.rfind("dtrain-checkpoint-1 size=" +
                    std::to_string(fs::file_size(dir_ / "checkpoint-00000003.pt")) + " crc32=",
                0),
      0u)
      << sum;
  EXPECT_EQ(verify_checkpoint_file((dir_ / "checkpoint-00000003.pt").string()), "");
}

TEST_F(Checkpoints, OnlyTheNewestKeepLastSurviveAndStrayTemporariesGo) {
  Trained t;
  std::ofstream(dir_ / ".ckpt-abc123.tmp") << "left by a crash";
  for (int64_t step : {10, 20, 30, 40, 50})
    save_checkpoint(dir_.string(), sample_checkpoint(step, t), 2);
  EXPECT_EQ(list_checkpoints(dir_.string()),
            (std::vector<std::string>{(dir_ / "checkpoint-00000050.pt").string(),
                                      (dir_ / "checkpoint-00000040.pt").string()}));
  EXPECT_FALSE(fs::exists(dir_ / ".ckpt-abc123.tmp"));
  EXPECT_FALSE(fs::exists(dir_ / "checkpoint-00000030.pt.crc32"));
}

// A run resumed from step 50 because step 100 was corrupt: the next save must
// not keep the corrupt 100 and drop the only valid checkpoints.
TEST_F(Checkpoints, ASaveAfterResumingFromAnOlderStepDropsTheAbandonedNewerOnes) {
  Trained t;
  save_checkpoint(dir_.string(), sample_checkpoint(50, t), 1);
  save_checkpoint(dir_.string(), sample_checkpoint(100, t), 2);
  testing::flip_byte(dir_ / "checkpoint-00000100.pt", 100);
  save_checkpoint(dir_.string(), sample_checkpoint(60, t), 1);
  EXPECT_EQ(list_checkpoints(dir_.string()),
            std::vector<std::string>{(dir_ / "checkpoint-00000060.pt").string()});
  auto loaded = load_latest_checkpoint(dir_.string());
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->checkpoint.step, 60);
}

TEST_F(Checkpoints, NewestIsChosenByStepNotByName) {
  Trained t;
  save_checkpoint(dir_.string(), sample_checkpoint(99999999, t), 5);
  save_checkpoint(dir_.string(), sample_checkpoint(123456789, t), 5);  // nine digits
  auto loaded = load_latest_checkpoint(dir_.string());
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->checkpoint.step, 123456789);
}

TEST_F(Checkpoints, TruncatedNewestCheckpointIsSkippedAndThePreviousOneUsed) {
  Trained t;
  save_checkpoint(dir_.string(), sample_checkpoint(1, t));
  save_checkpoint(dir_.string(), sample_checkpoint(2, t));
  const fs::path newest = dir_ / "checkpoint-00000002.pt";
  testing::truncate_file(newest, fs::file_size(newest) / 2);
  std::vector<std::string> skipped;
  auto loaded = load_latest_checkpoint(dir_.string(), &skipped);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->checkpoint.step, 1);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].rfind(newest.string() + ": truncated: ", 0), 0u) << skipped[0];
}

TEST_F(Checkpoints, ByteFlippedNewestCheckpointIsSkippedAndThePreviousOneUsed) {
  Trained t;
  save_checkpoint(dir_.string(), sample_checkpoint(1, t));
  save_checkpoint(dir_.string(), sample_checkpoint(2, t));
  const fs::path newest = dir_ / "checkpoint-00000002.pt";
  testing::flip_byte(newest, fs::file_size(newest) / 2);
  std::vector<std::string> skipped;
  auto loaded = load_latest_checkpoint(dir_.string(), &skipped);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->path, (dir_ / "checkpoint-00000001.pt").string());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("checksum mismatch (corrupt)"), std::string::npos) << skipped[0];
}

TEST_F(Checkpoints, CheckpointWithoutChecksumFileIsSkippedAsUnfinished) {
  Trained t;
  save_checkpoint(dir_.string(), sample_checkpoint(1, t));
  save_checkpoint(dir_.string(), sample_checkpoint(2, t));
  fs::remove(dir_ / "checkpoint-00000002.pt.crc32");
  std::vector<std::string> skipped;
  auto loaded = load_latest_checkpoint(dir_.string(), &skipped);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->checkpoint.step, 1);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("the write did not finish"), std::string::npos) << skipped[0];
}

TEST_F(Checkpoints, AValidChecksumOverSomethingElseIsSkippedAsNotACheckpoint) {
  std::ofstream(dir_ / "checkpoint-00000005.pt") << "hello";
  std::ofstream(dir_ / "checkpoint-00000005.pt.crc32")
      << "dtrain-checkpoint-1 size=5 crc32=3610a686\n";  // crc32("hello")
  std::vector<std::string> skipped;
  EXPECT_FALSE(load_latest_checkpoint(dir_.string(), &skipped));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("not a checkpoint torch.load can read"), std::string::npos)
      << skipped[0];
}

TEST_F(Checkpoints, MissingOrEmptyDirectoryHasNoCheckpoint) {
  EXPECT_FALSE(load_latest_checkpoint((dir_ / "absent").string()));
  EXPECT_FALSE(load_latest_checkpoint(dir_.string()));
  EXPECT_TRUE(list_checkpoints((dir_ / "absent").string()).empty());
}

TEST_F(Checkpoints, AnUnwritableDirectoryIsAnErrorNamingIt) {
  Trained t;
  std::ofstream(dir_ / "file") << "x";
  const std::string target = (dir_ / "file" / "ckpt").string();
  const std::string err =
      testing::error_of([&] { save_checkpoint(target, sample_checkpoint(1, t)); });
  EXPECT_NE(err.find("checkpoint: cannot create directory '" + target + "'"), std::string::npos)
      << err;
  EXPECT_THROW(save_checkpoint(dir_.string(), sample_checkpoint(1, t), 0), InvalidArgument);
}

// ---- Loaders resume mid-epoch ----------------------------------------------------

TEST_F(Checkpoints, TensorLoaderSkipToReturnsTheBatchAnUninterruptedEpochWould) {
  testing::write_tiny_dataset(dir_ / "data", 50, 10);
  DatasetOptions o;
  o.name = "mnist";
  o.data_dir = (dir_ / "data").string();
  o.train.batch_size = 8;
  o.train.world_size = 2;
  o.train.rank = 1;
  o.test.world_size = 2;
  o.test.rank = 1;
  DatasetSplits s = open_dataset(o);
  Loader& loader = *s.train;
  loader.start_epoch(3);
  std::vector<Batch> all;
  for (Batch b; loader.next(b);) all.push_back(b);
  ASSERT_EQ(static_cast<int64_t>(all.size()), loader.batches_per_epoch());
  EXPECT_EQ(loader.position(), loader.batches_per_epoch());

  loader.start_epoch(3);
  EXPECT_EQ(loader.position(), 0);
  loader.skip_to(2);
  EXPECT_EQ(loader.position(), 2);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_TRUE(same(b.inputs, all[2].inputs));
  EXPECT_TRUE(same(b.targets, all[2].targets));
  EXPECT_EQ(loader.position(), 3);
  loader.skip_to(loader.batches_per_epoch());
  EXPECT_FALSE(loader.next(b));
  const std::string err =
      testing::error_of([&] { loader.skip_to(loader.batches_per_epoch() + 1); });
  EXPECT_NE(err.find("is outside [0, 4]"), std::string::npos) << err;
}

TEST_F(Checkpoints, SyntheticLoaderSkipsToo) {
  DatasetOptions o;
  o.name = "synthetic";
  o.data_dir = "1x4x4:3:40";
  o.train.batch_size = 8;
  DatasetSplits s = open_dataset(o, ProcessGroup());
  s.train->start_epoch(0);
  s.train->skip_to(4);
  Batch b;
  EXPECT_TRUE(s.train->next(b));
  EXPECT_FALSE(s.train->next(b));
  EXPECT_EQ(s.train->position(), 5);
}

// ---- Python ---------------------------------------------------------------------

// PyTorch of this LibTorch's release reads the checkpoint (the reference
// Python of support/peer_version.h: Debian's 1.13 or the 2.x peer venv).
TEST_F(Checkpoints, PythonTorchLoadReadsItIntoAPyTorchCnnAndSgd) {
  if (!testing::reference_python_imports("torch")) {
    GTEST_SKIP() << testing::reference_python_missing();
  }
  ModelOptions mo;  // 1x28x28, 10 classes: bench/peer/cnn.py's Net
  auto model = make_model("cnn", mo);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::nn::functional::cross_entropy(model->forward(at::randn({4, 1, 28, 28})),
                                       at::tensor({1, 2, 3, 4}, at::kLong))
      .backward();
  sgd.step();
  Checkpoint c;
  c.model = model_state(*model);
  c.optimizer = optimizer_state(sgd);
  c.epoch = 1;
  c.step = 5;
  c.samples_in_epoch = 64;
  c.rng_state = cpu_rng_state();
  const std::string path = save_checkpoint(dir_.string(), c);
  at::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model->forward(at::ones({1, 1, 28, 28}));
  }

  // Python loads it (weights_only from PyTorch 2 on), checks the
  // layout, loads model and optimizer into PyTorch objects, prints one line
  // per tensor and the logits, then saves a modified copy for C++ to read.
  const fs::path script = dir_ / "check.py";
  std::ofstream(script) << R"(
import sys, torch
sys.path.insert(0, sys.argv[3])
from cnn import Net
# weights_only (the default from 2.6) refuses floats before 2.0 (no BINFLOAT).
kw = {"weights_only": True} if int(torch.__version__.split(".")[0]) >= 2 else {}
ck = torch.load(sys.argv[1], **kw)
assert ck["format"] == "dtrain-checkpoint-1", ck["format"]
assert (ck["epoch"], ck["step"], ck["samples_in_epoch"]) == (1, 5, 64)
assert ck["rng_state"].dtype == torch.uint8
torch.set_rng_state(ck["rng_state"])
net = Net()
net.load_state_dict(ck["model"], strict=True)
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
opt.load_state_dict(ck["optimizer"])
assert len(opt.state) == 8
for name, t in ck["model"].items():
    print("model", name, list(t.shape), float(t.double().sum()))
for i, s in sorted(ck["optimizer"]["state"].items()):
    b = s["momentum_buffer"]
    print("momentum", i, list(b.shape), float(b.double().sum()))
with torch.no_grad():
    print("logits", " ".join(repr(float(v)) for v in net(torch.ones(1, 1, 28, 28))[0]))
ck["step"] = 6
ck["model"] = dict(net.state_dict())  # LibTorch reads no OrderedDict
ck["optimizer"] = opt.state_dict()
torch.save(ck, sys.argv[2])
)";
  const fs::path out = dir_ / "python.txt";
  const fs::path back = dir_ / "from_python.pt";
  const std::string cmd = "timeout -k 5 300 " + testing::reference_python() + " " +
                          script.string() + " " + path + " " + back.string() +
                          " " DTRAIN_SOURCE_DIR "/bench/peer > " + out.string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << testing::read_text(out);

  std::istringstream lines(testing::read_text(out));
  std::string kind;
  size_t models = 0, buffers = 0;
  while (lines >> kind) {
    if (kind == "logits") {
      for (int64_t k = 0; k < 10; ++k) {
        double v = 0;
        lines >> v;
        EXPECT_NEAR(v, logits[0][k].item<double>(), 1e-5) << "logit " << k;
      }
      continue;
    }
    std::string key, shape_text;
    lines >> key;
    std::getline(lines, shape_text, ']');
    double sum = 0;
    lines >> sum;
    const at::Tensor t = kind == "model"
                             ? c.model.at(models++).second
                             : c.optimizer.state.at(std::stoul(key)).at("momentum_buffer");
    if (kind == "model") {
      EXPECT_EQ(key, c.model.at(models - 1).first);
    } else {
      ++buffers;
    }
    std::ostringstream expect;
    expect << " [" << t.sizes()[0];
    for (size_t d = 1; d < t.sizes().size(); ++d) expect << ", " << t.sizes()[d];
    EXPECT_EQ(shape_text, expect.str()) << kind << " " << key;
    EXPECT_NEAR(sum, t.to(at::kDouble).sum().item<double>(), 1e-6 * (1 + std::abs(sum)))
        << kind << " " << key;
  }
  EXPECT_EQ(models, 8u);
  EXPECT_EQ(buffers, 8u);

  // And back. LibTorch 1.13's unpickler knows neither SETITEM (Python's
  // opcode for a one-entry dict, e.g. {"momentum_buffer": t}) nor
  // OrderedDict, so there a file Python rewrote is refused with an error
  // naming it; where it can read it, the values must be right.
  std::ifstream in(back, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  std::optional<Checkpoint> again;
  try {
    again = decode_checkpoint(bytes, back.string());
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(back.string() + ": ", 0), 0u) << e.what();
    return;
  }
  EXPECT_EQ(again->step, 6);
  auto fresh = make_model("cnn", mo);
  load_model_state(*fresh, again->model, back.string());
  EXPECT_TRUE(same(fresh->named_parameters()["fc2.bias"], c.model.back().second));
  ASSERT_EQ(again->optimizer.state.size(), 8u);
  EXPECT_TRUE(same(again->optimizer.state[7].at("momentum_buffer"),
                   c.optimizer.state[7].at("momentum_buffer")));
}

}  // namespace
}  // namespace dtrain
