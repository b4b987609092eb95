// Checkpoint "directories" in object storage (--checkpoint-dir
// s3://bucket/prefix): one object per checkpoint, never replaced, the newest
// that decodes found on resume, pruning by step; against moto's S3 with
// boto3 and Python's torch.load as the other side. Needs the venv of
// scripts/s3-test-env.sh (skips without it) and /usr/bin/python3 with torch
// for the torch.load check.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "dtrain/checkpoint.h"
#include "dtrain/errors.h"
#include "dtrain/object_store.h"
#include "objstore/peer.h"

namespace dtrain {
namespace {

using nlohmann::json;

Checkpoint sample(int64_t step) {
  torch::nn::Linear model(torch::nn::LinearOptions(4, 3));
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Checkpoint c;
  c.model = model_state(*model);
  c.optimizer = optimizer_state(sgd);
  c.epoch = 1;
  c.step = step;
  c.world_size = 2;
  c.batch_size = 8;
  return c;
}

class S3Checkpoints : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string venv = testing::s3_test_venv();
    if (venv.empty()) return;
    moto_ = std::make_unique<testing::MotoServer>(venv);
    if (!moto_->failure.empty()) return;
    // save_checkpoint reads the environment as the AWS SDKs do.
    setenv("AWS_ACCESS_KEY_ID", moto_->key.c_str(), 1);
    setenv("AWS_SECRET_ACCESS_KEY", moto_->secret.c_str(), 1);
    setenv("AWS_ENDPOINT_URL_S3", moto_->endpoint.c_str(), 1);
    setenv("AWS_REGION", "us-east-1", 1);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    moto_->peer("put", "ckpt", {}, json::object());
  }
  static void TearDownTestSuite() { moto_.reset(); }
  void SetUp() override {
    if (!moto_) GTEST_SKIP() << testing::kNoVenv;
    ASSERT_TRUE(moto_->failure.empty()) << moto_->failure;
  }
  static inline std::unique_ptr<testing::MotoServer> moto_;
};

TEST_F(S3Checkpoints, SavesKeepTheNewestAndResumeLoadsTheNewestWhatTorchLoadAlsoOpens) {
  for (int64_t step : {10, 20, 30, 40}) save_checkpoint("s3://ckpt/run-a", sample(step), 2);
  EXPECT_EQ(list_checkpoints("s3://ckpt/run-a/"),
            (std::vector<std::string>{"s3://ckpt/run-a/checkpoint-00000040.pt",
                                      "s3://ckpt/run-a/checkpoint-00000030.pt"}));
  std::vector<std::string> skipped;
  auto found = load_latest_checkpoint("s3://ckpt/run-a", &skipped);
  ASSERT_TRUE(found) << ::testing::PrintToString(skipped);
  EXPECT_TRUE(skipped.empty());
  EXPECT_EQ(found->path, "s3://ckpt/run-a/checkpoint-00000040.pt");
  EXPECT_EQ(found->checkpoint.step, 40);
  EXPECT_EQ(found->checkpoint.world_size, 2);
  EXPECT_EQ(verify_checkpoint_file(found->path), "");
  EXPECT_NE(verify_checkpoint_file("s3://ckpt/run-a/checkpoint-00000010.pt").find("HTTP 404"),
            std::string::npos)
      << "pruned";

  // The object boto3 reads is what torch.load opens.
  char tmpl[] = "/tmp/dtrain-s3-ckpt-XXXXXX";
  const int fd = mkstemp(tmpl);
  close(fd);
  moto_->peer("download", "ckpt", {"run-a/checkpoint-00000040.pt", tmpl});
  testing::ShellRun torch_load = testing::run_shell(
      "timeout 120 /usr/bin/python3 -c \"import torch; d = torch.load('" + std::string(tmpl) +
      "'); print(d['format'], d['step'], sorted(d['model']))\" 2>&1");
  unlink(tmpl);
  if (torch_load.output.find("No module named 'torch'") == std::string::npos) {
    EXPECT_EQ(torch_load.code, 0) << torch_load.output;
    EXPECT_NE(torch_load.output.find("dtrain-checkpoint-1 40 ['bias', 'weight']"),
              std::string::npos)
        << torch_load.output;
  }
}

TEST_F(S3Checkpoints, ANewerObjectThatIsNotACheckpointIsSkippedByName) {
  save_checkpoint("s3://ckpt/run-b", sample(5));
  moto_->peer("put", "ckpt", {}, json{{"run-b/checkpoint-00000009.pt", "6e6f7420612063686b7074"}});
  std::vector<std::string> skipped;
  auto found = load_latest_checkpoint("s3://ckpt/run-b", &skipped);
  ASSERT_TRUE(found) << ::testing::PrintToString(skipped);
  EXPECT_EQ(found->checkpoint.step, 5);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].rfind("s3://ckpt/run-b/checkpoint-00000009.pt: ", 0), 0u) << skipped[0];
}

TEST_F(S3Checkpoints, AnObjectAlreadyAtTheKeyIsNeverReplaced) {
  moto_->peer("put", "ckpt", {}, json{{"run-c/checkpoint-00000007.pt", "6f74686572"}});
  try {
    save_checkpoint("s3://ckpt/run-c", sample(7));
    FAIL() << "the save replaced an object";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "checkpoint: s3://ckpt/run-c/checkpoint-00000007.pt already exists and is never "
              "replaced (If-None-Match); fix: remove it (aws s3 rm "
              "s3://ckpt/run-c/checkpoint-00000007.pt) or use another checkpoint directory");
  }
  EXPECT_EQ(moto_->peer("get", "ckpt", {"run-c/checkpoint-00000007.pt"})["size"], 5);
  // Writing the same bytes again (a retried save) is not a conflict.
  const Checkpoint eight = sample(8);
  save_checkpoint("s3://ckpt/run-c", eight);
  save_checkpoint("s3://ckpt/run-c", eight);
}

TEST_F(S3Checkpoints, BadLocationsEndWithOneLine) {
  EXPECT_FALSE(load_latest_checkpoint("s3://ckpt/nothing-here"));
  try {
    save_checkpoint("s3://", sample(1));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), "'s3://' names no bucket; fix: write s3://<bucket>/<prefix>");
  }
  try {
    load_latest_checkpoint("s3://no-such-bucket/run");
    FAIL();
  } catch (const ObjectNotFoundError& e) {
    EXPECT_NE(std::string(e.what()).find("HTTP 404 NoSuchBucket: no bucket 'no-such-bucket'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dtrain
