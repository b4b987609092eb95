#include <gtest/gtest.h>
#include <zlib.h>

#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/errors.h"
#include "dtrain/idx.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

std::vector<uint8_t> idx_bytes(std::vector<uint32_t> dims, uint8_t fill = 7, uint8_t type = 8) {
  std::vector<uint8_t> b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(fill + i % 3));
  return b;
}

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dtrain_idx_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_raw(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  std::string write_gz(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::string p = (dir_ / name).string();
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return p;
  }
  fs::path dir_;
};

TEST_F(IdxFiles, RawAndGzipFilesReadToTheSameTensor) {
  auto bytes = idx_bytes({3, 2, 2});
  at::Tensor raw = read_idx(write_raw("a.idx", bytes));
  at::Tensor gz = read_idx(write_gz("a.idx.gz", bytes));
  EXPECT_EQ(raw.sizes(), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_TRUE(raw.equal(gz));
  EXPECT_EQ(raw[0][0][1].item<int>(), 8);
}

TEST_F(IdxFiles, TruncatedPayloadIsAnErrorNamingTheFileAndBothSizes) {
  auto bytes = idx_bytes({3, 2, 2});
  bytes.resize(bytes.size() - 5);
  std::string p = write_raw("short.idx", bytes);
  std::string e = error_of([&] { read_idx(p); });
  EXPECT_NE(e.find(p), std::string::npos) << e;
  EXPECT_NE(e.find("holds 7 bytes of data but its header announces 12"), std::string::npos) << e;
}

TEST_F(IdxFiles, TruncatedGzipStreamIsAnError) {
  std::string full = write_gz("full.gz", idx_bytes({100, 28, 28}));
  std::ifstream in(full, std::ios::binary);
  std::vector<char> gz((std::istreambuf_iterator<char>(in)), {});
  gz.resize(gz.size() / 2);
  std::string p = write_raw("cut.gz", std::vector<uint8_t>(gz.begin(), gz.end()));
  std::string e = error_of([&] { read_idx(p); });
  EXPECT_NE(e.find(p), std::string::npos) << e;
  EXPECT_TRUE(e.find("corrupt or truncated") != std::string::npos ||
              e.find("header announces") != std::string::npos)
      << e;
}

TEST_F(IdxFiles, WrongMagicAndElementTypeAreErrors) {
  auto bad_magic = idx_bytes({2});
  bad_magic[0] = 0x1f;
  bad_magic[1] = 0x00;
  EXPECT_NE(error_of([&] { read_idx(write_raw("m.idx", bad_magic)); }).find("bad magic number"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              read_idx(write_raw("t.idx", idx_bytes({2}, 0, 0x0D)));
            }).find("element type 0xd"),
            std::string::npos);
}

TEST_F(IdxFiles, MissingFileIsADataErrorNamingIt) {
  std::string p = (dir_ / "nope.idx").string();
  EXPECT_THROW(read_idx(p), DataError);
  EXPECT_NE(error_of([&] { read_idx(p); }).find(p), std::string::npos);
}

TEST_F(IdxFiles, ImageAndLabelCountsMustAgree) {
  write_gz("train-images-idx3-ubyte.gz", idx_bytes({4, 28, 28}));
  write_gz("train-labels-idx1-ubyte.gz", idx_bytes({3}, 1));
  std::string e = error_of([&] { load_idx_split(dir_.string(), true); });
  EXPECT_NE(e.find("holds 4 images but"), std::string::npos) << e;
  EXPECT_NE(e.find("holds 3 labels"), std::string::npos) << e;
}

TEST_F(IdxFiles, MissingDatasetDirectoryNamesThePathAndTheFix) {
  DatasetOptions o;
  o.name = "fashion-mnist";
  o.data_dir = (dir_ / "absent").string();
  std::string e = error_of([&] { open_dataset(o, ProcessGroup()); });
  EXPECT_NE(e.find(o.data_dir), std::string::npos) << e;
  EXPECT_NE(e.find("DatasetOptions::data_dir"), std::string::npos) << e;
}

TEST(Datasets, UnknownNameListsTheValidOnes) {
  DatasetOptions o;
  o.name = "imagenet22k";
  std::string e = error_of([&] { open_dataset(o, ProcessGroup()); });
  EXPECT_NE(e.find("unknown dataset 'imagenet22k'; valid datasets: fashion-mnist, mnist"),
            std::string::npos)
      << e;
}

TEST(Datasets, FashionMnistFromTheDebianPackageHasTheKnownShape) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  DatasetOptions o;
  o.train.batch_size = 100;
  o.test.batch_size = 1000;
  o.test.pad = false;
  o.test.shuffle = false;
  DatasetSplits s = open_dataset(o, ProcessGroup());
  EXPECT_EQ(s.num_classes, 10);
  EXPECT_EQ(s.sample_shape, (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(s.train->samples_per_epoch(), 60000);
  EXPECT_EQ(s.test->samples_per_epoch(), 10000);
  Batch b;
  ASSERT_TRUE(s.train->next(b));
  EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{100, 1, 28, 28}));
  EXPECT_EQ(b.targets.scalar_type(), at::kLong);
  // Normalised with the training set's statistics: mean about 0, std about 1.
  EXPECT_NEAR(b.inputs.mean().item<double>(), 0.0, 0.2);
  EXPECT_NEAR(b.inputs.std().item<double>(), 1.0, 0.2);
}

}  // namespace
}  // namespace dtrain
