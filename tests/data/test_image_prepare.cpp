// ImageNet preparation on a miniature fake layout.

#include <gtest/gtest.h>

#include <filesystem>

#include "dtrain/errors.h"
#include "dtrain/image.h"
#include "image_fixtures.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using Members = std::vector<std::pair<std::string, std::vector<uint8_t>>>;

std::vector<uint8_t> jpeg(uint32_t seed) {
  return testing::encode_jpeg(testing::make_picture(20, 16, seed));
}

TEST(PrepareImageNet, TrainArchiveOfPerClassTarsBecomesClassFolders) {
  TempDir dir;
  Members outer;
  for (const std::string wnid : {"n01440764", "n01443537"}) {
    Members inner;
    for (int i = 0; i < 3; ++i)
      inner.emplace_back(wnid + "_" + std::to_string(i) + ".JPEG", jpeg(i));
    outer.emplace_back(wnid + ".tar", testing::make_tar(inner));
  }
  testing::write_file(dir / "ILSVRC2012_img_train.tar", testing::make_tar(outer));
  const PrepareStats stats =
      prepare_imagenet_train(dir / "ILSVRC2012_img_train.tar", dir / "train");
  EXPECT_EQ(stats.classes, 2);
  EXPECT_EQ(stats.images, 6);
  EXPECT_EQ(testing::read_bytes(dir / "train/n01443537/n01443537_2.JPEG"), jpeg(2));
  auto source = open_image_folder(dir / "train");
  EXPECT_EQ(source->size(), 6);
  EXPECT_EQ(source->label(5), 1);
}

TEST(PrepareImageNet, TruncatedOrForeignArchivesAreDataErrors) {
  TempDir dir;
  auto tar = testing::make_tar({{"n01.tar", testing::make_tar({{"a.JPEG", jpeg(1)}})}});
  tar.resize(700);
  testing::write_file(dir / "cut.tar", tar);
  EXPECT_THROW(prepare_imagenet_train(dir / "cut.tar", dir / "out"), DataError);
  testing::write_file(dir / "foreign.tar", testing::make_tar({{"readme.txt", {1, 2}}}));
  try {
    prepare_imagenet_train(dir / "foreign.tar", dir / "out");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("readme.txt"), std::string::npos) << e.what();
  }
}

void make_val_images(const TempDir& dir, int n) {
  for (int i = 1; i <= n; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "val/ILSVRC2012_val_%08d.JPEG", i);
    testing::write_file(dir / name, jpeg(i));
  }
}

TEST(PrepareImageNet, ValidationImagesMoveIntoClassFoldersFromTheLocCsv) {
  TempDir dir;
  make_val_images(dir, 3);
  const std::string csv =
      "ImageId,PredictionString\n"
      "ILSVRC2012_val_00000002,n02 1 2 3 4 n02 5 6 7 8\n"
      "ILSVRC2012_val_00000001,n01 1 2 3 4\r\n"
      "ILSVRC2012_val_00000003,n02 9 9 9 9\n";
  testing::write_file(dir / "LOC_val_solution.csv", std::vector<uint8_t>(csv.begin(), csv.end()));
  const PrepareStats stats =
      prepare_imagenet_val(dir / "val", dir / "LOC_val_solution.csv", dir / "out");
  EXPECT_EQ(stats.images, 3);
  EXPECT_EQ(stats.classes, 2);
  EXPECT_TRUE(fs::exists(dir / "out/n01/ILSVRC2012_val_00000001.JPEG"));
  EXPECT_TRUE(fs::exists(dir / "out/n02/ILSVRC2012_val_00000003.JPEG"));
  EXPECT_FALSE(fs::exists(dir / "val/ILSVRC2012_val_00000002.JPEG"));  // moved
  // A second run (e.g. after an interruption) finds the work done.
  EXPECT_EQ(prepare_imagenet_val(dir / "val", dir / "LOC_val_solution.csv", dir / "out").images, 0);
}

TEST(PrepareImageNet, ValidationImagesMoveFromTheDevkitGroundTruthAndSynsets) {
  TempDir dir;
  make_val_images(dir, 3);
  const std::string truth = "2\n1\n2\n", synsets = "n09 kit fox\nn07 tench, Tinca tinca\n";
  testing::write_file(dir / "gt.txt", std::vector<uint8_t>(truth.begin(), truth.end()));
  testing::write_file(dir / "synsets.txt", std::vector<uint8_t>(synsets.begin(), synsets.end()));
  EXPECT_THROW(prepare_imagenet_val(dir / "val", dir / "gt.txt", dir / "out"), InvalidArgument);
  const PrepareStats stats =
      prepare_imagenet_val(dir / "val", dir / "gt.txt", dir / "out", dir / "synsets.txt");
  EXPECT_EQ(stats.images, 3);
  EXPECT_TRUE(fs::exists(dir / "out/n07/ILSVRC2012_val_00000001.JPEG"));
  EXPECT_TRUE(fs::exists(dir / "out/n09/ILSVRC2012_val_00000002.JPEG"));
  EXPECT_TRUE(fs::exists(dir / "out/n07/ILSVRC2012_val_00000003.JPEG"));
}

TEST(PrepareImageNet, AGroundTruthIdOutsideTheSynsetListNamesTheLine) {
  TempDir dir;
  make_val_images(dir, 1);
  const std::string truth = "5\n", synsets = "n01\n";
  testing::write_file(dir / "gt.txt", std::vector<uint8_t>(truth.begin(), truth.end()));
  testing::write_file(dir / "s.txt", std::vector<uint8_t>(synsets.begin(), synsets.end()));
  try {
    prepare_imagenet_val(dir / "val", dir / "gt.txt", dir / "out", dir / "s.txt");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain
