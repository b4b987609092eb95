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

// ---- The sample cursor (Note [Sample cursor]) ----------------------------------------

// With a block (Note [Block order]) too: whole blocks of 4, the batch 4.
TEST(SampleCursor, StepIndicesAreTheUnpaddedSamplersShareFromTheCursorBatched) {
  for (int64_t block : {1, 4}) {
    for (int64_t consumed : {0, 7, 24, 48, 49, 50}) {
      const SampleCursor c{5, 2, 50, consumed, true, block};
      const std::vector<int64_t> order = c.order();
      for (int world : {1, 2, 3}) {
        for (int rank = 0; rank < world; ++rank) {
          DistributedSampler s(50, SamplerOptions()
                                       .set_rank(rank)
                                       .set_world_size(world)
                                       .set_seed(5)
                                       .set_pad(false)
                                       .set_block(block));
          s.set_epoch(2);
          s.set_start(consumed);
          std::vector<int64_t> batched;
          for (int64_t step = 0; step < c.steps_left(world, 4); ++step) {
            const auto part = step_indices(c, order, rank, world, 4, step);
            EXPECT_LE(part.size(), 4u);
            batched.insert(batched.end(), part.begin(), part.end());
          }
          EXPECT_EQ(batched, s.indices()) << "block " << block << ", consumed " << consumed
                                          << ", rank " << rank << " of " << world;
          EXPECT_TRUE(step_indices(c, order, rank, world, 4, c.steps_left(world, 4)).empty());
        }
      }
    }
  }
}

TEST(SampleCursor, ResumingAtAnotherWorldSizeSeesEverySampleOfTheEpochExactlyOnce) {
  // Two ranks of batch 4 take 3 steps, then three ranks of batch 5 (or one
  // of batch 7) finish the epoch from the cursor.
  const SampleCursor start{17, 1, 53, 0, true};
  const std::vector<int64_t> order = start.order();
  for (auto [world, batch] : {std::pair<int, int64_t>{3, 5}, {1, 7}, {4, 1}}) {
    std::multiset<int64_t> seen;
    SampleCursor c = start;
    for (int64_t step = 0; step < 3; ++step) {
      for (int r = 0; r < 2; ++r) {
        for (int64_t i : step_indices(c, order, r, 2, 4, step)) seen.insert(i);
      }
    }
    c = SampleCursor::from_state(c.advanced(3, 2, 4).to_state());  // through a checkpoint
    EXPECT_EQ(c.consumed, 24);
    for (int64_t step = 0; step < c.steps_left(world, batch); ++step) {
      for (int r = 0; r < world; ++r) {
        for (int64_t i : step_indices(c, order, r, world, batch, step)) seen.insert(i);
      }
    }
    EXPECT_EQ(seen.size(), 53u) << world;
    for (int64_t i = 0; i < 53; ++i) EXPECT_EQ(seen.count(i), 1u) << "sample " << i;
    EXPECT_EQ(c.advanced(c.steps_left(world, batch), world, batch).consumed, 53);
  }
}

TEST(SampleCursor, StateRoundTripsAndABadStateNamesTheField) {
  const SampleCursor c{uint64_t{1} << 63, 4, 1000, 640, false};
  const SampleCursor back = SampleCursor::from_state(c.to_state());
  EXPECT_EQ(back.seed, c.seed);
  EXPECT_EQ(back.epoch, 4);
  EXPECT_EQ(back.dataset_size, 1000);
  EXPECT_EQ(back.consumed, 640);
  EXPECT_FALSE(back.shuffle);
  auto state = c.to_state();
  state.erase(state.begin() + 3);
  EXPECT_THROW(
      {
        try {
          SampleCursor::from_state(state);
        } catch (const InvalidArgument& e) {
          EXPECT_STREQ(e.what(),
                       "sample cursor state has no 'consumed' field; it was not written by "
                       "SampleCursor::to_state()");
          throw;
        }
      },
      InvalidArgument);
  state = c.to_state();
  state[3].second = 1001;
  EXPECT_THROW(SampleCursor::from_state(state), InvalidArgument);
}

TEST(DistributedSampler, APaddedShareFromAStartPositionIsPaddedFromThere) {
  // 10 samples, 7 consumed: 3 left for 2 ranks, padded to 4 by wrap-around.
  const auto order = seeded_permutation(10, 0, 0);
  std::vector<int64_t> all;
  for (int r = 0; r < 2; ++r) {
    DistributedSampler s(10, SamplerOptions().set_rank(r).set_world_size(2));
    s.set_start(7);
    EXPECT_EQ(s.num_samples(), 2);
    EXPECT_EQ(s.remaining(), 4);
    const auto mine = s.indices();
    all.insert(all.end(), mine.begin(), mine.end());
    s.set_epoch(0);
    EXPECT_EQ(s.start(), 0) << "set_epoch starts the epoch from the beginning";
  }
  EXPECT_EQ(all, (std::vector<int64_t>{order[7], order[9], order[8], order[0]}));
  DistributedSampler s(10, SamplerOptions());
  EXPECT_THROW(s.set_start(11), InvalidArgument);
}

// ---- Block order (Note [Block order]) ----------------------------------------------

TEST(BlockOrder, PermutesWholeBlocksKeepsEachInOrderAndTheShortOneLast) {
  EXPECT_EQ(block_permutation(53, 1, 9, 2), seeded_permutation(53, 9, 2));
  const std::vector<int64_t> p = block_permutation(53, 8, 9, 2);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 53; ++i) ASSERT_EQ(sorted[i], i);
  for (int64_t c = 0; c < 6; ++c) {  // the six whole blocks, each at a multiple of 8
    EXPECT_EQ(p[c * 8] % 8, 0) << "block " << c;
    for (int64_t k = 1; k < 8; ++k) EXPECT_EQ(p[c * 8 + k], p[c * 8] + k);
  }
  for (int64_t i = 48; i < 53; ++i) EXPECT_EQ(p[i], i) << "the short block stays last";
  EXPECT_NE(block_permutation(53, 8, 9, 3), p) << "another epoch, another order";
  EXPECT_EQ(block_permutation(53, 8, 9, 2), p);
}

