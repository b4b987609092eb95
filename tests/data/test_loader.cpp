// Datasets opened for a process group, the evaluation split's defaults, and
// loaders driven as PyTorch's DataLoader is (range-for, set_epoch).

#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <set>
#include <sstream>

#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"
#include "support/peer_version.h"
#include "support/ranks.h"
#include "support/shell.h"
#include "support/tiny_idx.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

constexpr int64_t kTrain = 50;
constexpr int64_t kTest = 10;

// MNIST-named IDX files whose sample i carries i in its first two pixels, so
// a batch tells which samples it holds.
class IndexedDataset : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dtrain_loader_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    for (auto [prefix, n] : {std::pair<std::string, int64_t>{"train", kTrain}, {"t10k", kTest}}) {
      std::vector<uint8_t> images(n * 4 * 4, 0), labels(n);
      for (int64_t i = 0; i < n; ++i) {
        images[i * 16] = static_cast<uint8_t>(i % 256);
        images[i * 16 + 1] = static_cast<uint8_t>(i / 256);
        labels[i] = static_cast<uint8_t>(i % 10);
      }
      const uint32_t count = static_cast<uint32_t>(n);
      testing::write_idx_gz(dir_ / (prefix + "-images-idx3-ubyte.gz"), {count, 4, 4}, images);
      testing::write_idx_gz(dir_ / (prefix + "-labels-idx1-ubyte.gz"), {count}, labels);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  DatasetOptions options(int64_t batch_size = 4) const {
    return DatasetOptions()
        .set_name("mnist")
        .set_data_dir(dir_.string())
        .set_train(LoaderOptions().set_batch_size(batch_size).set_seed(11))
        .set_test(LoaderOptions::evaluation().set_batch_size(batch_size));
  }

  fs::path dir_;
};

// The sample indices a batch holds, undoing MNIST's normalisation.
std::vector<int64_t> indices_of(const Batch& b) {
  const at::Tensor px = b.inputs.flatten(1).narrow(1, 0, 2).mul(0.3081).add(0.1307).mul(255.0);
  const at::Tensor idx = px.select(1, 0).round() + 256 * px.select(1, 1).round();
  std::vector<int64_t> out;
  for (int64_t i = 0; i < idx.size(0); ++i) out.push_back(idx[i].item<int64_t>());
  return out;
}

