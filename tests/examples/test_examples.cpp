// The examples in examples/ started as the README tells users to, under
// `dtrain run` (free ports, bounded time), each checked for what it
// demonstrates: replicas that stay in sync, a loss that falls, a resumed run
// that ends where an uninterrupted one does.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "examples/example_output.h"

namespace dtrain::testing {
namespace {

namespace fs = std::filesystem;

/// Two ranks printed their final line, with the same weights and a held-out
/// loss below where it started.
void expect_two_ranks_in_sync_and_learning(const ShellRun& run) {
  ASSERT_EQ(run.code, 0) << run.output;
  const auto ranks = example_ranks(run.output);
  ASSERT_EQ(ranks.size(), 2u) << run.output;
  EXPECT_NE(ranks[0].rank, ranks[1].rank) << run.output;
  EXPECT_EQ(ranks[0].checksum, ranks[1].checksum) << "replicas diverged:\n" << run.output;
  for (const auto& r : ranks) {
    ASSERT_TRUE(r.loss_before && r.loss_after) << run.output;
    EXPECT_LT(*r.loss_after, 0.5 * *r.loss_before) << "rank " << r.rank << ":\n" << run.output;
  }
}

TEST(Examples, CustomModelTrainsOnTwoRanksThatEndWithTheSameWeights) {
  expect_two_ranks_in_sync_and_learning(
      run_example(DTRAIN_BINARY, "--nproc-per-node 2", EXAMPLES_DIR "/custom_model"));
}

TEST(Examples, HorovodOptimizerTrainsOnTwoRanksThatEndWithTheSameWeights) {
  expect_two_ranks_in_sync_and_learning(
      run_example(DTRAIN_BINARY, "--nproc-per-node 2", EXAMPLES_DIR "/horovod_optimizer"));
}

TEST(Examples, ParameterServerTrainsTwoWorkersThatPullTheSameWeights) {
  expect_two_ranks_in_sync_and_learning(run_example(
      DTRAIN_BINARY, "--nproc-per-node 2 --ps-servers 1", EXAMPLES_DIR "/parameter_server"));
}

class CheckpointExample : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dtrain_checkpoint_example_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string run(const fs::path& checkpoints, int steps, ShellRun* out) {
    *out = run_example(DTRAIN_BINARY, "--nproc-per-node 2", EXAMPLES_DIR "/checkpoint_resume",
                       checkpoints.string() + " " + std::to_string(steps));
    const auto ranks = example_ranks(out->output);
    if (out->code != 0 || ranks.size() != 2 || ranks[0].checksum != ranks[1].checksum) return "";
    return ranks[0].checksum;
  }
  fs::path dir_;
};

TEST_F(CheckpointExample, AResumedRunEndsWithTheWeightsOfAnUninterruptedRun) {
  ShellRun straight, first, resumed;
  const std::string reference = run(dir_ / "straight", 20, &straight);
  ASSERT_FALSE(reference.empty()) << straight.output;
  EXPECT_EQ(straight.output.find("resumed"), std::string::npos) << straight.output;

  ASSERT_FALSE(run(dir_ / "stopped", 10, &first).empty()) << first.output;
  const std::string after_resume = run(dir_ / "stopped", 20, &resumed);
  ASSERT_FALSE(after_resume.empty()) << resumed.output;
  EXPECT_NE(
      resumed.output.find("resumed from " + (dir_ / "stopped" / "checkpoint-00000010.pt").string() +
                          " at step 10"),
      std::string::npos)
      << resumed.output;
  EXPECT_EQ(after_resume, reference) << "straight:\n"
                                     << straight.output << "resumed:\n"
                                     << resumed.output;
}

}  // namespace
}  // namespace dtrain::testing
