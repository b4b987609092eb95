// Datasets in S3 (Note [Data locations]): moto's server on loopback holds
// them, boto3 uploads them and reads back what dtrain writes, and the
// training and evaluation batches from s3:// -- decoded, augmented, in the
// sampler's order -- must equal those from local disk bit for bit (so a
// training run's losses are the same).

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <ATen/ATen.h>

#include "data/image/location.h"
#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"
#include "image_fixtures.h"
#include "objstore/peer.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

using nlohmann::json;
using testing::TempDir;

// The peer's "put" takes an object's bytes in hex.
std::string to_hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : bytes) hex += {digits[b >> 4], digits[b & 15]};
  return hex;
}

// Uploads every file under `local` to s3://bucket/<prefix>/<relative path>.
void upload(const testing::MotoServer& moto, const std::string& bucket, const std::string& local,
            const std::string& prefix) {
  json files = json::object();
  for (const auto& e : std::filesystem::recursive_directory_iterator(local)) {
    if (!e.is_regular_file()) continue;
    files[prefix + "/" + e.path().lexically_relative(local).string()] =
        to_hex(testing::read_bytes(e.path().string()));
  }
  moto.peer("put", bucket, {}, files);
}

class S3Data : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string venv = testing::s3_test_venv();
    if (venv.empty()) return;
    dir_ = std::make_unique<TempDir>();
    // Every request the server answers, one JSON line each (object_gets).
    recording_ = *dir_ / "requests.jsonl";
    moto_ = std::make_unique<testing::MotoServer>(
        venv, std::vector<std::string>{"MOTO_ENABLE_RECORDING=True",
                                       "MOTO_RECORDER_FILEPATH=" + recording_});
    if (!moto_->failure.empty()) return;
    // Storage reads AWS's variables, as the SDKs do.
    ::setenv("AWS_ENDPOINT_URL", moto_->endpoint.c_str(), 1);
    ::setenv("AWS_ACCESS_KEY_ID", moto_->key.c_str(), 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", moto_->secret.c_str(), 1);
    ::setenv("AWS_REGION", "us-east-1", 1);
    ::setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    testing::make_image_folder(*dir_ / "folder/train", {"ant", "bee", "cat"}, 6);
    testing::make_image_folder(*dir_ / "folder/val", {"ant", "bee", "cat"}, 2);
    upload(*moto_, "data", *dir_ / "folder", "folder");
  }
  static void TearDownTestSuite() {
    moto_.reset();
    dir_.reset();
  }
  void SetUp() override {
    if (!moto_) GTEST_SKIP() << testing::kNoVenv;
    ASSERT_TRUE(moto_->failure.empty()) << moto_->failure;
  }

  // Every batch of two epochs of both splits, 2 ranks of batch 4, 2 loader threads.
  static std::vector<at::Tensor> batches(const std::string& dataset, const std::string& data_dir,
                                         const DataCacheOptions& cache = {}, int64_t block = 1) {
    std::vector<at::Tensor> out;
    for (int rank = 0; rank < 2; ++rank) {
      DatasetOptions o;
      o.name = dataset;
      o.data_dir = data_dir;
      o.cache = cache;
      o.image_size = 28;
      o.train = LoaderOptions().set_batch_size(4).set_seed(5).set_threads(2);
      o.train.set_rank(rank).set_world_size(2).set_shuffle_block(block);
      o.test = LoaderOptions::evaluation().set_batch_size(4).set_rank(rank).set_world_size(2);
      DatasetSplits s = open_dataset(o);
      for (at::Tensor& t : epochs_of(s)) out.push_back(std::move(t));
    }
    return out;
  }

  // WebDataset shards of the folder's splits (4 samples a shard, written with
  // Python's tarfile as the webdataset library writes them) in DIR/<name>/.
  static void write_webdataset(const std::string& name) {
    for (const char* split : {"train", "val"}) {
      const testing::ShellRun run = testing::run_shell(
          "/usr/bin/python3 " DTRAIN_SOURCE_DIR "/tests/data/scripts/make_webdataset.py " +
          *dir_ / "folder/" + split + " " + *dir_ / name + "/" + split + " 4 2>&1");
      ASSERT_EQ(run.code, 0) << run.output;
    }
  }

  // Every batch (inputs, targets) of epochs 0 and 1 of both splits.
  static std::vector<at::Tensor> epochs_of(DatasetSplits& s) {
    std::vector<at::Tensor> out;
    for (int64_t epoch : {0, 1}) {
      for (Loader* l : {s.train.get(), s.test.get()}) {
        l->set_epoch(epoch);
        for (Batch& b : *l) {
          out.push_back(b.inputs.clone());
          out.push_back(b.targets.clone());
        }
      }
    }
    return out;
  }

  static void expect_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "tensor " << i;
  }

  // The requests the server answered since the last count for which
  // `counts(method, url)` holds; forgets every request.
  static int requests(const std::function<bool(const std::string&, const std::string&)>& counts) {
    int n = 0;
    std::ifstream in(recording_);
    for (std::string line; std::getline(in, line);) {
      const json request = json::parse(line);
      if (counts(request["method"], request["url"])) ++n;
    }
    std::ofstream(recording_, std::ios::trunc);
    return n;
  }

  // GetObject requests (not listings) the server answered for keys under
  // `prefix` in bucket "data" since the last call; forgets them.
  static int object_gets(const std::string& prefix) {
    return requests([&](const std::string& method, const std::string& url) {
      return method == "GET" && url.find("list-type") == std::string::npos &&
             url.find("/data/" + prefix) != std::string::npos;
    });
  }

  // ListObjectsV2 requests (listing pages and directory probes) since the
  // last count; forgets every request.
  static int listings() {
    return requests([](const std::string& method, const std::string& url) {
      return method == "GET" && url.find("list-type=2") != std::string::npos;
    });
  }

  // HEAD requests for keys under `prefix` in bucket "data" since the last
  // count; forgets every request.
  static int heads(const std::string& prefix) {
    return requests([&](const std::string& method, const std::string& url) {
      return method == "HEAD" && url.find("/data/" + prefix) != std::string::npos;
    });
  }

  // The options of `dataset` at `data_dir` with each split's share unset
  // (open_dataset(options, pg) fills it in).
  static DatasetOptions group_options(const std::string& dataset, const std::string& data_dir) {
    DatasetOptions o;
    o.name = dataset;
    o.data_dir = data_dir;
    o.image_size = 28;
    o.train = LoaderOptions().set_batch_size(4).set_seed(5).set_threads(2);
    o.test = LoaderOptions::evaluation().set_batch_size(4);
    return o;
  }

  // What each of 2 ranks gets from `dataset` at `data_dir`: its batches
  // (epochs_of) and its training split's fingerprint; `group`: opened
  // together with open_dataset(options, pg), else each alone with its share.
  struct RankData {
    std::vector<at::Tensor> batches;
    DataFingerprint fingerprint;
  };
  static std::vector<RankData> open_on_two_ranks(const std::string& dataset,
                                                 const std::string& data_dir, bool group) {
    std::vector<RankData> out(2);
    auto take = [&](int rank, DatasetSplits s) {
      out[rank].fingerprint = s.train->fingerprint();
      out[rank].batches = epochs_of(s);
    };
    if (group) {
      testing::run_ranks(2, [&](const ProcessGroup& pg) {
        take(pg.rank(), open_dataset(group_options(dataset, data_dir), pg));
      });
    } else {
      for (int rank = 0; rank < 2; ++rank) {
        DatasetOptions o = group_options(dataset, data_dir);
        o.train.set_rank(rank).set_world_size(2);
        o.test.set_rank(rank).set_world_size(2);
        take(rank, open_dataset(o));
      }
    }
    return out;
  }

  static void expect_same_ranks(const std::vector<RankData>& a, const std::vector<RankData>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t r = 0; r < a.size(); ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      EXPECT_TRUE(a[r].fingerprint.matches(b[r].fingerprint))
          << a[r].fingerprint.str() << " vs " << b[r].fingerprint.str();
      EXPECT_EQ(a[r].fingerprint.etags, b[r].fingerprint.etags);
      expect_equal(a[r].batches, b[r].batches);
    }
  }

  static inline std::unique_ptr<testing::MotoServer> moto_;
  static inline std::unique_ptr<TempDir> dir_;
  static inline std::string recording_;
};

