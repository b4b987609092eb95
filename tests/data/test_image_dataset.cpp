// Image sources: ImageFolder, packed shards, STL-10, CIFAR-10, the registry.

#include <gtest/gtest.h>

#include <filesystem>

#include <ATen/ATen.h>

#include "data/image/io.h"
#include "data/registry.h"
#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"
#include "image_fixtures.h"

namespace dtrain {
namespace {

using testing::TempDir;
using testing::write_file;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ImageFolder, ClassesAreSortedAndFilesOrderedLikeTorchvision) {
  TempDir dir;
  testing::make_image_folder(dir.path(), {"zebra", "ant", "moth"}, 3);
  write_file(dir / "ant/notes.txt", {1, 2, 3});  // ignored
  write_file(dir / "ant/sub/b.JPEG", testing::encode_jpeg(testing::make_picture(8, 8, 1)));
  write_file(dir / "ant/a.jpeg", testing::encode_jpeg(testing::make_picture(8, 8, 2)));
  auto source = open_image_folder(dir.path());
  EXPECT_EQ(source->classes(), (std::vector<std::string>{"ant", "moth", "zebra"}));
  ASSERT_EQ(source->size(), 3 * 3 + 2);
  // os.walk order: files of ant/ sorted, then ant/sub/.
  EXPECT_EQ(source->name(0), dir / "ant/a.jpeg");
  EXPECT_EQ(source->name(1), dir / "ant/ant_0.jpg");
  EXPECT_EQ(source->name(4), dir / "ant/sub/b.JPEG");
  EXPECT_EQ(source->label(4), 0);
  EXPECT_EQ(source->label(5), 1);
  EXPECT_EQ(source->label(10), 2);
  SampleData data;
  source->read(5, data);
  EXPECT_TRUE(data.encoded);
  EXPECT_EQ(data.bytes, testing::read_bytes(source->name(5)));
}

TEST(ImageFolder, MissingEmptyOrImagelessFoldersNameThePath) {
  TempDir dir;
  EXPECT_NE(error_of([&] { open_image_folder(dir / "nope"); }).find(dir / "nope"),
            std::string::npos);
  EXPECT_NE(error_of([&] { open_image_folder(dir.path()); }).find("no class subdirectories"),
            std::string::npos);
  testing::make_image_folder(dir.path(), {"cat"}, 1);
  std::filesystem::create_directories(dir / "dog");
  write_file(dir / "dog/readme.txt", {1});
  const std::string message = error_of([&] { open_image_folder(dir.path()); });
  EXPECT_NE(message.find(dir / "dog"), std::string::npos) << message;
  EXPECT_NE(message.find("no images"), std::string::npos) << message;
}

TEST(ImageFolder, ValidationSplitUsesTheTrainingLabels) {
  TempDir dir;
  testing::make_image_folder(dir / "train", {"a", "b", "c"}, 1);
  testing::make_image_folder(dir / "val", {"c"}, 2);
  auto train = open_image_folder(dir / "train");
  auto val = open_image_folder(dir / "val", train->classes());
  EXPECT_EQ(val->label(0), 2);
  testing::make_image_folder(dir / "val", {"x"}, 1);
  EXPECT_NE(error_of([&] { open_image_folder(dir / "val", train->classes()); }).find("/val/x"),
            std::string::npos);
}

TEST(Packed, PackThenReadYieldsTheFolderSamplesAndLabels) {
  TempDir dir;
  testing::make_image_folder(dir / "folder", {"b", "a", "c"}, 4);
  PackOptions options;
  options.shard_size_bytes = 3000;  // several shards
  const PrepareStats stats = pack_image_folder(dir / "folder", dir / "packed", options);
  EXPECT_EQ(stats.images, 12);
  EXPECT_EQ(stats.classes, 3);
  EXPECT_TRUE(std::filesystem::exists(dir / "packed/shard-00002.bin"));
  auto folder = open_image_folder(dir / "folder");
  auto packed = open_packed(dir / "packed");
  ASSERT_EQ(packed->size(), folder->size());
  EXPECT_EQ(packed->classes(), folder->classes());
  SampleData a, b;
  for (int64_t i = 0; i < folder->size(); ++i) {
    folder->read(i, a);
    packed->read(i, b);
    EXPECT_EQ(a.bytes, b.bytes) << i;
    EXPECT_EQ(folder->label(i), packed->label(i));
  }
  EXPECT_NE(packed->name(0).find("a/a_0.jpg"), std::string::npos) << packed->name(0);
}

// Note [Block order]: a shuffled pack holds the folder's samples in
// seeded_permutation's order, so that neighbours are not one class.
TEST(Packed, APackWrittenShuffledHoldsTheFolderSamplesInTheSeededOrder) {
  TempDir dir;
  testing::make_image_folder(dir / "folder", {"b", "a", "c"}, 4);
  PackOptions options;
  options.shard_size_bytes = 3000;
  options.shuffle = true;
  options.seed = 7;
  EXPECT_EQ(pack_image_folder(dir / "folder", dir / "packed", options).images, 12);
  auto folder = open_image_folder(dir / "folder");
  auto packed = open_packed(dir / "packed");
  ASSERT_EQ(packed->size(), 12);
  const std::vector<int64_t> order = seeded_permutation(12, 7, 0);
  SampleData a, b;
  for (int64_t i = 0; i < 12; ++i) {
    folder->read(order[i], a);
    packed->read(i, b);
    EXPECT_EQ(a.bytes, b.bytes) << i;
    EXPECT_EQ(folder->label(order[i]), packed->label(i)) << i;
  }
  EXPECT_NE(order, seeded_permutation(12, 8, 0));
  // Neighbours of one shard come as one run; a run never crosses a shard.
  std::vector<SampleData> run(4);
  for (int64_t i = 0; i < 12; i += packed->run_length(i, 4)) {
    const int64_t n = packed->run_length(i, 4);
    ASSERT_GE(n, 1);
    packed->read_run(i, n, run.data());
    for (int64_t k = 0; k < n; ++k) {
      packed->read(i + k, b);
      EXPECT_EQ(run[k].bytes, b.bytes) << i + k;
      EXPECT_EQ(packed->name(i + k).substr(0, packed->name(i + k).find('@')),
                packed->name(i).substr(0, packed->name(i).find('@')))
          << "one shard";
    }
  }
}

// ByteSource::pread_spans (a run of a shard's neighbours read straight into
// each sample's buffer): File's preadv and the default's one buffer and
// copies place the same bytes, drop the gaps, and name a short file.
class OnlyPread : public image::ByteSource {  // the default pread_spans
 public:
  explicit OnlyPread(const image::File& f) : f_(f) {}
  int64_t size() const override { return f_.size(); }
  void pread_exact(void* dst, size_t length, int64_t offset) const override {
    f_.pread_exact(dst, length, offset);
  }
  const std::string& path() const override { return f_.path(); }

