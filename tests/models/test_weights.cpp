// Weight files: round trips, the forms Python writes, and the errors for files that do not
// fit or cannot be read.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "dtrain/checkpoint.h"
#include "dtrain/errors.h"
#include "dtrain/models.h"
#include "dtrain/weights.h"
#include "models/python_peer.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

class Weights : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dtrain-weights-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

ModelOptions cnn_options(int64_t classes = 10) {
  ModelOptions o;  // bench/peer/cnn.py's Net: 1x28x28
  o.num_classes = classes;
  return o;
}

TEST_F(Weights, SavedWeightsLoadBackIntoAFreshModelInStateDictOrder) {
  ModelOptions o;
  o.in_channels = 3;
  o.image_size = 32;
  torch::manual_seed(0);
  auto a = make_model("resnet18", o);
  save_weights(*a, path("w.pt"));
  torch::manual_seed(1);
  auto b = make_model("resnet18", o);
  load_weights(*b, path("w.pt"));
  const NamedTensors sa = state_dict(*a), sb = state_dict(*b);
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_TRUE(at::equal(sa[i].second, sb[i].second)) << sa[i].first;
  }
  // PyTorch's order: a module's parameters, then its buffers, then its children.
  EXPECT_EQ(sa[0].first, "conv1.weight");
  EXPECT_EQ(sa[1].first, "bn1.weight");
  EXPECT_EQ(sa[3].first, "bn1.running_mean");
  EXPECT_EQ(sa[5].first, "bn1.num_batches_tracked");
  EXPECT_EQ(sa[6].first, "layer1.0.conv1.weight");
  EXPECT_FALSE(fs::exists(path("w.pt.tmp")));
}

TEST_F(Weights, MismatchingWeightsNameTheFirstKeyWithBothShapes) {
  save_weights(*make_model("cnn", cnn_options(10)), path("w.pt"));
  auto other = make_model("cnn", cnn_options(5));
  const at::Tensor before = other->named_parameters()["conv1.weight"].clone();
  const std::string err = testing::error_of([&] { load_weights(*other, path("w.pt")); });
  EXPECT_NE(err.find(path("w.pt") + ": the weights do not fit the model: 'fc2.weight' is "
                                    "[10, 128] in the file but [5, 128] in the model"),
            std::string::npos)
      << err;
  EXPECT_THROW(load_weights(*other, path("w.pt")), InvalidArgument);
  EXPECT_TRUE(at::equal(before, other->named_parameters()["conv1.weight"]));  // unchanged
}

TEST_F(Weights, MissingAndUnexpectedKeysAreNamed) {
  auto model = make_model("cnn", cnn_options());
  NamedTensors state = state_dict(*model);
  state.erase(state.begin());  // conv1.weight
  state.emplace_back("fc3.weight", at::zeros({1}));
  const std::string why = state_mismatch(*model, state, "the file");
  EXPECT_EQ(why,
            "the model has 'conv1.weight' but the file does not; the file has 'fc3.weight' which "
            "the model does not");
}

TEST_F(Weights, MissingOrCorruptFilesAreOneLineErrorsNamingThePath) {
  auto model = make_model("cnn", cnn_options());
  std::string err = testing::error_of([&] { load_weights(*model, path("none.pt")); });
  EXPECT_EQ(err.rfind(path("none.pt") + ": cannot open the weights file", 0), 0u) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  EXPECT_THROW(load_weights(*model, path("none.pt")), DataError);

  std::ofstream(path("junk.pt")) << "this is not a weights file";
  err = testing::error_of([&] { load_weights(*model, path("junk.pt")); });
  EXPECT_EQ(err.rfind(path("junk.pt") + ": not a file written by torch.save", 0), 0u) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;

  save_weights(*model, path("cut.pt"));
  fs::resize_file(path("cut.pt"), fs::file_size(path("cut.pt")) / 2);
  err = testing::error_of([&] { load_weights(*model, path("cut.pt")); });
  EXPECT_EQ(err.rfind(path("cut.pt") + ": ", 0), 0u) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  EXPECT_THROW(load_weights(*model, path("cut.pt")), DataError);
}

// Python writes the same weights in the forms users have; the readable ones load and give
// Python's logits, the others are refused with the form and the one-line fix.
TEST_F(Weights, PythonSavedFormsLoadOrNameTheFix) {
  if (!testing::python_has_torchvision()) GTEST_SKIP() << testing::reference_python_missing();
  testing::PythonPeer peer;
  ASSERT_EQ(peer.ask("forms " + dir_.string()), "ok");
  const at::Tensor expected = torch::pickle_load([&] {
                                std::ifstream in(path("logits.pt"), std::ios::binary);
                                return std::vector<char>((std::istreambuf_iterator<char>(in)), {});
                              }())
                                  .toGenericDict()
                                  .at("logits")
                                  .toTensor();
  const std::string fix = "torch.save(dict(model.state_dict()), PATH)";
  for (const char* form : {"plain.pt", "wrapped.pt", "ddp.pt", "ordered.pt"}) {
    auto model = make_model("cnn", cnn_options());
    try {
      load_weights(*model, path(form));
    } catch (const DataError& e) {
      // LibTorch 1.13 cannot build an OrderedDict; 2.x can.
      ASSERT_EQ(std::string(form), "ordered.pt") << e.what();
      EXPECT_EQ(std::string(e.what()),
                path(form) +
                    ": an OrderedDict (torch.save(model.state_dict(), PATH)), which "
                    "LibTorch 1.13 cannot read; re-save it in Python with " +
                    fix);
      continue;
    }
    torch::NoGradGuard no_grad;
    model->eval();
    EXPECT_TRUE(at::allclose(model->forward(at::ones({2, 1, 28, 28})), expected, 0, 1e-6)) << form;
  }
  auto model = make_model("cnn", cnn_options());
  std::string err = testing::error_of([&] { load_weights(*model, path("legacy.pt")); });
  EXPECT_NE(err.find("legacy (non-zip) format"), std::string::npos) << err;
  err = testing::error_of([&] { load_weights(*model, path("module.pt")); });
  EXPECT_NE(err.find("a pickled nn.Module (torch.save(model, PATH))"), std::string::npos) << err;
  EXPECT_NE(err.find(fix), std::string::npos) << err;
}

// A checkpoint's "model" entry is a state_dict torchvision loads with strict=True (BatchNorm
// buffers included), and load_weights reads the checkpoint itself.
TEST_F(Weights, CheckpointModelEntryLoadsIntoTorchvisionStrictly) {
  if (!testing::python_has_torchvision()) GTEST_SKIP() << testing::reference_python_missing();
  ModelOptions o;
  o.in_channels = 3;
  o.num_classes = 1000;
  o.image_size = 32;
  auto model = make_model("resnet18", o);
  Checkpoint c;
  c.model = model_state(*model);
  c.optimizer.groups.resize(1);  // one SGD group, no state yet
  c.optimizer.groups[0].size = static_cast<int64_t>(model->parameters().size());
  c.optimizer.state.resize(model->parameters().size());
  const std::string file = save_checkpoint(dir_.string(), c);
  testing::PythonPeer peer;
  EXPECT_EQ(peer.ask("checkpoint resnet18 " + file), "ok");
  auto again = make_model("resnet18", o);
  load_weights(*again, file);
  EXPECT_TRUE(
      at::equal(again->named_parameters()["fc.weight"], model->named_parameters()["fc.weight"]));
}

}  // namespace
}  // namespace dtrain
