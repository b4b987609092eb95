// ImageLoader: determinism across thread counts, coverage per rank, bad data,
// resuming, stopping and timeouts.

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "data/image/fetcher.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"
#include "image_fixtures.h"

namespace dtrain {
namespace {

using testing::TempDir;

// Raw 4x4 images whose pixels spell their index; listed indices fail to read,
// and every read can be slowed down.
class CountingSource : public ImageSource {
 public:
  explicit CountingSource(int64_t n, std::set<int64_t> bad = {}) : n_(n), bad_(std::move(bad)) {}
  int64_t size() const override { return n_; }
  int64_t label(int64_t i) const override { return i % 10; }
  std::string name(int64_t i) const override { return "sample-" + std::to_string(i); }
  void read(int64_t i, SampleData& out) const override {
    const int now = ++in_flight_;
    for (int seen = most_in_flight_;
         now > seen && !most_in_flight_.compare_exchange_weak(seen, now);) {
    }
    ++reads_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      readers_.insert(std::this_thread::get_id());
    }
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    --in_flight_;
    if (bad_.count(i)) throw DataError("not an image");
    out.encoded = false;
    out.image.reset(4, 4, 3);
    for (size_t p = 0; p < out.image.pixels.size(); ++p) {
      out.image.pixels[p] = static_cast<uint8_t>(p % 3 == 0 ? i % 256 : p % 3 == 1 ? i / 256 : p);
    }
  }
  // Runs of run_ neighbours (aligned to multiples of run_) when run_ > 1,
  // as a packed shard's (Note [Runs of neighbours]); a run with a bad
  // sample fails whole.
  int64_t run_length(int64_t i, int64_t max) const override {
    return run_ > 1 ? std::min(max, run_ - i % run_) : ImageSource::run_length(i, max);
  }
  void read_run(int64_t first, int64_t count, SampleData* out) const override {
    ++runs_;
    for (int64_t k = 0; k < count; ++k) {
      if (bad_.count(first + k)) throw DataError("a run with a bad sample");
    }
    run_samples_ += count;
    for (int64_t k = 0; k < count; ++k) read(first + k, out[k]);
  }
  const std::vector<std::string>& classes() const override { return classes_; }
  bool remote() const override { return remote_; }
  size_t readers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return readers_.size();
  }
  std::chrono::milliseconds delay_{0};
  bool remote_ = false;
  mutable std::atomic<int> in_flight_{0}, most_in_flight_{0};
  mutable std::atomic<int64_t> reads_{0};
  int64_t run_ = 0;
  mutable std::atomic<int64_t> runs_{0}, run_samples_{0};

 private:
  int64_t n_;
  std::set<int64_t> bad_;
  std::vector<std::string> classes_ = std::vector<std::string>(10, "c");
  mutable std::mutex mu_;
  mutable std::set<std::thread::id> readers_;
};

TransformOptions raw_transform() {
  TransformOptions t;
  t.size = 4;
  t.uint8_output = true;
  return t;
}

int64_t index_of_row(const at::Tensor& inputs, int64_t row) {
  const at::Tensor r = inputs[row];
  return r[0][0][0].item<int64_t>() + 256 * r[1][0][0].item<int64_t>();
}

LoaderOptions loader_options(int threads, int rank = 0, int world = 1) {
  LoaderOptions o;
  o.batch_size = 8;
  o.seed = 42;
  o.threads = threads;
  o.rank = rank;
  o.world_size = world;
  return o;
}

std::vector<at::Tensor> epoch_inputs(ImageLoader& loader, int64_t epoch) {
  std::vector<at::Tensor> out;
  loader.start_epoch(epoch);
  for (Batch b; loader.next(b);) {
    out.push_back(b.inputs.clone());
    out.push_back(b.targets.clone());
  }
  return out;
}