 private:
  const image::File& f_;
};

TEST(ReadSpans, EachSpanGetsItsBytesTheGapsAreDroppedAndAShortFileIsNamed) {
  TempDir dir;
  std::string bytes;
  for (int i = 0; i < 5000; ++i) bytes += static_cast<char>(i * 7 % 251);
  write_file(dir / "shard.bin", std::vector<uint8_t>(bytes.begin(), bytes.end()));
  const image::File file = image::File::open_read(dir / "shard.bin");
  const OnlyPread plain(file);
  for (const image::ByteSource* source : {static_cast<const image::ByteSource*>(&file),
                                          static_cast<const image::ByteSource*>(&plain)}) {
    std::string a(1000, 'x'), b(10, 'x'), c(2000, 'x');
    // a, a 500-byte gap, b, an empty span, c: bytes 100..3610.
    source->pread_spans({{a.data(), a.size()},
                         {nullptr, 500},
                         {b.data(), b.size()},
                         {nullptr, 0},
                         {c.data(), c.size()}},
                        100);
    EXPECT_EQ(a, bytes.substr(100, 1000));
    EXPECT_EQ(b, bytes.substr(1600, 10));
    EXPECT_EQ(c, bytes.substr(1610, 2000));
    std::string past(1000, 'x');
    const std::string e = error_of([&] {
      source->pread_spans({{past.data(), past.size()}}, 4500);
    });
    EXPECT_NE(e.find("shard.bin' ends early: 500 bytes missing at offset 5000"), std::string::npos)
        << e;
  }
}

TEST(Registry, ImagefolderAndPackedDatasetsYieldTheSameBatchesAtTheRequestedSize) {
  TempDir dir;
  testing::make_image_folder(dir / "folder/train", {"b", "a"}, 3);
  testing::make_image_folder(dir / "folder/val", {"a", "b"}, 1);
  pack_image_folder(dir / "folder/train", dir / "packed/train");
  pack_image_folder(dir / "folder/val", dir / "packed/val");
  auto open = [&](const std::string& name, const std::filesystem::path& data_dir) {
    DatasetOptions o;
    o.name = name;
    o.data_dir = data_dir.string();
    o.image_size = 32;
    o.train.batch_size = 4;
    o.test.batch_size = 4;
    o.test.shuffle = false;
    o.test.pad = false;
    return open_dataset(o, ProcessGroup());
  };
  DatasetSplits folder = open("imagefolder", dir / "folder");
  DatasetSplits packed = open("packed", dir / "packed");
  EXPECT_EQ(folder.num_classes, 2);
  EXPECT_EQ(folder.sample_shape, (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(packed.sample_shape, folder.sample_shape);
  for (auto split : {&DatasetSplits::train, &DatasetSplits::test}) {
    Batch a, b;
    ASSERT_TRUE((folder.*split)->next(a));
    ASSERT_TRUE((packed.*split)->next(b));
    EXPECT_EQ(a.inputs.sizes(), b.inputs.sizes());
    EXPECT_TRUE(a.inputs.equal(b.inputs));
    EXPECT_TRUE(a.targets.equal(b.targets));
  }
}

TEST(Registry, Uint8InputsNormaliseWhereverTheyAreToTheFloatInputsOfBothSplits) {
  TempDir dir;
  testing::make_image_folder(dir / "train", {"b", "a"}, 3);
  testing::make_image_folder(dir / "val", {"a", "b"}, 2);
  auto open = [&](bool uint8_inputs) {
    DatasetOptions o;
    o.name = "imagefolder";
    o.data_dir = dir.path();
    o.image_size = 24;
    o.train.batch_size = 3;
    o.test.batch_size = 3;
    o.test.shuffle = false;
    o.test.pad = false;
    o.uint8_inputs = uint8_inputs;
    return open_dataset(o, ProcessGroup());
  };
  DatasetSplits floats = open(false);
  DatasetSplits bytes = open(true);
  EXPECT_FALSE(floats.normalize);
  ASSERT_TRUE(bytes.normalize);
  for (auto split : {&DatasetSplits::train, &DatasetSplits::test}) {
    Batch f, u;
    ASSERT_TRUE((floats.*split)->next(f));
    ASSERT_TRUE((bytes.*split)->next(u));
    EXPECT_EQ(u.inputs.scalar_type(), at::kByte);
    EXPECT_TRUE(u.targets.equal(f.targets));
    EXPECT_TRUE(at::allclose(bytes.normalize(u.inputs), f.inputs, 1e-5, 1e-5));
  }
}

TEST(Packed, TruncatedIndexOrShardIsADataErrorNamingIt) {
  TempDir dir;
  testing::make_image_folder(dir / "folder", {"a"}, 3);
  pack_image_folder(dir / "folder", dir / "packed");
  auto index = testing::read_bytes(dir / "packed/index.bin");
  index.resize(index.size() - 12);
  write_file(dir / "packed/index.bin", index);
  EXPECT_NE(error_of([&] { open_packed(dir / "packed"); }).find("index.bin"), std::string::npos);
  pack_image_folder(dir / "folder", dir / "packed");
  std::filesystem::resize_file(dir / "packed/shard-00000.bin", 10);
  EXPECT_NE(error_of([&] { open_packed(dir / "packed"); }).find("outside its shard"),
            std::string::npos);
  EXPECT_NE(error_of([&] { open_packed(dir / "missing"); }).find("dtrain data pack"),
            std::string::npos);
}

TEST(BinarySets, Stl10IsReadColumnMajorWithLabelsFromOne) {
  TempDir dir;
  std::vector<uint8_t> x(2 * 3 * 96 * 96), y{3, 10};
  // Image 1, channel 2, row 5, column 7 (stored at column * 96 + row).
  x[3 * 96 * 96 + 2 * 96 * 96 + 7 * 96 + 5] = 200;
  write_file(dir / "stl10_binary/train_X.bin", x);
  write_file(dir / "stl10_binary/train_y.bin", y);
  auto source = open_stl10(dir.path(), true);
  ASSERT_EQ(source->size(), 2);
  EXPECT_EQ(source->label(0), 2);
  EXPECT_EQ(source->label(1), 9);
  SampleData data;
  source->read(1, data);
  ASSERT_FALSE(data.encoded);
  EXPECT_EQ(data.image.width, 96);
  EXPECT_EQ(data.image.pixels[(5 * 96 + 7) * 3 + 2], 200);
  y.push_back(1);
  write_file(dir / "stl10_binary/train_y.bin", y);
  EXPECT_NE(error_of([&] { open_stl10(dir.path(), true); }).find("do not match"),
            std::string::npos);
}

TEST(BinarySets, Cifar10RecordsAreALabelThenRowMajorPlanes) {
  TempDir dir;
  std::vector<uint8_t> batch(2 * 3073);
  batch[0] = 4;
  batch[3073] = 7;
  batch[3073 + 1 + 1024 + 3 * 32 + 9] = 99;  // image 1, green, row 3, column 9
  write_file(dir / "test_batch.bin", batch);
  auto source = open_cifar10(dir.path(), false);
  ASSERT_EQ(source->size(), 2);
  EXPECT_EQ(source->label(0), 4);
  EXPECT_EQ(source->label(1), 7);
  SampleData data;
  source->read(1, data);
  EXPECT_EQ(data.image.pixels[(3 * 32 + 9) * 3 + 1], 99);
  batch.push_back(0);
  write_file(dir / "test_batch.bin", batch);
  EXPECT_NE(error_of([&] { open_cifar10(dir.path(), false); }).find("test_batch.bin"),
            std::string::npos);
  EXPECT_NE(error_of([&] { open_cifar10(dir / "none", true); }).find("DatasetOptions::data_dir"),
            std::string::npos);
}

DatasetSplits open_by_name(const std::string& name, const std::string& data_dir) {
  DatasetOptions o;
  o.name = name;
  o.data_dir = data_dir;
  o.train.batch_size = o.test.batch_size = 4;
  o.train.set_rank(0).set_world_size(1);  // the registry's entries take explicit shares
  o.test.set_rank(0).set_world_size(1);
  for (const auto& e : data::image_dataset_entries()) {
    if (name == e.name) return e.open(o, /*group=*/nullptr);
  }
  throw std::runtime_error("no entry " + name);
}

TEST(ImageRegistry, FolderAndPackedDatasetsOpenWithTrainingClassCount) {
  TempDir dir;
  testing::make_image_folder(dir / "folder/train", {"a", "b", "c"}, 2);
  testing::make_image_folder(dir / "folder/val", {"a", "c"}, 1);
  pack_image_folder(dir / "folder/train", dir / "packed/train");
  pack_image_folder(dir / "folder/val", dir / "packed/val");
  for (const auto& [name, root] :
       {std::pair{"imagefolder", dir / "folder"}, std::pair{"packed", dir / "packed"}}) {
    DatasetSplits s = open_by_name(name, root);
    EXPECT_EQ(s.num_classes, 3);
    EXPECT_EQ(s.sample_shape, (std::vector<int64_t>{3, 224, 224}));
    EXPECT_EQ(s.train->samples_per_epoch(), 6);
    s.test->start_epoch(0);
    Batch b;
    ASSERT_TRUE(s.test->next(b));
    EXPECT_EQ(b.inputs.sizes().vec(), (std::vector<int64_t>{2, 3, 224, 224}));
    EXPECT_EQ(b.targets[1].item<int64_t>(), 2);
  }
  EXPECT_NE(error_of([&] { open_by_name("imagefolder", dir / "folder/train"); }).find("train"),
            std::string::npos);
}

TEST(ImageRegistry, SyntheticDataParsesItsShapeSpec) {
  DatasetSplits s = open_by_name("synthetic", "3x16x16:5:10");
  EXPECT_EQ(s.num_classes, 5);
  EXPECT_EQ(s.train->batches_per_epoch(), 3);
  Batch a, b;
  s.train->start_epoch(0);
  ASSERT_TRUE(s.train->next(a));
  ASSERT_TRUE(s.train->next(b));
  EXPECT_EQ(a.inputs.sizes().vec(), (std::vector<int64_t>{4, 3, 16, 16}));
  EXPECT_TRUE(a.inputs.is_same(b.inputs));  // generated once
  EXPECT_THROW(open_by_name("synthetic", "3x16"), InvalidArgument);
}

}  // namespace
}  // namespace dtrain
