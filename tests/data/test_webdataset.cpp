// WebDataset tar shards (open_webdataset, --dataset webdataset) against
// shards written by Python's tarfile as the webdataset library writes them,
// and against the ImageFolder reader over the same images.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <ATen/ATen.h>

#include "data/image/io.h"
#include "data/image/webdataset.h"
#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"
#include "image_fixtures.h"
#include "support/peer_torch.h"
#include "support/shell.h"

namespace dtrain {
namespace {

using testing::TempDir;

constexpr const char* kScript = DTRAIN_SOURCE_DIR "/tests/data/scripts/make_webdataset.py";

struct Reference {
  std::string shard, key;
  int64_t label = 0;
};

std::string cat_args(const std::string& python, const std::string& folder, const std::string& out,
                     const std::string& extra) {
  return "timeout -k 5 120 " + python + " " + kScript + " " + folder + " " + out + " 5 " + extra +
         " 2>&1";
}

// Runs make_webdataset.py with `python`; its lines are the reference order.
std::vector<Reference> make_shards(const std::string& python, const std::string& folder,
                                   const std::string& out, const std::string& extra = "") {
  const testing::ShellRun run = testing::run_shell(cat_args(python, folder, out, extra));
  EXPECT_EQ(run.code, 0) << run.output;
  std::vector<Reference> refs;
  std::istringstream lines(run.output);
  for (Reference r; lines >> r.shard >> r.key >> r.label;) refs.push_back(r);
  return refs;
}

std::vector<at::Tensor> epoch(ImageLoader& loader, int64_t e) {
  std::vector<at::Tensor> out;
  loader.set_epoch(e);
  for (Batch& b : loader) {
    out.push_back(b.inputs.clone());
    out.push_back(b.targets.clone());
  }
  return out;
}

void expect_same_batches(std::shared_ptr<const ImageSource> a,
                         std::shared_ptr<const ImageSource> b) {
  LoaderOptions o = LoaderOptions().set_batch_size(4).set_seed(7).set_rank(0).set_world_size(1);
  ImageLoader la(a, o, TransformOptions::imagenet_train(32), {});
  ImageLoader lb(b, o, TransformOptions::imagenet_train(32), {});
  for (int64_t e : {0, 1}) {
    const auto x = epoch(la, e), y = epoch(lb, e);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(at::equal(x[i], y[i])) << "tensor " << i;
  }
}

TEST(WebDataset, ShardsWrittenByPythonsTarfileHoldTheSameSamplesAndLabelsAsTheFolder) {
  TempDir dir;
  const auto files = testing::make_image_folder(dir / "folder", {"ant", "bee", "cat"}, 4);
  const std::vector<Reference> refs =
      make_shards("/usr/bin/python3", dir / "folder", dir / "shards");
  ASSERT_EQ(refs.size(), files.size());
  auto source = open_webdataset(expand_braces(dir / "shards/shards-{000000..000002}.tar"));
  ASSERT_EQ(source->size(), static_cast<int64_t>(refs.size()));
  EXPECT_EQ(source->classes(), (std::vector<std::string>{"0", "1", "2"}));
  SampleData data;
  for (int64_t i = 0; i < source->size(); ++i) {
    EXPECT_EQ(source->label(i), refs[i].label) << i;
    EXPECT_NE(source->name(i).find(refs[i].shard), std::string::npos) << source->name(i);
    EXPECT_NE(source->name(i).find("(" + refs[i].key + ")"), std::string::npos) << source->name(i);
    source->read(i, data);
    EXPECT_EQ(data.bytes, testing::read_bytes(files[i])) << refs[i].key;
  }
  // Decoded and augmented, sample by sample and batch by batch, as the folder.
  expect_same_batches(source, open_image_folder(dir / "folder"));
}

TEST(WebDataset, ADatasetMadeWithPilTrainsAsTheSameImageFolderThroughTheRegistry) {
  const std::string python = testing::python_torch_2x();  // the peer venv has PIL
  if (python.empty() || testing::run_shell(python + " -c 'import PIL' >/dev/null 2>&1").code != 0) {
    GTEST_SKIP() << "no python with PIL: " << testing::kNoPeer2x;
  }
  TempDir dir;
  const auto train = make_shards(python, dir / "data/train", dir / "wds/train", "--pil 3 4");
  const auto val = make_shards(python, dir / "data/val", dir / "wds/val", "--pil 3 2");
  ASSERT_EQ(train.size(), 12u);
  ASSERT_EQ(val.size(), 6u);
  for (const std::string& spec : {dir / "wds", dir / "wds/train/shards-{000000..000002}.tar::" +
                                                   dir / "wds/val/shards-{000000,000001}.tar"}) {
    DatasetOptions o;
    o.name = "webdataset";
    o.data_dir = spec;
    o.image_size = 32;
    o.train = LoaderOptions().set_batch_size(5).set_seed(3);
    DatasetSplits w = open_dataset(o, ProcessGroup());
    o.name = "imagefolder";
    o.data_dir = dir / "data";
    DatasetSplits f = open_dataset(o, ProcessGroup());
    EXPECT_EQ(w.num_classes, 3);
    for (auto [a, b] : {std::pair{w.train.get(), f.train.get()}, {w.test.get(), f.test.get()}}) {
      a->set_epoch(1);
      b->set_epoch(1);
      Batch x, y;
      int64_t n = 0;
      while (a->next(x)) {
        ASSERT_TRUE(b->next(y));
        EXPECT_TRUE(at::equal(x.inputs, y.inputs)) << spec << " batch " << n;
        EXPECT_TRUE(at::equal(x.targets, y.targets)) << spec << " batch " << n;
        ++n;
      }
      EXPECT_FALSE(b->next(y));
      EXPECT_GT(n, 0);
    }
  }
}

std::string error_opening(const std::vector<std::string>& shards) {
  try {
    open_webdataset(shards);
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}

TEST(WebDataset, BadShardsAreOneLineErrorsNamingTheShardAndOffset) {
  TempDir dir;
  const std::vector<uint8_t> jpeg = testing::encode_jpeg(testing::make_picture(64, 64, 1));
  ASSERT_GT(jpeg.size(), 512u);
  const int64_t padded = (static_cast<int64_t>(jpeg.size()) + 511) / 512 * 512;
  auto tar = testing::make_tar({{"a.jpg", jpeg}, {"a.cls", {'1', '\n'}}, {"b.jpg", jpeg}});
  testing::write_file(dir / "nocls.tar", tar);
  EXPECT_EQ(error_opening({dir / "nocls.tar"}), "'" + dir / "nocls.tar" +
                                                    "': sample 'b' at offset " +
                                                    std::to_string(512 + padded + 1024) +
                                                    " has no label member (.cls); every WebDataset "
                                                    "sample needs both");
  tar = testing::make_tar({{"a.jpg", jpeg}, {"a.cls", {'x'}}});
  testing::write_file(dir / "label.tar", tar);
  EXPECT_NE(error_opening({dir / "label.tar"}).find("the .cls member of sample 'a' at offset"),
            std::string::npos);
  tar = testing::make_tar({{"a.jpg", jpeg}, {"a.cls", {'1'}}});
  std::vector<uint8_t> cut(tar.begin(), tar.begin() + 700);
  cut.resize(1024, 0);
  testing::write_file(dir / "cut.tar", cut);
  EXPECT_EQ(error_opening({dir / "cut.tar"}),
            "'" + dir / "cut.tar" + "': tar member at offset 0 needs " +
                std::to_string(jpeg.size()) + " bytes past the end of the archive (truncated?)");
  tar[512 + padded + 10] ^= 0x55;  // the second header's name
  testing::write_file(dir / "flip.tar", tar);
  const std::string flipped = error_opening({dir / "flip.tar"});
  EXPECT_NE(flipped.find("corrupt tar header at offset"), std::string::npos) << flipped;
  EXPECT_NE(error_opening({dir / "missing.tar"}).find("missing.tar"), std::string::npos);
  testing::write_file(dir / "empty.tar", std::vector<uint8_t>(1024, 0));
  EXPECT_NE(error_opening({dir / "empty.tar"}).find("no samples in 1 shard(s)"), std::string::npos);
  for (const std::string& m : {error_opening({dir / "nocls.tar"}), flipped}) {
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(ExpandBraces, ExpandsRangesAndListsAsBraceexpandDoes) {
  EXPECT_EQ(expand_braces("s-{000..002}.tar"),
            (std::vector<std::string>{"s-000.tar", "s-001.tar", "s-002.tar"}));
  EXPECT_EQ(expand_braces("{a,b}/{8..10}"),
            (std::vector<std::string>{"a/8", "a/9", "a/10", "b/8", "b/9", "b/10"}));
  EXPECT_EQ(expand_braces("plain.tar"), (std::vector<std::string>{"plain.tar"}));
  EXPECT_EQ(expand_braces("{0..1}").size(), 2u);
  for (const char* bad : {"s-{0..", "s-}", "s-{{0..1}}", "s-{5..1}", "s-{0..9999999}"}) {
    EXPECT_THROW(expand_braces(bad), InvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace dtrain