TEST_F(S3Data, AnImageFolderUploadedByBoto3GivesTheBatchesOfTheLocalCopy) {
  const std::vector<at::Tensor> local = batches("imagefolder", *dir_ / "folder");
  // 18 training images on 2 ranks of batch 4: 3 batches; 6 test images: 1 each.
  ASSERT_EQ(local.size(), 2u * 2 * 2 * (3 + 1));
  expect_equal(batches("imagefolder", "s3://data/folder"), local);
}

// Points AWS_ENDPOINT_URL, which the datasets' S3 client reads when they
// open, at `endpoint` while it lives.
class EndpointAs {
 public:
  explicit EndpointAs(const std::string& endpoint) {
    if (const char* old = std::getenv("AWS_ENDPOINT_URL")) old_ = old;
    ::setenv("AWS_ENDPOINT_URL", endpoint.c_str(), 1);
  }
  ~EndpointAs() {
    if (old_) {
      ::setenv("AWS_ENDPOINT_URL", old_->c_str(), 1);
    } else {
      ::unsetenv("AWS_ENDPOINT_URL");
    }
  }

 private:
  std::optional<std::string> old_;
};

// tests/objstore/fault_proxy.py between the loader and moto injects SlowDown,
// resets (before the answer and in the middle of the body) and truncated
// bodies into some of the images' GETs and into a listing, never more than
// two in a row, within the client's default 5 attempts: every fault is
// retried, no image is skipped, and the two epochs' batches (so the losses
// of training on them) are the local copy's bit for bit.
TEST_F(S3Data, TransientFaultsOnGetsAndListingsAreRetriedToTheBatchesOfTheLocalCopy) {
  testing::FaultProxy proxy(
      *moto_,
      json::array(
          {{{"op", "ListObjectsV2"}, {"on", {1}}, {"fault", "slowdown"}},
           {{"op", "GetObject"},
            {"key", "folder/train/ant/*"},
            {"on", {1, 2}},
            {"fault", "slowdown"}},
           {{"op", "GetObject"}, {"key", "folder/train/bee/*"}, {"on", {1, 4}}, {"fault", "reset"}},
           {{"op", "GetObject"},
            {"key", "folder/train/cat/*"},
            {"on", {2, 3}},
            {"fault", "truncate"}},
           {{"op", "GetObject"},
            {"key", "folder/val/*"},
            {"on", {1, 3}},
            {"fault", "reset_mid_body"}}}));
  ASSERT_NE(proxy.port(), 0) << "fault_proxy.py did not start";
  const std::vector<at::Tensor> local = batches("imagefolder", *dir_ / "folder");
  std::vector<at::Tensor> through_faults;
  {
    EndpointAs via(proxy.endpoint());
    through_faults = batches("imagefolder", "s3://data/folder");
  }
  expect_equal(through_faults, local);
  std::map<std::string, int> injected;
  for (const auto& entry : proxy.log()) {
    if (!entry["fault"].is_null()) ++injected[entry["fault"]];
  }
  EXPECT_EQ(injected, (std::map<std::string, int>{
                          {"slowdown", 3}, {"reset", 2}, {"truncate", 2}, {"reset_mid_body", 2}}));
}

