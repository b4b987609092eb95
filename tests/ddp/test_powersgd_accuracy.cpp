// The accuracy check of PowerSGD: `dtrain run --nproc-per-node 2 --
// dtrain train --model cnn --dataset fashion-mnist --epochs 3` with
// --comm-hook powersgd --powersgd-rank 2 reaches plain allreduce's test
// accuracy within 0.5 point. Compression starts at iteration 10 (of ~1400
// per rank), so nearly all of training is compressed. Minutes on two cores:
// labelled "slow", not "unit".
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/shell.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

// Final test accuracy and images/sec of a 3-epoch run with `hook_flags`.
std::pair<double, double> train_cnn(const fs::path& dir, const std::string& name,
                                    const std::string& hook_flags) {
  const fs::path metrics = dir / (name + ".jsonl");
  const std::string dtrain = DTRAIN_BINARY_DIR "/dtrain";
  const testing::ShellRun r = testing::run_shell(
      "timeout -k 10 1700 " + dtrain + " run --nproc-per-node 2 -- " + dtrain +
      " train --model cnn --dataset fashion-mnist --epochs 3 --quiet --verbose --metrics-file " +
      metrics.string() + " " + hook_flags + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(hook_flags.empty() ? "hook allreduce" : "hook powersgd"),
            std::string::npos)
      << r.output;
  if (!hook_flags.empty()) {
    EXPECT_NE(r.output.find("  powersgd: iteration"), std::string::npos) << r.output;
    std::printf("%s\n", r.output.c_str());
  }
  std::ifstream in(metrics);
  std::vector<nlohmann::json> epochs;
  for (std::string line; std::getline(in, line);) epochs.push_back(nlohmann::json::parse(line));
  if (epochs.size() != 3u) {
    ADD_FAILURE() << epochs.size() << " epochs in " << metrics << "\n" << r.output;
    return {0, 0};
  }
  return {epochs.back()["test_acc"].get<double>(), epochs.back()["images_per_sec"].get<double>()};
}

TEST(PowerSGDAccuracy, Rank2OnTwoRanksKeepsAllreducesThreeEpochCnnAccuracyWithinHalfAPoint) {
  if (!fs::exists(kFashionMnist)) {
    GTEST_SKIP() << "Fashion-MNIST is not installed (" << kFashionMnist
                 << "); install dataset-fashion-mnist";
  }
  const fs::path dir =
      fs::temp_directory_path() / ("dtrain-powersgd-accuracy-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto [plain, plain_ips] = train_cnn(dir, "allreduce", "");
  const auto [compressed, compressed_ips] =
      train_cnn(dir, "powersgd", "--comm-hook powersgd --powersgd-rank 2 --powersgd-start-iter 10");
  std::printf(
      "cnn, Fashion-MNIST, 2 ranks, 3 epochs: allreduce %.4f (%.1f images/sec), PowerSGD rank 2 "
      "%.4f (%.1f images/sec)\n",
      plain, plain_ips, compressed, compressed_ips);
  EXPECT_GE(compressed, plain - 0.005);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dtrain