TEST(ImageLoader, OutputIsIdenticalForOneAndFourThreadsWithAugmentation) {
  TempDir dir;
  testing::make_image_folder(dir.path(), {"a", "b", "c"}, 7);
  auto source = open_image_folder(dir.path());
  const TransformOptions t = TransformOptions::imagenet_train(24);
  ImageLoader inline_loader(source, loader_options(0), t, {});
  ImageLoader one(source, loader_options(1), t, {});
  ImageLoader four(source, loader_options(4), t, {});
  for (int64_t epoch : {0, 1}) {
    const auto a = epoch_inputs(inline_loader, epoch);
    const auto b = epoch_inputs(one, epoch);
    const auto c = epoch_inputs(four, epoch);
    ASSERT_EQ(a.size(), 2u * 3);  // 21 samples in batches of 8
    ASSERT_EQ(b.size(), a.size());
    ASSERT_EQ(c.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(at::equal(a[i], b[i])) << "epoch " << epoch << " tensor " << i;
      EXPECT_TRUE(at::equal(a[i], c[i])) << "epoch " << epoch << " tensor " << i;
    }
  }
  // Different epochs draw different crops and orders.
  EXPECT_FALSE(at::equal(epoch_inputs(four, 0)[0], epoch_inputs(four, 1)[0]));
}

TEST(ImageLoader, EverySampleIsSeenOncePerEpochAcrossTheRankPartition) {
  auto source = std::make_shared<CountingSource>(100);
  for (int world : {1, 3, 4}) {
    std::multiset<int64_t> seen;
    for (int rank = 0; rank < world; ++rank) {
      ImageLoader loader(source, loader_options(2, rank, world), raw_transform(), {});
      loader.start_epoch(3);
      int64_t batches = 0;
      for (Batch b; loader.next(b); ++batches) {
        for (int64_t r = 0; r < b.inputs.size(0); ++r) {
          const int64_t index = index_of_row(b.inputs, r);
          EXPECT_EQ(b.targets[r].item<int64_t>(), index % 10);
          seen.insert(index);
        }
      }
      EXPECT_EQ(batches, loader.batches_per_epoch());
    }
    // Padding repeats at most world - 1 samples (PyTorch's wrap-around).
    const int64_t total = (100 + world - 1) / world * world;
    EXPECT_EQ(static_cast<int64_t>(seen.size()), total) << world;
    for (int64_t i = 0; i < 100; ++i) EXPECT_GE(seen.count(i), 1u) << i;
  }
}