TEST(BlockOrder, RanksTakeWholeBlocksAndUnpaddedSharesCoverEveryIndexOnce) {
  for (int64_t n : {7, 53, 64, 100}) {
    for (int world : {1, 2, 3, 5}) {
      std::multiset<int64_t> seen;
      std::vector<int64_t> padded_lengths, dropped_lengths;
      for (int r = 0; r < world; ++r) {
        const auto options = SamplerOptions().set_rank(r).set_world_size(world).set_block(4);
        DistributedSampler unpadded(n, SamplerOptions(options).set_pad(false));
        DistributedSampler padded(n, options);
        DistributedSampler dropped(n, SamplerOptions(options).set_drop_last(true));
        for (DistributedSampler* s : {&unpadded, &padded, &dropped}) s->set_epoch(1);
        const auto mine = unpadded.indices();
        seen.insert(mine.begin(), mine.end());
        for (size_t i = 0; i + 4 <= mine.size(); i += 4) {  // whole blocks of neighbours
          for (size_t k = 1; k < 4; ++k) {
            if (mine[i] < n / 4 * 4) {
              EXPECT_EQ(mine[i + k], mine[i] + int64_t(k)) << n << " " << r;
            }
          }
        }
        padded_lengths.push_back(static_cast<int64_t>(padded.indices().size()));
        dropped_lengths.push_back(static_cast<int64_t>(dropped.indices().size()));
        const auto p = padded.indices();
        EXPECT_TRUE(std::equal(mine.begin(), mine.end(), p.begin())) << "padding only at the end";
      }
      EXPECT_EQ(seen.size(), static_cast<size_t>(n)) << n << " on " << world;
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen.count(i), 1u) << "sample " << i;
      for (int64_t len : padded_lengths) EXPECT_EQ(len, padded_lengths[0]) << n << " " << world;
      for (int64_t len : dropped_lengths) EXPECT_EQ(len, dropped_lengths.back());
      EXPECT_GE(padded_lengths[0] * world, n);
      EXPECT_LE(dropped_lengths[0] * world, n);
    }
  }
}

TEST(BlockOrder, ResumingAtAnotherWorldSizeAndBatchSeesEverySampleOfTheEpochExactlyOnce) {
  // Two ranks of batch 8 take 3 steps, then other world sizes and batches
  // (multiples of the block, 4) finish the epoch from the cursor.
  const SampleCursor start{17, 1, 203, 0, true, 4};
  const std::vector<int64_t> order = start.order();
  for (auto [world, batch] : {std::pair<int, int64_t>{3, 4}, {1, 12}, {5, 8}}) {
    std::multiset<int64_t> seen;
    SampleCursor c = start;
    for (int64_t step = 0; step < 3; ++step) {
      for (int r = 0; r < 2; ++r) {
        const auto part = step_indices(c, order, r, 2, 8, step);
        EXPECT_EQ(part.size(), 8u);
        for (size_t k = 1; k < part.size(); ++k) {  // two whole blocks of neighbours
          if (k % 4 != 0) {
            EXPECT_EQ(part[k], part[k - 1] + 1);
          }
        }
        seen.insert(part.begin(), part.end());
      }
    }
    c = SampleCursor::from_state(c.advanced(3, 2, 8).to_state());  // through a checkpoint
    EXPECT_EQ(c.consumed, 48);
    EXPECT_EQ(c.block, 4);
    for (int64_t step = 0; step < c.steps_left(world, batch); ++step) {
      for (int r = 0; r < world; ++r) {
        for (int64_t i : step_indices(c, order, r, world, batch, step)) seen.insert(i);
      }
    }
    EXPECT_EQ(seen.size(), 203u) << world;
    for (int64_t i = 0; i < 203; ++i) EXPECT_EQ(seen.count(i), 1u) << "sample " << i;
  }
}

TEST(BlockOrder, ABlockThatDoesNotDivideTheBatchIsRefusedNamingBoth) {
  LoaderOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.batch_size = 12;
  o.shuffle_block = 8;
  try {
    sampler_options(o);
    FAIL() << "block 8 with batch 12 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(
        std::string(e.what()).find("shuffle block 8 must be >= 1 and divide the batch size 12"),
        std::string::npos)
        << e.what();
  }
  o.shuffle_block = 4;
  EXPECT_EQ(sampler_options(o).block, 4);
  const SampleCursor c{0, 0, 40, 0, true, 8};
  EXPECT_THROW(step_indices(c, c.order(), 0, 1, 12, 0), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, SamplerOptions().set_block(0)), InvalidArgument);
}

TEST(BlockOrder, ACursorStateWithoutABlockReadsAsPyTorchsOrder) {
  const SampleCursor c{3, 1, 100, 40, true, 16};
  EXPECT_EQ(SampleCursor::from_state(c.to_state()).block, 16);
  auto state = c.to_state();
  state.pop_back();  // a state written before "block" existed
  EXPECT_EQ(SampleCursor::from_state(state).block, 1);
  state = c.to_state();
  state.back().second = 0;
  EXPECT_THROW(SampleCursor::from_state(state), InvalidArgument);
}

TEST(SeededPermutation, IsAPermutation) {
  auto p = seeded_permutation(1000, 42, 0);
  std::sort(p.begin(), p.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(p[i], i);
}

}  // namespace
}  // namespace dtrain