std::vector<int64_t> epoch_indices(Loader& loader) {
  std::vector<int64_t> out;
  for (Batch& b : loader) {
    const auto part = indices_of(b);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

// Every rank's indices of one split, opened with open_dataset(options, pg)
// on `world` ranks.
std::vector<std::vector<int64_t>> shares_by_rank(const DatasetOptions& o, int world, bool train) {
  std::vector<std::vector<int64_t>> shares(world);
  std::mutex mu;
  testing::run_ranks(world, [&](const ProcessGroup& pg) {
    DatasetSplits s = open_dataset(o, pg);
    Loader& loader = train ? *s.train : *s.test;
    loader.set_epoch(0);
    std::vector<int64_t> mine = epoch_indices(loader);
    std::lock_guard<std::mutex> lock(mu);
    shares[pg.rank()] = std::move(mine);
  });
  return shares;
}

TEST_F(IndexedDataset, OpenDatasetWithAProcessGroupGivesEachRankADisjointShareOfTheEvalSplit) {
  const auto shares = shares_by_rank(options(), 3, /*train=*/false);
  std::multiset<int64_t> seen;
  for (const auto& share : shares) {
    EXPECT_FALSE(share.empty());
    seen.insert(share.begin(), share.end());
  }
  ASSERT_EQ(static_cast<int64_t>(seen.size()), kTest) << "shares overlap or miss samples";
  for (int64_t i = 0; i < kTest; ++i) EXPECT_EQ(seen.count(i), 1u) << "sample " << i;
}

TEST_F(IndexedDataset, OpenDatasetWithAProcessGroupGivesEachRankAnEqualShareCoveringTheTrainSplit) {
  const auto shares = shares_by_rank(options(), 3, /*train=*/true);
  std::set<int64_t> seen;
  for (const auto& share : shares) {
    EXPECT_EQ(static_cast<int64_t>(share.size()), (kTrain + 2) / 3);
    seen.insert(share.begin(), share.end());
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), kTrain) << "every sample is some rank's";
  // Only DistributedSampler's wrap-around padding repeats samples: 51 - 50.
  EXPECT_NE(shares[0], shares[1]);
  EXPECT_NE(shares[1], shares[2]);
}

TEST_F(IndexedDataset, OpenDatasetWithoutAProcessGroupOrShareNamesTheOverloadToUse) {
  const std::string e = error_of([&] { open_dataset(options()); });
  EXPECT_NE(e.find("has no share"), std::string::npos) << e;
  EXPECT_NE(e.find("open_dataset(options, pg)"), std::string::npos) << e;
}

TEST_F(IndexedDataset, OpenDatasetRefusesAShareThatContradictsTheProcessGroup) {
  DatasetOptions o = options();
  o.train.set_rank(1).set_world_size(2);
  const std::string e = error_of([&] { open_dataset(o, ProcessGroup()); });
  EXPECT_NE(e.find("train split's share is rank 1 of 2 but the process group is rank 0 of 1"),
            std::string::npos)
      << e;
}

TEST_F(IndexedDataset, OpenDatasetWithAnExplicitShareAndNoGroupUsesThatShare) {
  DatasetOptions o = options();
  o.train.set_rank(0).set_world_size(1);
  o.test.set_rank(1).set_world_size(2);
  DatasetSplits s = open_dataset(o);
  s.test->set_epoch(0);
  EXPECT_EQ(epoch_indices(*s.test), (std::vector<int64_t>{1, 3, 5, 7, 9}));
}

TEST(LoaderOptions, ALoaderBuiltWithoutAShareIsRefusedWithTheFix) {
  const std::string e = error_of([] {
    make_synthetic_loader({1, 2, 2}, 3, 10, LoaderOptions().set_batch_size(2));
  });
  EXPECT_NE(e.find("rank and world_size are unset"), std::string::npos) << e;
  EXPECT_NE(e.find("open_dataset(options, pg)"), std::string::npos) << e;
}

TEST(DatasetOptions, EvaluationSplitDefaultsToDatasetOrderWithoutPadding) {
  const DatasetOptions o;
  EXPECT_FALSE(o.test.shuffle);
  EXPECT_FALSE(o.test.pad);
  EXPECT_TRUE(o.train.shuffle);
  EXPECT_TRUE(o.train.pad);
}

TEST_F(IndexedDataset, EvaluationSplitByDefaultHandsEachRankItsStridedSamplesInDatasetOrder) {
  DatasetOptions o;  // the defaults, but for where the files are and the batch size
  o.name = "mnist";
  o.data_dir = dir_.string();
  o.test.batch_size = 4;
  const auto shares = shares_by_rank(o, 3, /*train=*/false);
  EXPECT_EQ(shares[0], (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(shares[1], (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(shares[2], (std::vector<int64_t>{2, 5, 8}));
}

// Note [Sample cursor]: a run of 2 ranks x batch 4 stopped after 3 steps
// (24 of 50 samples) and resumed with 3 ranks x batch 5, or 1 rank x batch 7,
// logs every sample of the epoch exactly once; every rank iterates the same
// number of batches, the last short or empty.
TEST_F(IndexedDataset, AnExactLoaderResumedAtAnotherWorldSizeSeesEverySampleOnce) {
  for (auto [world, batch] : {std::pair<int, int64_t>{3, 5}, {1, 7}, {4, 4}, {3, 1}}) {
    std::multiset<int64_t> log;
    int64_t consumed = 0;
    for (int r = 0; r < 2; ++r) {
      DatasetOptions o = options(4);
      o.train.set_rank(r).set_world_size(2).set_exact(true);
      o.test.set_rank(r).set_world_size(2);
      DatasetSplits s = open_dataset(o);
      s.train->set_epoch(1);
      for (int step = 0; step < 3; ++step) {
        Batch b;
        ASSERT_TRUE(s.train->next(b));
        for (int64_t i : indices_of(b)) log.insert(i);
      }
      consumed = s.train->start_sample() + s.train->position() * 4 * 2;
    }
    ASSERT_EQ(consumed, 24);
    std::vector<int64_t> batches;
    for (int r = 0; r < world; ++r) {
      DatasetOptions o = options(batch);
      o.train.set_rank(r).set_world_size(world).set_exact(true);
      o.test.set_rank(r).set_world_size(world);
      DatasetSplits s = open_dataset(o);
      s.train->set_epoch(1);
      s.train->resume_at(consumed);
      EXPECT_EQ(s.train->start_sample(), 24);
      int64_t n = 0;
      for (Batch& b : *s.train) {
        for (int64_t i : indices_of(b)) log.insert(i);
        ++n;
      }
      batches.push_back(n);
      EXPECT_EQ(n, s.train->batches_per_epoch());
    }
    EXPECT_EQ(std::set<int64_t>(batches.begin(), batches.end()).size(), 1u)
        << "every rank takes the same number of steps";
    EXPECT_EQ(log.size(), static_cast<size_t>(kTrain)) << world << " ranks";
    for (int64_t i = 0; i < kTrain; ++i) EXPECT_EQ(log.count(i), 1u) << "sample " << i;
  }
}

TEST_F(IndexedDataset, APaddedLoaderResumedAtAnotherWorldSizeSkipsNothing) {
  // 2 x 4 x 3 = 24 consumed; 3 ranks continue at sample 24, not at a batch boundary.
  std::multiset<int64_t> log;
  DatasetOptions two = options(4);
  two.train.set_rank(0).set_world_size(1);
  two.test.set_rank(0).set_world_size(1);
  DatasetSplits whole = open_dataset(two);
  whole.train->set_epoch(0);
  const std::vector<int64_t> order = epoch_indices(*whole.train);
  for (int r = 0; r < 3; ++r) {
    DatasetOptions o = options(5);
    o.train.set_rank(r).set_world_size(3);
    o.test.set_rank(r).set_world_size(3);
    DatasetSplits s = open_dataset(o);
    s.train->set_epoch(0);
    s.train->resume_at(24);
    for (int64_t i : epoch_indices(*s.train)) log.insert(i);
  }
  // 26 left, padded to 27 by the first sample of the order.
  EXPECT_EQ(log.size(), 27u);
  for (size_t p = 24; p < order.size(); ++p) EXPECT_EQ(log.count(order[p]), 1u) << p;
  EXPECT_EQ(log.count(order[0]), 1u);
}

TEST_F(IndexedDataset, RangeForYieldsTheSameBatchesAsNext) {
  DatasetSplits a = open_dataset(options(), ProcessGroup());
  DatasetSplits b = open_dataset(options(), ProcessGroup());
  a.train->set_epoch(2);
  b.train->start_epoch(2);
  int64_t n = 0;
  for (Batch& batch : *a.train) {
    Batch expected;
    ASSERT_TRUE(b.train->next(expected)) << "range-for yielded more batches than next()";
    EXPECT_TRUE(at::equal(batch.inputs, expected.inputs)) << "batch " << n;
    EXPECT_TRUE(at::equal(batch.targets, expected.targets)) << "batch " << n;
    ++n;
  }
  Batch extra;
  EXPECT_FALSE(b.train->next(extra)) << "range-for stopped early";
  EXPECT_EQ(n, a.train->batches_per_epoch());
}

TEST_F(IndexedDataset, RangeForAfterSkipToResumesAtThatBatchAndAnExhaustedEpochYieldsNothing) {
  DatasetSplits s = open_dataset(options(), ProcessGroup());
  s.train->set_epoch(1);
  const std::vector<int64_t> whole = epoch_indices(*s.train);
  EXPECT_TRUE(epoch_indices(*s.train).empty()) << "the epoch is exhausted until set_epoch";
  s.train->set_epoch(1);
  s.train->skip_to(3);
  EXPECT_EQ(epoch_indices(*s.train), std::vector<int64_t>(whole.begin() + 3 * 4, whole.end()));
}

TEST_F(IndexedDataset, SetEpochSelectsTheDistributedSamplersPermutationForThatEpoch) {
  DatasetOptions o = options();
  o.train.set_rank(1).set_world_size(2);
  o.test.set_rank(1).set_world_size(2);
  DatasetSplits s = open_dataset(o);
  std::vector<std::vector<int64_t>> by_epoch;
  for (int64_t epoch : {0, 1, 0}) {
    s.train->set_epoch(epoch);
    by_epoch.push_back(epoch_indices(*s.train));
    DistributedSampler sampler(kTrain, sampler_options(o.train));
    sampler.set_epoch(epoch);
    EXPECT_EQ(by_epoch.back(), sampler.indices()) << "epoch " << epoch;
  }
  EXPECT_NE(by_epoch[0], by_epoch[1]) << "a new epoch reshuffles, as PyTorch's set_epoch does";
  EXPECT_EQ(by_epoch[0], by_epoch[2]) << "the same epoch repeats its order";
}

// PyTorch's DistributedSampler draws its permutation from torch.randperm, which
// dtrain does not reproduce (Note in sampler.h: a portable generator); how a
// permutation is padded and split among ranks is PyTorch's, and is what
// this compares, in dataset order (PyTorch's sampler always pads).
TEST_F(IndexedDataset, UnshuffledSharesAreThoseOfPyTorchsDistributedSampler) {
  if (!testing::reference_python_imports("torch")) {
    GTEST_SKIP() << testing::reference_python_missing();
  }
  const std::vector<int> worlds = {2, 3, 4, 7};
  std::ostringstream cmd;  // one interpreter for every world: importing torch is slow
  cmd << "timeout -k 5 120 " << testing::reference_python() << " -c '"
      << "from torch.utils.data import DistributedSampler\n"
      << "for w in (" << worlds[0] << ", " << worlds[1] << ", " << worlds[2] << ", " << worlds[3]
      << "):\n"
      << "  for r in range(w):\n"
      << "    s = DistributedSampler(range(" << kTrain
      << "), num_replicas=w, rank=r, shuffle=False)\n"
      << "    print(\" \".join(map(str, s)))' 2>&1";
  const testing::ShellRun run = testing::run_shell(cmd.str());
  ASSERT_EQ(run.code, 0) << run.output;
  std::istringstream lines(run.output);
  for (int world : worlds) {
    for (int r = 0; r < world; ++r) {
      // Explicit shares (what open_dataset(options, pg) fills in; the tests
      // above check that), so no process group is formed here.
      DatasetOptions o = options(7);
      o.train.set_shuffle(false).set_rank(r).set_world_size(world);  // padded, as PyTorch's is
      o.test.set_rank(r).set_world_size(world);
      DatasetSplits s = open_dataset(o);
      s.train->set_epoch(0);
      const std::vector<int64_t> ours = epoch_indices(*s.train);
      std::string line;
      std::getline(lines, line);
      std::istringstream in(line);
      std::vector<int64_t> theirs;
      for (int64_t i; in >> i;) theirs.push_back(i);
      EXPECT_EQ(ours, theirs) << "world " << world << " rank " << r;
    }
  }
}

}  // namespace
}  // namespace dtrain
