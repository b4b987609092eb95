// The dtrain executable as a user meets it: exit codes and one-line errors
// for bad input, and a short end-to-end data-parallel run.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/http.h"
#include "support/tiny_idx.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a command line (program and shell-quoted arguments), bounded in time.
Result run_bounded(const std::string& command, int timeout_s) {
  std::string cmd = "timeout -k 5 " + std::to_string(timeout_s) + " " + command + " 2>&1";
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// Runs the dtrain binary with `args` (a shell-quoted string), bounded in time.
Result dtrain(const std::string& args, int timeout_s = 120) {
  return run_bounded(DTRAIN_BINARY_DIR "/dtrain " + args, timeout_s);
}

// Runs the dtrain binary with shell variable assignments `env` before it.
Result dtrain_with_env(const std::string& env, const std::string& args, int timeout_s = 60) {
  return run_bounded("env " + env + DTRAIN_BINARY_DIR "/dtrain " + args, timeout_s);
}

/// A tiny learnable MNIST-shaped dataset of 28x28 images.
void write_tiny_dataset(const fs::path& dir, uint32_t train, uint32_t test) {
  dtrain::testing::write_tiny_dataset(dir, train, test, 28, 1);
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

// launch() names LaunchOptions::max_restarts (test_launch_options.cpp); on
// the command line the same mistake names the flag and exits 2, whether
// CLI11 or the library catches it.
TEST_F(Cli, ANegativeMaxRestartsOrAnEmptyRoleOnDtrainRunNamesTheFlagAndExitsTwo) {
  Result r = dtrain("run --max-restarts -1 -- true");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--max-restarts"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("LaunchOptions"), std::string::npos) << r.output;
  r = dtrain("run --role '' -- true");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "dtrain run: error: --role must not be empty (torchrun's: default)\n");
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
  Result r = dtrain("train --epochs 1 --data-dir " + (dir_ / "data").string() + " --metrics-file " +
                    (dir_ / "no" / "such" / "dir" / "m.jsonl").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot write --metrics-file"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("epoch 1/1"), std::string::npos) << r.output;
}

// --data-cache (docs/object_store.md): bad input is a one-line usage error
// before anything starts; a local --data-dir is read where it is, with a note.
TEST_F(Cli, DataCacheWithABadSizeOrAnUnusableDirectoryIsAOneLineUsageError) {
  std::ofstream(dir_ / "file") << "x";
  const std::string cache = " --data-cache " + (dir_ / "cache").string();
  for (const std::string& args :
       {"train --data-cache-size 5X" + cache, "eval --data-cache-size 0" + cache,
        "train --data-cache " + (dir_ / "file" / "cache").string()}) {
    Result r = dtrain(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find(args.find("file") != std::string::npos ? "--data-cache '"
                                                                   : "--data-cache-size"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_EQ(r.output.find("DataCacheOptions"), std::string::npos) << r.output;
  }
}

TEST_F(Cli, DataCacheWithALocalDataDirTrainsFromTheDirectoryWithANote) {
  write_tiny_dataset(dir_ / "data", 64, 32);
  Result r = dtrain("train --epochs 1 --data-dir " + (dir_ / "data").string() + " --data-cache " +
                    (dir_ / "cache").string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("dtrain train: note: --data-cache caches s3:// data only; --data-dir '" +
                          (dir_ / "data").string() + "' is read where it is"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("epoch 1/1"), std::string::npos) << r.output;
}

// Issue 19's bad input: the parameter server recovers by its own mechanism.
TEST_F(Cli, KvstoreUnderLiveRecoveryIsAOneLineUsageErrorNamingTheFix) {
  Result r = dtrain_with_env("DTRAIN_RECOVERY=live ", "train --kvstore dist_sync --epochs 1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("dtrain train: error: --kvstore under live recovery"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("drop --kvstore or use --recovery restart"), std::string::npos)
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST_F(Cli, TwoWorkersTrainAndRankZeroWritesOneJsonLinePerEpoch) {
  write_tiny_dataset(dir_ / "data", 512, 200);
  const fs::path metrics = dir_ / "metrics.jsonl";
  Result r = dtrain("run --nproc-per-node 2 -- " DTRAIN_BINARY_DIR
                    "/dtrain train --epochs 2 "
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

TEST_F(Cli, AWorkerThatFailsAtRuntimeWritesTheTorchelasticErrorFile) {
  const fs::path error_file = dir_ / "errors" / "rank1.json";  // the folder does not exist yet
  Result r = run_bounded("env TORCHELASTIC_ERROR_FILE=" + error_file.string() +
                             " LOCAL_RANK=1 " DTRAIN_BINARY_DIR "/dtrain train --data-dir " +
                             (dir_ / "absent").string(),
                         120);
  ASSERT_EQ(r.code, 1) << r.output;
  std::ifstream in(error_file);
  ASSERT_TRUE(in) << "no error file at " << error_file << "; output: " << r.output;
  const auto j = nlohmann::json::parse(in);
  // torchelastic's shape, which torchrun's agent reads.
  const std::string torch_message = j["message"]["message"];
  EXPECT_EQ(torch_message.rfind("dtrain::DataError: dataset ", 0), 0u) << torch_message;
  EXPECT_TRUE(j["message"]["extraInfo"]["timestamp"].is_string()) << j.dump();
  // dtrain's typed fields.
  const auto& d = j["dtrain"];
  EXPECT_EQ(d["error_type"], "dtrain::DataError");
  EXPECT_NE(d["message"].get<std::string>().find("directory '" + (dir_ / "absent").string() +
                                                 "' does not exist"),
            std::string::npos)
      << j.dump();
  EXPECT_EQ(d["rank"], -1) << "no RANK in this environment";
  EXPECT_EQ(d["local_rank"], 1);
  EXPECT_GT(d["pid"].get<int>(), 0);
  EXPECT_FALSE(d["host"].get<std::string>().empty());
  EXPECT_GT(d["timestamp"].get<double>(), 1.6e9);
}

TEST_F(Cli, WithoutTheErrorFileVariableAFailingWorkerWritesNothing) {
  Result r = dtrain("train --data-dir " + (dir_ / "absent").string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0);
}

TEST_F(Cli, MpirunStartsTwoWorkersThatTrainAsOneGroup) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  write_tiny_dataset(dir_ / "data", 256, 100);
  const fs::path metrics = dir_ / "metrics.jsonl";
  const int port = dtrain::testing::free_port();
  ASSERT_GT(port, 0);
  // Open MPI refuses root and more ranks than cores unless told; the store's
  // address travels with -x, as docs/clusters.md tells users.
  Result r = run_bounded(
      "mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=" +
          std::to_string(port) +
          " " DTRAIN_BINARY_DIR
          "/dtrain train --epochs 1 --batch-size 16 "
          "--threads 1 --timeout 60 --data-dir " +
          (dir_ / "data").string() + " --metrics-file " + metrics.string(),
      180);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("epoch 1/1"), std::string::npos) << r.output;
  std::ifstream in(metrics);
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << "rank 0 writes the metrics; output: " << r.output;
  EXPECT_EQ(nlohmann::json::parse(line)["world_size"], 2) << line;
}

TEST_F(Cli, MpirunWithoutTheStoreAddressFailsNamingTheVariablesAndTheFix) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  Result r = run_bounded(
      "env -u MASTER_ADDR -u MASTER_PORT mpirun --allow-run-as-root "
      "--oversubscribe -np 2 " DTRAIN_BINARY_DIR "/dtrain train --epochs 1",
      60);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("MASTER_ADDR, MASTER_PORT are not set"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("mpirun -x MASTER_ADDR="), std::string::npos) << r.output;
}

}  // namespace

// ---- dtrain ps ---------------------------------------------------------------

// DMLC_* for a local job on `port` (shell assignments).
std::string dmlc_env(int port, int servers, int workers) {
  return "DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=" + std::to_string(port) +
         " DMLC_NUM_SERVER=" + std::to_string(servers) +
         " DMLC_NUM_WORKER=" + std::to_string(workers) + " ";
}

TEST_F(Cli, PsSchedulerAndServerServeAJobAndExitZeroWhenItEnds) {
  const int port = dtrain::testing::free_port();
  const std::string env = dmlc_env(port, 1, 2);
  const std::string node = DTRAIN_BINARY_DIR "/tests/ps/ps_node";
  const std::string dtrain_bin = DTRAIN_BINARY_DIR "/dtrain";
  // Every process is waited for; the shell's exit status sums their failures.
  const std::string script = "rc=0; " + env + dtrain_bin + " ps scheduler & s=$!; " + env +
                             dtrain_bin + " ps server & v=$!; " + env +
                             "DMLC_ROLE=worker PS_NODE_STEPS=5 " + node + " & a=$!; " + env +
                             "DMLC_ROLE=worker PS_NODE_STEPS=5 " + node + " & b=$!; " +
                             "for p in $s $v $a $b; do wait $p || rc=$((rc+1)); done; exit $rc";
  Result r = run_bounded("bash -c '" + script + "'", 60);
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST_F(Cli, PsServerWithSnapshotDirWritesItsShardThere) {
  const int port = dtrain::testing::free_port();
  const std::string dir = ::testing::TempDir() + "cli_ps_snap_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const std::string env = dmlc_env(port, 1, 2);
  const std::string node = DTRAIN_BINARY_DIR "/tests/ps/ps_node";
  const std::string dtrain_bin = DTRAIN_BINARY_DIR "/dtrain";
  const std::string workers_env = env + "DMLC_PS_SNAPSHOT_DIR=" + dir + " DMLC_ROLE=worker ";
  const std::string script =
      "rc=0; " + env + dtrain_bin + " ps scheduler --snapshot-dir " + dir + " & s=$!; " + env +
      dtrain_bin + " ps server --snapshot-dir " + dir + " & v=$!; " + workers_env +
      "PS_NODE_STEPS=5 " + node + " & a=$!; " + workers_env + "PS_NODE_STEPS=5 " + node +
      " & b=$!; for p in $s $v $a $b; do wait $p || rc=$((rc+1)); done; exit $rc";
  Result r = run_bounded("bash -c '" + script + "'", 60);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/server0/settings.bin")) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/server0/key0.bin")) << r.output;
  std::filesystem::remove_all(dir);
}

TEST_F(Cli, PsServerWithoutServersInTheJobIsAOneLineUsageError) {
  Result r = dtrain_with_env(dmlc_env(9, 0, 1), "ps server");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output,
            "dtrain ps server: error: environment variable DMLC_NUM_SERVER=0: a dist kvstore needs "
            "at least one server (use the 'local' kvstore for a single process)\n");
}
