#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "dtrain/data.h"
#include "dtrain/errors.h"
#include "dtrain/sampler.h"

namespace dtrain {
namespace {

std::vector<std::vector<int64_t>> shares(int64_t n, int world, int64_t epoch, bool drop_last,
                                         bool shuffle = true, uint64_t seed = 3, bool pad = true) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < world; ++r) {
    SamplerOptions o;
    o.rank = r;
    o.world_size = world;
    o.seed = seed;
    o.drop_last = drop_last;
    o.shuffle = shuffle;
    o.pad = pad;
    DistributedSampler s(n, o);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

class SamplerCase : public ::testing::TestWithParam<std::tuple<int64_t, int>> {};

TEST_P(SamplerCase, SharesHaveEqualLengthsAndCoverTheDatasetWithPaddingOnlyFromWrapAround) {
  auto [n, world] = GetParam();
  auto s = shares(n, world, 0, /*drop_last=*/false);
  const int64_t each = (n + world - 1) / world;
  std::multiset<int64_t> seen;
  for (const auto& share : s) {
    EXPECT_EQ(static_cast<int64_t>(share.size()), each);
    seen.insert(share.begin(), share.end());
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_GE(seen.count(i), 1u) << "index " << i << " missing";
  // Wrap-around padding repeats indices as evenly as possible.
  EXPECT_EQ(static_cast<int64_t>(seen.size()), each * world);
  const size_t most = static_cast<size_t>((each * world + n - 1) / n);
  for (int64_t i = 0; i < n; ++i) EXPECT_LE(seen.count(i), most) << "index " << i;
}

TEST_P(SamplerCase, DropLastSharesAreDisjointAndEqual) {
  auto [n, world] = GetParam();
  auto s = shares(n, world, 1, /*drop_last=*/true);
  std::set<int64_t> seen;
  for (const auto& share : s) {
    EXPECT_EQ(static_cast<int64_t>(share.size()), n / world);
    for (int64_t i : share) EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice";
  }
}

TEST_P(SamplerCase, UnpaddedSharesCoverEveryIndexExactlyOnce) {
  auto [n, world] = GetParam();
  auto s = shares(n, world, 2, /*drop_last=*/false, /*shuffle=*/true, 3, /*pad=*/false);
  std::multiset<int64_t> seen;
  for (const auto& share : s) seen.insert(share.begin(), share.end());
  EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen.count(i), 1u);
}

INSTANTIATE_TEST_SUITE_P(SizesAndWorlds, SamplerCase,
                         ::testing::Combine(::testing::Values<int64_t>(1, 7, 10, 100, 1001),
                                            ::testing::Values(1, 2, 3, 4)));

TEST(DistributedSampler, EveryRankDerivesTheSamePermutation) {
  // Interleaving the shares of all ranks reconstructs one permutation, so
  // the ranks must have used the same one.
  auto s = shares(12, 3, 5, false);
  std::vector<int64_t> merged;
  for (size_t i = 0; i < s[0].size(); ++i) {
    for (const auto& share : s) merged.push_back(share[i]);
  }
  EXPECT_EQ(merged, seeded_permutation(12, 3, 5));
}

TEST(DistributedSampler, PermutationChangesWithTheEpochAndRepeatsForTheSameEpoch) {
  EXPECT_NE(shares(1000, 2, 0, false)[0], shares(1000, 2, 1, false)[0]);
  EXPECT_EQ(shares(1000, 2, 4, false)[1], shares(1000, 2, 4, false)[1]);
  EXPECT_NE(shares(1000, 2, 0, false, true, 1)[0], shares(1000, 2, 0, false, true, 2)[0]);
}

TEST(DistributedSampler, WithoutShuffleRanksTakeStridedPositions) {
  auto s = shares(5, 2, 0, false, /*shuffle=*/false);
  EXPECT_EQ(s[0], (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(s[1], (std::vector<int64_t>{1, 3, 0}));  // padded by wrap-around
}

TEST(DistributedSampler, RankOutsideTheWorldIsRejectedWithBothNumbers) {
  SamplerOptions o;
  o.rank = 2;
  o.world_size = 2;
  try {
    DistributedSampler s(10, o);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "DistributedSampler: rank 2 is outside [0, world_size=2)");
  }
}

TEST(SamplerOptions, LoadersPadForTrainingAndCoverExactlyOnceForEvaluation) {
  LoaderOptions train;
  train.rank = 1;
  train.world_size = 3;
  train.seed = 9;
  train.drop_last = true;
  SamplerOptions s = sampler_options(train);
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.world_size, 3);
  EXPECT_EQ(s.seed, 9u);
  EXPECT_TRUE(s.pad);
  EXPECT_FALSE(s.drop_last) << "loaders drop short batches, not samples";
  LoaderOptions eval = train;
  eval.pad = false;
  EXPECT_FALSE(sampler_options(eval).pad);
}

TEST(SeededPermutation, IsAPermutation) {
  auto p = seeded_permutation(1000, 42, 0);
  std::sort(p.begin(), p.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(p[i], i);
}

}  // namespace
}  // namespace dtrain
