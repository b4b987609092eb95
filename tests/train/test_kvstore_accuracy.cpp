// The end-to-end check of parameter-server training: `dtrain run
// --ps-servers 2 --nproc-per-node 2 -- dtrain train --kvstore dist_sync`
// trains the demo CNN on Fashion-MNIST to at least 89% test accuracy in 3
// epochs (the accuracy the README quotes for DDP). Minutes on two cores:
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

TEST(KVStoreAccuracy, DistSyncWithTwoServersAndTwoWorkersTrainsTheCnnTo89PercentInThreeEpochs) {
  if (!fs::exists(kFashionMnist)) {
    GTEST_SKIP() << "Fashion-MNIST is not installed (" << kFashionMnist
                 << "); install dataset-fashion-mnist";
  }
  const fs::path dir =
      fs::temp_directory_path() / ("dtrain-kv-accuracy-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path metrics = dir / "metrics.jsonl";
  const std::string dtrain = DTRAIN_BINARY_DIR "/dtrain";
  // `timeout` bounds the whole job; the launcher stops every role it started.
  // The default heartbeat timeout: heartbeats never wait for message handling
  // (Note [Handlers off the receive thread], src/ps/membership/node.h).
  const testing::ShellRun r = testing::run_shell(
      "timeout -k 10 1700 " + dtrain + " run --ps-servers 2 --nproc-per-node 2 -- " + dtrain +
      " train --kvstore dist_sync --model cnn --dataset fashion-mnist --epochs 3 --quiet "
      "--metrics-file " +
      metrics.string() + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("kvstore dist_sync (2 worker(s)), optimizer on the workers"),
            std::string::npos)
      << r.output;
  std::ifstream in(metrics);
  std::vector<nlohmann::json> epochs;
  for (std::string line; std::getline(in, line);) epochs.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(epochs.size(), 3u) << r.output;
  const double acc = epochs.back()["test_acc"].get<double>();
  std::printf(
      "dist_sync, 2 servers x 2 workers: test accuracy %.4f after 3 epochs, %.1f images/sec\n", acc,
      epochs.back()["images_per_sec"].get<double>());
  EXPECT_GE(acc, 0.89) << r.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dtrain