TEST_F(S3Data, DtrainPacksIntoS3AndThePackGivesTheLocalPacksBatches) {
  PackOptions small;
  small.shard_size_bytes = 8 << 10;  // several shards
  for (const char* split : {"train", "val"}) {
    pack_image_folder(*dir_ / "folder/" + split, *dir_ / "packed/" + split, small);
    pack_image_folder(std::string("s3://data/folder/") + split,
                      std::string("s3://data/packed/") + split, small);
  }
  // boto3 reads back the same bytes dtrain wrote locally.
  const json keys = moto_->peer("list", "data", {"packed/train/"});
  EXPECT_GT(keys.size(), 2u) << keys.dump();
  for (const auto& key : keys) {
    const std::string k = key;
    const json got = moto_->peer("get", "data", {k});
    const std::vector<uint8_t> mine =
        testing::read_bytes(*dir_ / "packed/train/" + k.substr(k.rfind('/') + 1));
    EXPECT_EQ(got["size"].get<size_t>(), mine.size()) << k;
  }
  expect_equal(batches("packed", "s3://data/packed"), batches("packed", *dir_ / "packed"));
}

// Note [Block order] and Note [Runs of neighbours]: with a shuffle block,
// each block of a shuffled pack's or a tar's neighbours is one ranged GET,
// and the batches are those of the same data on local disk.
TEST_F(S3Data, AShuffleBlockIsReadWithOneRangedGetAndGivesTheLocalBatches) {
  PackOptions shuffled;
  shuffled.shuffle = true;
  for (const char* split : {"train", "val"}) {
    pack_image_folder(*dir_ / "folder/" + split, *dir_ / "shuffled/" + split, shuffled);
  }
  upload(*moto_, "data", *dir_ / "shuffled", "shuffled");
  ASSERT_NO_FATAL_FAILURE(write_webdataset("wds-block"));
  upload(*moto_, "data", *dir_ / "wds-block", "wds-block");
  for (const auto& [dataset, dir] :
       {std::pair<std::string, std::string>{"packed", "shuffled"}, {"webdataset", "wds-block"}}) {
    SCOPED_TRACE(dataset);
    object_gets(dir);  // forget the uploads
    const auto one_by_one = batches(dataset, "s3://data/" + dir);
    const int gets_one_by_one = object_gets(dir);
    const auto blocks = batches(dataset, "s3://data/" + dir, {}, /*block=*/2);
    const int gets_blocks = object_gets(dir);
    expect_equal(blocks, batches(dataset, *dir_ / dir, {}, 2));
    ASSERT_EQ(blocks.size(), one_by_one.size());
    bool reordered = false;
    for (size_t i = 0; i < blocks.size(); ++i) reordered |= !at::equal(blocks[i], one_by_one[i]);
    EXPECT_TRUE(reordered) << "a block order is another order";
    // 18 training samples x 2 epochs; the test split and the opening reads
    // are the same in both.
    EXPECT_LE(gets_blocks, gets_one_by_one - 36 / 2 + 4)
        << gets_one_by_one << " GETs one by one, " << gets_blocks << " with blocks of 2";
  }
}

