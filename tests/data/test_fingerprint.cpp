// Dataset fingerprints (DataFingerprint in dtrain/data.h, Note [Dataset
// fingerprints]): the same data gives the same fingerprint wherever it lives;
// a file added, removed or rewritten changes it, and describe_change says how.

#include <gtest/gtest.h>

#include <filesystem>

#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/image.h"
#include "image_fixtures.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::write_file;

DataFingerprint of_dataset(const std::string& name, const std::string& data_dir) {
  DatasetOptions o;
  o.name = name;
  o.data_dir = data_dir;
  o.image_size = 16;
  o.train.batch_size = 2;
  return open_dataset(o, ProcessGroup()).train->fingerprint();
}

// An ImageFolder dataset (train and val) of 2 classes x 3 images.
void make_folder(const std::string& root) {
  testing::make_image_folder(root + "/train", {"a", "b"}, 3);
  testing::make_image_folder(root + "/val", {"a", "b"}, 1);
}

TEST(DataFingerprint, TheSameFolderAnywhereMatchesAndDescribesNoChange) {
  TempDir dir;
  make_folder(dir / "one");
  fs::copy(dir / "one", dir / "two", fs::copy_options::recursive);
  const DataFingerprint a = of_dataset("imagefolder", dir / "one");
  const DataFingerprint b = of_dataset("imagefolder", dir / "two");
  EXPECT_EQ(a.samples, 6);
  EXPECT_EQ(a.classes, 2);
  EXPECT_EQ(a.etags, 0u) << "local files have no ETags";
  EXPECT_TRUE(a.matches(b)) << a.str() << " vs " << b.str();
  EXPECT_EQ(describe_change(a, b), "");
  EXPECT_TRUE(a.matches(of_dataset("imagefolder", dir / "one"))) << "stable across opens";
}

TEST(DataFingerprint, AFileAddedRemovedOrResizedInAnImageFolderChangesIt) {
  TempDir dir;
  make_folder(dir.path());
  const DataFingerprint before = of_dataset("imagefolder", dir.path());
  const std::string extra = dir / "train/a/a_9.jpg";

  write_file(extra, testing::encode_jpeg(testing::make_picture(8, 8, 7)));
  const DataFingerprint added = of_dataset("imagefolder", dir.path());
  EXPECT_EQ(added.samples, 7);
  EXPECT_FALSE(before.matches(added));
  EXPECT_EQ(describe_change(before, added),
            "6 samples then, 7 now; the samples' names, labels or order differ (files or "
            "objects added, removed or renamed)");

  fs::remove(extra);
  EXPECT_TRUE(before.matches(of_dataset("imagefolder", dir.path())));
  const std::vector<uint8_t> kept = testing::read_bytes(dir / "train/b/b_1.png");
  fs::remove(dir / "train/b/b_1.png");
  EXPECT_FALSE(before.matches(of_dataset("imagefolder", dir.path())));
  write_file(dir / "train/b/b_1.png", kept);  // back as it was

  ASSERT_TRUE(before.matches(of_dataset("imagefolder", dir.path())));
  write_file(dir / "train/b/b_1.png", testing::encode_png(testing::make_picture(9, 8, 3)));
  const DataFingerprint resized = of_dataset("imagefolder", dir.path());
  EXPECT_EQ(resized.samples, 6);
  EXPECT_EQ(resized.names, before.names);
  EXPECT_EQ(describe_change(before, resized),
            "the same names, but sizes differ (files or objects rewritten)");
}

TEST(DataFingerprint, APackedDirectoryRepackedFromAChangedFolderDiffers) {
  TempDir dir;
  make_folder(dir / "folder");
  for (const char* split : {"train", "val"}) {
    pack_image_folder(dir / "folder/" + split, dir / "packed/" + split);
    pack_image_folder(dir / "folder/" + split, dir / "again/" + split);
  }
  const DataFingerprint packed = of_dataset("packed", dir / "packed");
  EXPECT_EQ(packed.samples, 6);
  EXPECT_TRUE(packed.matches(of_dataset("packed", dir / "again")));

  write_file(dir / "folder/train/a/a_0.jpg",
             testing::encode_jpeg(testing::make_picture(12, 8, 5)));  // resized
  fs::remove_all(dir / "again/train");
  pack_image_folder(dir / "folder/train", dir / "again/train");
  const DataFingerprint resized = of_dataset("packed", dir / "again");
  EXPECT_EQ(describe_change(packed, resized),
            "the same names, but sizes differ (files or objects rewritten)");

  write_file(dir / "folder/train/b/b_7.jpg", testing::encode_jpeg(testing::make_picture(8, 8, 6)));
  fs::remove_all(dir / "again/train");
  pack_image_folder(dir / "folder/train", dir / "again/train");
  const DataFingerprint added = of_dataset("packed", dir / "again");
  EXPECT_EQ(added.samples, 7);
  EXPECT_NE(describe_change(packed, added).find("6 samples then, 7 now"), std::string::npos);
}

TEST(DataFingerprint, WebDatasetShardsAndSyntheticSpecsHaveOne) {
  TempDir dir;
  const std::vector<uint8_t> jpeg = testing::encode_jpeg(testing::make_picture(8, 8, 1));
  fs::create_directories(dir / "train");
  fs::create_directories(dir / "val");
  write_file(dir / "train/s-0.tar", testing::make_tar({{"a.jpg", jpeg}, {"a.cls", {'1'}}}));
  write_file(dir / "val/s-0.tar", testing::make_tar({{"a.jpg", jpeg}, {"a.cls", {'0'}}}));
  const DataFingerprint one = of_dataset("webdataset", dir.path());
  EXPECT_EQ(one.samples, 1);
  write_file(dir / "train/s-1.tar", testing::make_tar({{"b.jpg", jpeg}, {"b.cls", {'0'}}}));
  EXPECT_EQ(of_dataset("webdataset", dir.path()).samples, 2);
  EXPECT_FALSE(one.matches(of_dataset("webdataset", dir.path())));

  const DataFingerprint s = of_dataset("synthetic", "3x8x8:10:100");
  EXPECT_EQ(s.samples, 100);
  EXPECT_EQ(s.classes, 10);
  EXPECT_TRUE(s.matches(of_dataset("synthetic", "3x8x8:10:100")));
  EXPECT_FALSE(s.matches(of_dataset("synthetic", "3x8x9:10:100")));
  // Only the count differs: nothing else is claimed.
  EXPECT_EQ(describe_change(s, of_dataset("synthetic", "3x8x8:10:80")), "100 samples then, 80 now");
}

TEST(DataFingerprint, ETagsAreComparedOnlyWhereBothSidesHaveThem) {
  DataFingerprint local;
  local.samples = 4;
  local.classes = 2;
  local.names = 1;
  local.sizes = 2;
  DataFingerprint s3 = local;
  s3.etags = 0x1234;
  EXPECT_TRUE(local.matches(s3));
  DataFingerprint replaced = s3;
  replaced.etags = 0x5678;
  EXPECT_FALSE(s3.matches(replaced));
  EXPECT_EQ(describe_change(s3, replaced),
            "the same names and sizes, but ETags differ (objects replaced)");
  EXPECT_EQ(s3.str(), "4 samples, 2 classes, names 00000001, sizes 00000002, etags 00001234");
  EXPECT_FALSE(DataFingerprint().known());
}

}  // namespace
}  // namespace dtrain