TEST(ImageLoader, AnExactLoaderResumedAtAnotherWorldSizeSeesEverySampleOnce) {
  auto source = std::make_shared<CountingSource>(61);
  std::multiset<int64_t> seen;
  auto take = [&](ImageLoader& loader, int64_t batches) {
    for (Batch b; batches-- > 0 && loader.next(b);) {
      for (int64_t r = 0; r < b.inputs.size(0); ++r) seen.insert(index_of_row(b.inputs, r));
    }
  };
  for (int rank = 0; rank < 2; ++rank) {  // 2 ranks x batch 8, 2 steps: 32 samples
    ImageLoader loader(source, loader_options(2, rank, 2).set_exact(true), raw_transform(), {});
    loader.start_epoch(5);
    take(loader, 2);
  }
  std::vector<int64_t> batches;
  for (int rank = 0; rank < 3; ++rank) {  // 29 left: 2 steps of 3 x 8, the last short
    ImageLoader loader(source, loader_options(2, rank, 3).set_exact(true), raw_transform(), {});
    loader.start_epoch(5);
    loader.resume_at(32);
    batches.push_back(loader.batches_per_epoch());
    take(loader, 100);
  }
  EXPECT_EQ(batches, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(seen.size(), 61u);
  for (int64_t i = 0; i < 61; ++i) EXPECT_EQ(seen.count(i), 1u) << "sample " << i;
}

// Samples 3 and 11 of 20 fail to read (`remote`: on the fetch threads,
// Note [Fetch ahead]): each is counted, named in a warning and replaced by the
// next good sample of its batch.
void expect_corrupt_samples_replaced(bool remote, int64_t run = 0) {
  auto source = std::make_shared<CountingSource>(20, std::set<int64_t>{3, 11});
  source->remote_ = remote;
  source->run_ = run;
  LoaderOptions o = loader_options(2);
  o.shuffle = false;
  o.shuffle_block = std::max<int64_t>(run, 1);
  ImageLoader loader(source, o, raw_transform(), {});
  loader.start_epoch(0);
  ::testing::internal::CaptureStderr();
  std::vector<int64_t> rows;
  for (Batch b; loader.next(b);) {
    for (int64_t r = 0; r < b.inputs.size(0); ++r) rows.push_back(index_of_row(b.inputs, r));
  }
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(loader.skipped_samples(), 2);
  EXPECT_NE(warnings.find("sample-3: not an image"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("sample-11"), std::string::npos) << warnings;
  ASSERT_EQ(rows.size(), 20u);  // batches stay full: the next good sample stands in
  EXPECT_EQ(rows[3], 4);
  EXPECT_EQ(rows[11], 12);
}

TEST(ImageLoader, CorruptSamplesAreReplacedCountedAndNamed) {
  expect_corrupt_samples_replaced(/*remote=*/false);
}

// Note [Runs of neighbours]: the fetch threads read each failed run's
// samples alone, so only the bad ones are lost.
TEST(ImageLoader, CorruptSamplesInARunOfNeighboursAreReplacedCountedAndNamedAlone) {
  expect_corrupt_samples_replaced(/*remote=*/true, /*run=*/4);
}

TEST(ImageLoader, StrictModeFailsOnTheFirstCorruptSample) {
  TempDir dir;
  testing::make_image_folder(dir.path(), {"a"}, 4);
  testing::write_file(dir / "a/broken.jpg", {0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3});
  ImageLoaderOptions strict;
  strict.strict = true;
  LoaderOptions o = loader_options(2);
  ImageLoader loader(open_image_folder(dir.path()), o, TransformOptions::imagenet_eval(16), strict);
  loader.start_epoch(0);
  Batch b;
  try {
    loader.next(b);
    FAIL() << "strict mode accepted a corrupt JPEG";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "a/broken.jpg"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("DatasetOptions::strict"), std::string::npos) << e.what();
  }
}

TEST(ImageLoader, SkipToResumesTheEpochExactlyWhereACheckpointLeftIt) {
  auto source = std::make_shared<CountingSource>(50);
  ImageLoader full(source, loader_options(3), raw_transform(), {});
  const auto expected = epoch_inputs(full, 2);
  ImageLoader resumed(source, loader_options(2), raw_transform(), {});
  resumed.start_epoch(2);
  Batch b;
  ASSERT_TRUE(resumed.next(b));
  resumed.skip_to(4);
  EXPECT_EQ(resumed.position(), 4);
  size_t at = 8;  // tensors of batch 4: inputs at 2 * 4
  for (; resumed.next(b); at += 2) {
    ASSERT_LT(at, expected.size());
    EXPECT_TRUE(at::equal(b.inputs, expected[at]));
    EXPECT_TRUE(at::equal(b.targets, expected[at + 1]));
  }
  EXPECT_EQ(at, expected.size());
}

TEST(ImageLoader, DestroyingMidEpochStopsTheWorkersPromptly) {
  auto source = std::make_shared<CountingSource>(10000);
  source->delay_ = std::chrono::milliseconds(1);
  const auto start = std::chrono::steady_clock::now();
  {
    ImageLoader loader(source, loader_options(4), raw_transform(), {});
    loader.start_epoch(0);
    Batch b;
    ASSERT_TRUE(loader.next(b));
    loader.start_epoch(1);  // restarting mid-epoch is a stop too
    ASSERT_TRUE(loader.next(b));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(ImageLoader, AStalledSourceTimesOutInsteadOfBlockingForever) {
  auto source = std::make_shared<CountingSource>(16);
  source->delay_ = std::chrono::milliseconds(300);
  ImageLoaderOptions o;
  o.timeout = std::chrono::milliseconds(50);
  ImageLoader loader(source, loader_options(1), raw_transform(), o);
  loader.start_epoch(0);
  Batch b;
  try {
    loader.next(b);
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("not ready after 50 ms"), std::string::npos) << e.what();
  }
}

TEST(ImageLoader, HeldBatchesAreNeverOverwritten) {
  auto source = std::make_shared<CountingSource>(64);
  ImageLoaderOptions o;
  o.prefetch_batches = 2;
  ImageLoader loader(source, loader_options(2), raw_transform(), o);
  loader.start_epoch(0);
  std::vector<Batch> held(8);
  std::vector<at::Tensor> copies;
  for (Batch& b : held) {
    ASSERT_TRUE(loader.next(b));
    copies.push_back(b.inputs.clone());
  }
  for (size_t i = 0; i < held.size(); ++i) EXPECT_TRUE(at::equal(held[i].inputs, copies[i])) << i;
}

// Note [Fetch ahead] (src/data/image/fetcher.cpp).
TEST(ImageLoader, ARemoteSourceIsReadAheadOnFetchThreadsAndGivesTheSameBatches) {
  auto local = std::make_shared<CountingSource>(120);
  auto remote = std::make_shared<CountingSource>(120);
  remote->remote_ = true;
  remote->delay_ = std::chrono::milliseconds(2);
  ImageLoader reference(local, loader_options(1), raw_transform(), {});
  ImageLoader fetching(remote, loader_options(1), raw_transform(), {});  // fetch_threads -1
  for (int64_t epoch : {0, 1}) {
    const auto a = epoch_inputs(reference, epoch);
    const auto b = epoch_inputs(fetching, epoch);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << epoch << " " << i;
  }
  EXPECT_EQ(local->most_in_flight_.load(), 1);  // a local source: the one decode thread reads
  EXPECT_GT(remote->readers(), 2u);             // the fetch threads read
  EXPECT_GT(remote->most_in_flight_.load(), 1);
  EXPECT_LE(remote->most_in_flight_.load(), 16 + 1);  // 16 fetch threads, 1 decode thread
  // Each sample read once per epoch, and epoch 2's first batch may have been
  // read already (Note [Across the epoch boundary]).
  EXPECT_GE(remote->reads_.load(), 240);
  EXPECT_LE(remote->reads_.load(), 240 + 8);
}

// Note [Across the epoch boundary] (src/data/image/fetcher.cpp): while an
// epoch ends, the next one's first batch is read; the next epoch takes it
// instead of reading it again, and a loader that goes to another epoch
// drops it. The batches are those of a loader without read-ahead.
TEST(ImageLoader, TheNextEpochsFirstBatchIsReadWhileThisOneEndsAndNotReadAgain) {
  auto local = std::make_shared<CountingSource>(50);
  auto remote = std::make_shared<CountingSource>(50);
  remote->remote_ = true;
  ImageLoader reference(local, loader_options(1), raw_transform(), {});
  ImageLoader fetching(remote, loader_options(1), raw_transform(), {});
  auto settled_reads = [&](int64_t expected) {  // bounded wait, then a little more
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (remote->reads_.load() < expected && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return remote->reads_.load();
  };
  for (int64_t epoch : {0, 1, 5}) {
    SCOPED_TRACE(epoch);
    const auto a = epoch_inputs(reference, epoch);
    const auto b = epoch_inputs(fetching, epoch);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << i;
    if (epoch == 0) {
      EXPECT_EQ(settled_reads(50 + 8), 50 + 8) << "epoch 1's first batch";
    } else if (epoch == 1) {
      EXPECT_EQ(settled_reads(100 + 8), 100 + 8) << "none read twice";
    }
  }
  // Epoch 5 in place of 2: epoch 2's first batch dropped, epoch 5's read.
  EXPECT_EQ(settled_reads(150 + 16), 150 + 16);
}

// Note [Block order] (dtrain/sampler.h) with Note [Runs of neighbours]: a
// block's samples are read with one request, and the batches are those of a
// loader reading every sample alone in the same block order.
TEST(ImageLoader, AShuffleBlockOfNeighboursIsFetchedWithOneRequestAndGivesTheSameBatches) {
  auto local = std::make_shared<CountingSource>(160);
  auto remote = std::make_shared<CountingSource>(160);
  local->run_ = 8;  // runs allowed, but a local source has no fetch threads
  remote->remote_ = true;
  remote->run_ = 8;
  remote->delay_ = std::chrono::milliseconds(2);
  LoaderOptions o = loader_options(1);
  o.shuffle_block = 8;
  ImageLoader reference(local, o, raw_transform(), {});
  ImageLoader fetching(remote, o, raw_transform(), {});
  for (int64_t epoch : {0, 1}) {
    const auto a = epoch_inputs(reference, epoch);
    const auto b = epoch_inputs(fetching, epoch);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << epoch << " " << i;
  }
  EXPECT_GE(remote->reads_.load(), 320);      // each sample once per epoch, and
  EXPECT_LE(remote->reads_.load(), 320 + 8);  // perhaps epoch 2's first batch
  // Requests: a run each, plus any sample a decoder read alone.
  const int64_t requests = remote->runs_.load() + (320 - remote->run_samples_.load());
  EXPECT_GE(remote->run_samples_.load(), 320 / 2) << "most samples come in runs";
  EXPECT_LE(requests, 320 / 4) << remote->runs_.load() << " runs";
  EXPECT_EQ(local->runs_.load(), 0) << "a local source is read by the decode thread, one by one";
}

// Note [Window opens with the epoch]: first_window positions at the start,
// one more for each position taken, never past max_ahead.
TEST(Fetcher, TheWindowOpensAtItsFirstSizeAndWidensByOneForEachPositionTaken) {
  CountingSource source(400);
  std::vector<int64_t> order(400);
  for (int64_t i = 0; i < 400; ++i) order[i] = i;
  image::FetchOptions f;
  f.threads = 4;
  f.max_ahead = 64;
  f.first_window = 8;
  image::Fetcher fetcher(source, order, 0, f);
  // The reads once the fetch threads have started all they may: waits for
  // `expected` (bounded), then a little longer for any read past it.
  auto settled_reads = [&](int64_t expected) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (source.reads_.load() < expected && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return source.reads_.load();
  };
  EXPECT_EQ(settled_reads(8), 8);
  SampleData d;
  for (int64_t pos = 0; pos < 16; ++pos) fetcher.take(pos, d);
  EXPECT_EQ(settled_reads(40), 16 + 8 + 16);  // taken 16; window 8 + 16
  for (int64_t pos = 16; pos < 100; ++pos) fetcher.take(pos, d);
  EXPECT_EQ(settled_reads(164), 100 + 64);  // the window at max_ahead
}

TEST(ImageLoader, ReadAheadStaysWithinItsThreadsAndItsWindowWhileTheConsumerWaits) {
  auto source = std::make_shared<CountingSource>(400);
  source->remote_ = true;
  source->delay_ = std::chrono::milliseconds(1);
  ImageLoaderOptions o;
  o.prefetch_batches = 2;
  o.fetch_threads = 3;
  ImageLoader loader(source, loader_options(1), raw_transform(), o);
  loader.start_epoch(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the consumer takes nothing
  // Decoded: 2 slots of 8; fetched ahead: at most 2 batches past the highest taken position.
  EXPECT_LE(source->reads_.load(), 2 * 8 + 2 * 8 + 1);
  EXPECT_GE(source->reads_.load(), 2 * 8);
  EXPECT_LE(source->most_in_flight_.load(), 3 + 1);
  int64_t rows = 0;
  for (Batch b; loader.next(b);) rows += b.inputs.size(0);
  EXPECT_EQ(rows, 400);
}

TEST(ImageLoader, ReadAheadStopsAtItsByteBound) {
  auto source = std::make_shared<CountingSource>(400);
  source->remote_ = true;
  ImageLoaderOptions o;
  o.prefetch_batches = 2;
  o.fetch_threads = 4;
  o.fetch_bytes = 1;  // one fetched sample (48 bytes) is over it
  ImageLoader loader(source, loader_options(1), raw_transform(), o);
  loader.start_epoch(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LE(source->reads_.load(), 2 * 8 + 1 + 4);  // decoded, taken, one read per thread
  int64_t rows = 0;
  for (Batch b; loader.next(b);) rows += b.inputs.size(0);
  EXPECT_EQ(rows, 400);
}

TEST(ImageLoader, AReadAheadFailureIsReplacedCountedAndNamedAsWithoutReadAhead) {
  expect_corrupt_samples_replaced(/*remote=*/true);
}

TEST(ImageLoader, AReadAheadLoaderResumedMidEpochMatchesTheFullEpoch) {
  auto source = std::make_shared<CountingSource>(50);
  source->remote_ = true;
  ImageLoader full(source, loader_options(3), raw_transform(), {});
  const auto expected = epoch_inputs(full, 2);
  ImageLoader resumed(source, loader_options(0), raw_transform(), {});  // inline decode
  resumed.start_epoch(2);
  Batch b;
  ASSERT_TRUE(resumed.next(b));
  resumed.skip_to(4);
  size_t at = 8;
  for (; resumed.next(b); at += 2) {
    ASSERT_LT(at, expected.size());
    EXPECT_TRUE(at::equal(b.inputs, expected[at]));
  }
  EXPECT_EQ(at, expected.size());
}

TEST(ImageLoader, BadReadAheadOptionsAreRefusedNamingTheField) {
  auto source = std::make_shared<CountingSource>(8);
  ImageLoaderOptions o;
  o.fetch_threads = -2;
  EXPECT_THROW(
      {
        try {
          ImageLoader(source, loader_options(1), raw_transform(), o);
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("fetch_threads"), std::string::npos) << e.what();
          throw;
        }
      },
      InvalidArgument);
}

TEST(ImageLoader, Uint8BatchesNormaliseToTheFloatBatches) {
  TempDir dir;
  testing::make_image_folder(dir.path(), {"a", "b"}, 3);
  auto source = open_image_folder(dir.path());
  TransformOptions t = TransformOptions::imagenet_train(16);
  ImageLoader floats(source, loader_options(2), t, {});
  t.uint8_output = true;
  ImageLoader bytes(source, loader_options(2), t, {});
  const auto f = epoch_inputs(floats, 0);
  const auto u = epoch_inputs(bytes, 0);
  EXPECT_EQ(u[0].scalar_type(), at::kByte);
  EXPECT_TRUE(at::allclose(normalize_batch(u[0], t), f[0], 1e-5, 1e-5));
}

TEST(SyntheticLoader, GivesEachRankItsShareOfFullBatches) {
  LoaderOptions o;
  o.batch_size = 10;
  o.rank = 0;
  o.world_size = 3;
  o.drop_last = true;
  auto loader = make_synthetic_loader({3, 8, 8}, 7, 100, o);
  EXPECT_EQ(loader->samples_per_epoch(), 34);
  EXPECT_EQ(loader->batches_per_epoch(), 3);
  Batch b;
  loader->start_epoch(0);
  int n = 0;
  while (loader->next(b)) ++n;
  EXPECT_EQ(n, 3);
  EXPECT_LT(b.targets.max().item<int64_t>(), 7);
}

}  // namespace
}  // namespace dtrain