TEST_F(S3Data, WebDatasetShardsInS3GiveTheBatchesOfTheLocalShards) {
  ASSERT_NO_FATAL_FAILURE(write_webdataset("wds"));
  upload(*moto_, "data", *dir_ / "wds", "wds");
  for (const std::string& spec :
       {std::string("s3://data/wds"),
        std::string("s3://data/wds/train/shards-{000000..000004}.tar::s3://data/wds/"
                    "val/shards-{000000,000001}.tar")}) {
    SCOPED_TRACE(spec);
    expect_equal(batches("webdataset", spec), batches("webdataset", *dir_ / "wds"));
  }
}

// Note [Dataset fingerprints]: the listing's sizes equal the local files', so
// both agree; an object replaced by one of the same size shows in its ETag.
TEST_F(S3Data, AnS3FoldersFingerprintMatchesTheLocalCopyAndAReplacedObjectChangesIt) {
  upload(*moto_, "data", *dir_ / "folder", "fingerprint");
  auto fingerprint = [](const std::string& data_dir) {
    return open_dataset(DatasetOptions().set_name("imagefolder").set_data_dir(data_dir),
                        ProcessGroup())
        .train->fingerprint();
  };
  const DataFingerprint local = fingerprint(*dir_ / "folder");
  const DataFingerprint s3 = fingerprint("s3://data/fingerprint");
  EXPECT_EQ(s3.samples, 18);
  EXPECT_NE(s3.etags, 0u);
  EXPECT_TRUE(s3.matches(local)) << s3.str() << " vs " << local.str();

  const std::string file = *dir_ / "folder/train/bee/bee_0.jpg";
  ASSERT_TRUE(std::filesystem::exists(file));
  std::vector<uint8_t> bytes = testing::read_bytes(file);
  bytes[bytes.size() / 2] ^= 1;  // the same size
  moto_->peer("put", "data", {}, json{{"fingerprint/train/bee/bee_0.jpg", to_hex(bytes)}});
  const DataFingerprint replaced = fingerprint("s3://data/fingerprint");
  EXPECT_EQ(replaced.sizes, s3.sizes);
  EXPECT_EQ(describe_change(s3, replaced),
            "the same names and sizes, but ETags differ (objects replaced)");
  EXPECT_TRUE(replaced.matches(local)) << "local files have no ETags to compare";
}

