// The dtrain executable as a user meets it: exit codes and one-line errors
// for bad input, and a short end-to-end data-parallel run.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs the dtrain binary with `args` (a shell-quoted string), bounded in time.
Result dtrain(const std::string& args, int timeout_s = 120) {
  std::string cmd = "timeout -k 5 " + std::to_string(timeout_s) + " " DTRAIN_BINARY_DIR "/dtrain " +
                    args + " 2>&1";
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

void write_idx_gz(const fs::path& path, std::vector<uint32_t> dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b = {0, 0, 8, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  }
  b.insert(b.end(), data.begin(), data.end());
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
  gzclose(f);
}

// A tiny learnable MNIST-shaped dataset: class k lights up row band k.
void write_tiny_dataset(const fs::path& dir, uint32_t train, uint32_t test) {
  fs::create_directories(dir);
  std::mt19937 rng(1);
  for (auto [prefix, n] : {std::pair<std::string, uint32_t>{"train", train}, {"t10k", test}}) {
    std::vector<uint8_t> images(size_t{n} * 28 * 28), labels(n);
    for (uint32_t i = 0; i < n; ++i) {
      labels[i] = static_cast<uint8_t>(rng() % 10);
      for (int y = 0; y < 28; ++y) {
        for (int x = 0; x < 28; ++x) {
          bool on = y / 3 == labels[i] - 0 && y < 30;
          images[size_t{i} * 784 + y * 28 + x] = static_cast<uint8_t>(on ? 200 + rng() % 55 : rng() % 40);
        }
      }
    }
    write_idx_gz(dir / (prefix + "-images-idx3-ubyte.gz"), {n, 28, 28}, images);
    write_idx_gz(dir / (prefix + "-labels-idx1-ubyte.gz"), {n}, labels);
  }
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dtrain_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(Cli, NoSubcommandIsAUsageError) {
  Result r = dtrain("");
  EXPECT_EQ(r.code, 2) << r.output;
}

TEST_F(Cli, UnknownFlagIsAUsageErrorNamingIt) {
  Result r = dtrain("train --bogus 3");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--bogus"), std::string::npos) << r.output;
}

TEST_F(Cli, ZeroOrNegativeSizesAreUsageErrors) {
  for (const char* flags : {"--epochs 0", "--batch-size -4", "--lr 0", "--threads -1"}) {
    Result r = dtrain(std::string("train ") + flags);
    EXPECT_EQ(r.code, 2) << flags << ": " << r.output;
    EXPECT_NE(r.output.find(std::string(flags).substr(0, std::string(flags).find(' '))),
              std::string::npos)
        << r.output;
  }
}

TEST_F(Cli, UnknownModelOrDatasetListsTheValidNames) {
  Result m = dtrain("train --model resnet9000");
  EXPECT_EQ(m.code, 2) << m.output;
  EXPECT_NE(m.output.find("unknown model 'resnet9000'; valid models: cnn, resnet18"),
            std::string::npos)
      << m.output;
  Result d = dtrain("train --dataset imagenet22k");
  EXPECT_EQ(d.code, 2) << d.output;
  EXPECT_NE(d.output.find("unknown dataset 'imagenet22k'; valid datasets: fashion-mnist, mnist"),
            std::string::npos)
      << d.output;
}

TEST_F(Cli, MissingDatasetDirectoryNamesThePath) {
  Result r = dtrain("train --data-dir " + (dir_ / "absent").string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("directory '" + (dir_ / "absent").string() + "' does not exist"),
            std::string::npos)
      << r.output;
}

TEST_F(Cli, UnwritableMetricsFileFailsBeforeTrainingStarts) {
  write_tiny_dataset(dir_ / "data", 64, 32);
  Result r = dtrain("train --epochs 1 --data-dir " + (dir_ / "data").string() +
                    " --metrics-file " + (dir_ / "no" / "such" / "dir" / "m.jsonl").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot write --metrics-file"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("epoch 1/1"), std::string::npos) << r.output;
}

TEST_F(Cli, TwoWorkersTrainAndRankZeroWritesOneJsonLinePerEpoch) {
  write_tiny_dataset(dir_ / "data", 512, 200);
  const fs::path metrics = dir_ / "metrics.jsonl";
  Result r = dtrain("run --nproc-per-node 2 -- " DTRAIN_BINARY_DIR "/dtrain train --epochs 2 "
                    "--batch-size 16 --threads 1 --lr 0.05 --data-dir " +
                    (dir_ / "data").string() + " --metrics-file " + metrics.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0]: epoch 2/2"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[rank1]: epoch"), std::string::npos) << "only rank 0 reports";
  std::ifstream in(metrics);
  std::string line;
  int lines = 0;
  double last_acc = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    for (const char* key :
         {"epoch", "train_loss", "test_acc", "images_per_sec", "epoch_seconds", "world_size"}) {
      EXPECT_TRUE(j.contains(key)) << key << " missing in " << line;
    }
    EXPECT_EQ(j["world_size"], 2);
    EXPECT_EQ(j["epoch"], lines + 1);
    last_acc = j["test_acc"];
    ++lines;
  }
  EXPECT_EQ(lines, 2);
  EXPECT_GT(last_acc, 0.5) << "the tiny dataset is easy to learn";
}

TEST_F(Cli, AWorkerThatFailsMakesTheLauncherExitNonZeroNamingTheRank) {
  Result r = dtrain("run --nproc-per-node 2 -- " DTRAIN_BINARY_DIR "/dtrain train --data-dir " +
                    (dir_ / "absent").string());
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
}

}  // namespace