TEST_F(S3Data, BadLocationsAreOneLineErrorsNamingTheCause) {
  auto error = [](const std::string& dataset, const std::string& dir) -> std::string {
    try {
      open_dataset(DatasetOptions().set_name(dataset).set_data_dir(dir), ProcessGroup());
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string no_bucket = error("imagefolder", "s3://");
  EXPECT_NE(no_bucket.find("s3://"), std::string::npos) << no_bucket;
  const std::string scheme = error("packed", "gs://bucket/x");
  EXPECT_NE(scheme.find("gs://"), std::string::npos) << scheme;
  const std::string empty = error("imagefolder", "s3://data/nothing-here");
  EXPECT_NE(empty.find("s3://data/nothing-here"), std::string::npos) << empty;
  const std::string bucket = error("imagefolder", "s3://no-such-bucket/x");
  EXPECT_NE(bucket.find("no-such-bucket"), std::string::npos) << bucket;
  for (const std::string& m : {no_bucket, scheme, empty, bucket}) {
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// Note [Shared listing]: two ranks opening an S3 ImageFolder with their
// group send the server the ListObjectsV2 requests of one rank opening it
// alone (the probes of DATA_DIR, train and val, and one listing of each
// split), not two ranks' worth, and each rank gets the batches and the
// fingerprint it gets opening alone.
TEST_F(S3Data, RanksOpeningAnS3FolderTogetherListItOnceAndGetWhatEachGetsAlone) {
  listings();
  open_dataset(group_options("imagefolder", "s3://data/folder"), ProcessGroup());
  const int one_rank = listings();
  EXPECT_GE(one_rank, 5) << "three probes and two listings";

  const std::vector<RankData> alone = open_on_two_ranks("imagefolder", "s3://data/folder", false);
  EXPECT_EQ(listings(), 2 * one_rank);
  const std::vector<RankData> together = open_on_two_ranks("imagefolder", "s3://data/folder", true);
  EXPECT_EQ(listings(), one_rank) << "rank 0 lists for both";
  expect_same_ranks(together, alone);
  EXPECT_EQ(together[0].fingerprint.str(), together[1].fingerprint.str());
}

// Rank 0 HEADs and indexes each WebDataset shard for both ranks (Note
// [WebDataset order]): one HEAD a shard, and the batches of opening alone.
TEST_F(S3Data, RanksOpeningS3WebDatasetShardsTogetherIndexEachShardOnce) {
  ASSERT_NO_FATAL_FAILURE(write_webdataset("swds"));
  upload(*moto_, "data", *dir_ / "swds", "swds");
  const int shards = static_cast<int>(moto_->peer("list", "data", {"swds/"}).size());
  ASSERT_GT(shards, 2);
  heads("swds/");
  const std::vector<RankData> alone = open_on_two_ranks("webdataset", "s3://data/swds", false);
  EXPECT_EQ(heads("swds/"), 2 * shards);
  const std::vector<RankData> together = open_on_two_ranks("webdataset", "s3://data/swds", true);
  EXPECT_EQ(heads("swds/"), shards) << "rank 0 HEADs each shard for both ranks";
  expect_same_ranks(together, alone);
}

// A listing that fails on rank 0 (no such bucket) is the same one-line
// error on both ranks, at once: rank 1 does not wait out the group's timeout.
TEST_F(S3Data, AListingErrorOnRank0IsTheSameOneLineErrorOnEveryRankWithoutWaiting) {
  std::vector<std::string> errors(2);
  const auto start = std::chrono::steady_clock::now();
  testing::run_ranks(
      2,
      [&](const ProcessGroup& pg) {
        errors[pg.rank()] = testing::error_of(
            [&] { open_dataset(group_options("imagefolder", "s3://no-such-bucket/x"), pg); });
      },
      std::chrono::seconds(60));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(errors[0], errors[1]);
  EXPECT_NE(errors[0].find("no-such-bucket"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("rank 0 of 2"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[0].find('\n'), std::string::npos) << errors[0];
}

// Note [Data cache]: the first run copies each object it reads, once, and
// a second run (both ranks, both epochs, both splits) reads every sample
// from the copies: the server answers no GetObject. The batches are the
// local copy's.
TEST_F(S3Data, ACachedImageFolderIsFetchedOnceAndASecondRunReadsNoObject) {
  TempDir cache;
  const DataCacheOptions c = DataCacheOptions().set_dir(cache / "c");
  const std::vector<at::Tensor> local = batches("imagefolder", *dir_ / "folder");
  object_gets("folder/");
  expect_equal(batches("imagefolder", "s3://data/folder", c), local);
  EXPECT_EQ(object_gets("folder/"), 18 + 6) << "each image once, over two epochs and two ranks";
  expect_equal(batches("imagefolder", "s3://data/folder", c), local);
  EXPECT_EQ(object_gets("folder/"), 0);
}

TEST_F(S3Data, CachedPackedAndWebDatasetShardsAreFetchedOnceAndASecondRunReadsNoObject) {
  PackOptions small;
  small.shard_size_bytes = 8 << 10;  // several shards
  for (const char* split : {"train", "val"}) {
    pack_image_folder(*dir_ / "folder/" + split, *dir_ / "cpacked/" + split, small);
  }
  ASSERT_NO_FATAL_FAILURE(write_webdataset("cwds"));
  upload(*moto_, "data", *dir_ / "cpacked", "cpacked");
  upload(*moto_, "data", *dir_ / "cwds", "cwds");
  for (const std::string dataset : {"packed", "webdataset"}) {
    SCOPED_TRACE(dataset);
    const std::string prefix = dataset == "packed" ? "cpacked" : "cwds";
    TempDir cache;
    const DataCacheOptions c = DataCacheOptions().set_dir(cache / "c");
    const std::vector<at::Tensor> local = batches(dataset, *dir_ / prefix);
    object_gets(prefix + "/");
    expect_equal(batches(dataset, "s3://data/" + prefix, c), local);
    EXPECT_GT(object_gets(prefix + "/"), 0);
    expect_equal(batches(dataset, "s3://data/" + prefix, c), local);
    EXPECT_EQ(object_gets(prefix + "/"), 0);
  }
}

// The copy is named by the listing's ETag: an object replaced in the bucket
// is fetched again (and only it), and the new bytes are what is trained on.
TEST_F(S3Data, AnObjectReplacedInTheBucketIsFetchedAgainNotServedFromTheCache) {
  upload(*moto_, "data", *dir_ / "folder", "creplaced");
  TempDir cache;
  const DataCacheOptions c = DataCacheOptions().set_dir(cache / "c");
  batches("imagefolder", "s3://data/creplaced", c);
  object_gets("creplaced/");

  TempDir changed;
  std::filesystem::copy(*dir_ / "folder", changed.path(), std::filesystem::copy_options::recursive);
  std::filesystem::copy_file(*dir_ / "folder/train/bee/bee_2.jpg", changed / "train/bee/bee_0.jpg",
                             std::filesystem::copy_options::overwrite_existing);
  moto_->peer("put", "data", {},
              json{{"creplaced/train/bee/bee_0.jpg",
                    to_hex(testing::read_bytes(changed / "train/bee/bee_0.jpg"))}});
  expect_equal(batches("imagefolder", "s3://data/creplaced", c),
               batches("imagefolder", changed.path()));
  EXPECT_EQ(object_gets("creplaced/"), 1) << "only the replaced object";
}

// The listing's ETag pinning holds through the cache: an object replaced
// between the listing and its first read is refused, not copied or mixed.
TEST_F(S3Data, AnObjectReplacedBeforeItsFirstReadFailsThroughTheCacheAsWithout) {
  moto_->peer("put", "data", {}, json{{"cpin/x.bin", to_hex(std::vector<uint8_t>(64, 1))}});
  TempDir cache;
  image::Storage storage(DataCacheOptions().set_dir(cache / "c"));
  const std::unique_ptr<image::ByteSource> object = storage.open("s3://data/cpin/x.bin");
  moto_->peer("put", "data", {}, json{{"cpin/x.bin", to_hex(std::vector<uint8_t>(64, 2))}});
  uint8_t byte = 0;
  std::string error = "no error";
  try {
    object->pread_exact(&byte, 1, 10);
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("cpin/x.bin"), std::string::npos) << error;
  EXPECT_NE(error.find("412"), std::string::npos) << error;
  storage.open("s3://data/cpin/x.bin")->pread_exact(&byte, 1, 10);
  EXPECT_EQ(byte, 2);
}

// A listing of many pages from bench/s3/listing_server.py, the generated
// endpoint of the 1.28-million-key benchmark (moto sorts its whole bucket for
// every page), at 2,400 training keys: three ListObjectsV2 pages of 1,000 and
// their continuation tokens, every key a sample with its class, and the
// first batch read through the loader's read-ahead.
TEST(S3GeneratedListing, AListingOfSeveralPagesOpensEveryKeyAndLoadsTheFirstBatch) {
  const std::string venv = testing::s3_test_venv();
  if (venv.empty()) GTEST_SKIP() << testing::kNoVenv;
  TempDir dir;
  const std::string port_file = dir / "port";
  testing::make_image_folder(dir / "img", {"a"}, 1);  // the bytes every key answers
  const std::string jpeg = std::filesystem::directory_iterator(dir / "img/a")->path().string();
  testing::ChildProcess server({venv + "/bin/python",
                                DTRAIN_SOURCE_DIR "/bench/s3/listing_server.py", "--port-file",
                                port_file, "--classes", "40", "--train-per-class", "60",
                                "--val-per-class", "2", "--jpeg", jpeg});
  int port = 0;
  for (int i = 0; i < 300 && port == 0; ++i) {
    std::ifstream in(port_file);
    if (!(in >> port)) {
      port = 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_GT(port, 0) << "listing_server.py did not start within 30 s";
  EndpointAs endpoint("http://127.0.0.1:" + std::to_string(port));
  for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}) ::setenv(v, "any", 0);
  ::setenv("AWS_REGION", "us-east-1", 0);
  ::setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  DatasetOptions o;
  o.name = "imagefolder";
  o.data_dir = "s3://data/imagenet";
  o.image_size = 16;
  o.train = LoaderOptions().set_batch_size(8).set_seed(1).set_threads(1);
  o.test = LoaderOptions::evaluation().set_batch_size(8);
  DatasetSplits s = open_dataset(o, ProcessGroup());
  EXPECT_EQ(s.num_classes, 40);
  EXPECT_EQ(s.train->batches_per_epoch(), 2400 / 8);
  EXPECT_EQ(s.test->batches_per_epoch(), 80 / 8);
  s.train->start_epoch(0);
  Batch b;
  ASSERT_TRUE(s.train->next(b));
  EXPECT_EQ(b.inputs.size(0), 8);
  EXPECT_TRUE(b.targets.ge(0).all().item<bool>() && b.targets.lt(40).all().item<bool>());
  // 2,400 keys in pages of 1,000: at least three train pages and the val listing.
  const std::string stats = testing::http_get(port, "/__stats");
  EXPECT_GE(nlohmann::json::parse(stats).value("list", 0), 4) << stats;
}

}  // namespace
}  // namespace dtrain
