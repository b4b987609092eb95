// `dtrain bench train` as a user meets it: the tf_cnn_benchmarks-style lines,
// the JSON result, one-process and two-process (DDP under `dtrain run`, and
// through parameter servers with --kvstore) runs on the CPU, and one-line
// errors for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `dtrain <args>` bounded in time (timeout kills it and its children).
Result dtrain(const std::string& args, int timeout_s = 240) {
  const std::string cmd = "timeout -k 5 " + std::to_string(timeout_s) +
                          " " DTRAIN_BINARY_DIR "/dtrain " + args + " 2>&1";
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// The JSON object on the last line that holds one ("[rank0]: " tags dropped).
nlohmann::json last_json(const std::string& text) {
  std::istringstream in(text);
  std::string line, found;
  while (std::getline(in, line)) {
    const size_t brace = line.find('{');
    if (brace != std::string::npos) found = line.substr(brace);
  }
  return nlohmann::json::parse(found, nullptr, false);
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void expect_run(const Result& r, const std::string& model, int world, int64_t image_size) {
  ASSERT_EQ(r.code, 0) << r.output;
  // One progress line per step (--display-every 1), then the final total
  // (rank 0 only: a line per step, not per rank and step).
  EXPECT_EQ(count(r.output, "\ttotal images/sec: "), 2) << r.output;
  EXPECT_EQ(count(r.output, "total images/sec: "), 3) << r.output;
  nlohmann::json j = last_json(r.output);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["bench"], "train");
  EXPECT_EQ(j["model"], model);
  EXPECT_EQ(j["world_size"], world);
  EXPECT_EQ(j["steps"], 2);
  EXPECT_EQ(j["image_size"], image_size);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_GT(j["images_per_sec"].get<double>(), 0.0);
  EXPECT_GT(j["step_ms"].get<double>(), 0.0);
  EXPECT_TRUE(std::isfinite(j["final_loss"].get<double>()));
  // FLOP/s on the CPU too; peak GPU memory is n/a there (null in the JSON).
  EXPECT_GT(j["forward_gmacs"].get<double>(), 0.0);
  EXPECT_NEAR(j["tflops"].get<double>(),
              6 * j["forward_gmacs"].get<double>() * j["images_per_sec"].get<double>() / 1e3,
              1e-9 + 1e-6 * j["tflops"].get<double>());
  EXPECT_TRUE(j["peak_mem_gib"].is_null()) << j.dump();
  EXPECT_TRUE(j["gpu_mem_gib"].is_null()) << j.dump();
  EXPECT_EQ(count(r.output, "achieved TFLOP/s: "), 1) << r.output;
  EXPECT_EQ(count(r.output, "peak GPU memory: n/a (cpu)"), 1) << r.output;
}

TEST(BenchTrain, CnnOnCpuPrintsImagesPerSecLinesAndValidJson) {
  Result r = dtrain(
      "bench train --model cnn --device cpu --batch-size 4 --steps 2 --warmup-steps 1 "
      "--display-every 1 --threads 1 --json");
  expect_run(r, "cnn", 1, 28);
}

// The command users train with and the benchmark take the same step: one
// step of 4 samples, so dtrain train's epoch loss is that step's loss.
TEST(BenchTrain, TakesTheStepDtrainTrainTakesOnTheSyntheticDatasetWithTheSameSeed) {
  Result b = dtrain(
      "bench train --model cnn --device cpu --batch-size 4 --num-classes 10 --steps 1 "
      "--warmup-steps 0 --threads 1 --seed 3 --json");
  ASSERT_EQ(b.code, 0) << b.output;
  const std::string metrics = std::filesystem::temp_directory_path() /
                              ("dtrain_bench_train_same_" + std::to_string(::getpid()) + ".jsonl");
  Result t = dtrain(
      "train --model cnn --dataset synthetic --data-dir 1x28x28:10:4 --batch-size 4 --epochs 1 "
      "--seed 3 --device cpu --threads 1 --quiet --metrics-file " +
      metrics);
  ASSERT_EQ(t.code, 0) << t.output;
  std::ifstream in(metrics);
  std::string line;
  std::getline(in, line);
  std::filesystem::remove(metrics);
  const nlohmann::json epoch = nlohmann::json::parse(line, nullptr, false);
  ASSERT_TRUE(epoch.is_object()) << line;
  EXPECT_EQ(last_json(b.output)["final_loss"].get<double>(), epoch["train_loss"].get<double>());
}

TEST(BenchTrain, Resnet18OnCpuPrintsImagesPerSecLinesAndValidJson) {
  Result r = dtrain(
      "bench train --model resnet18 --device cpu --batch-size 2 --image-size 32 "
      "--num-classes 10 --steps 2 --warmup-steps 1 --display-every 1 --threads 1 --json");
  expect_run(r, "resnet18", 1, 32);
}

TEST(BenchTrain, Resnet18Bf16ChannelsLastOnCpuRuns) {
  Result r = dtrain(
      "bench train --model resnet18 --device cpu --batch-size 2 --image-size 32 "
      "--num-classes 10 --steps 2 --warmup-steps 1 --display-every 1 --threads 1 "
      "--amp bf16 --channels-last --json");
  expect_run(r, "resnet18", 1, 32);
  EXPECT_EQ(last_json(r.output)["amp"], "bf16");
}

TEST(BenchTrain, TwoProcessesUnderDtrainRunReportTheTotalOverRanks) {
  Result r = dtrain("run --nproc-per-node 2 -- " DTRAIN_BINARY_DIR
                    "/dtrain bench train --model cnn --device cpu --batch-size 4 --steps 2 "
                    "--warmup-steps 1 --display-every 1 --threads 1 --json");
  expect_run(r, "cnn", 2, 28);
  EXPECT_NE(r.output.find("Batch size:  8 global, 4 per process"), std::string::npos) << r.output;
}

TEST(BenchTrain, TwoWorkersThroughTwoServersUnderDtrainRunPsServersReportTheKvstore) {
  // Every role runs the same command: the scheduler and servers serve and exit 0.
  Result r = dtrain("run --ps-servers 2 --nproc-per-node 2 -- " DTRAIN_BINARY_DIR
                    "/dtrain bench train --model cnn --device cpu --batch-size 4 --steps 2 "
                    "--warmup-steps 1 --display-every 1 --threads 1 --kvstore dist_sync --json");
  expect_run(r, "cnn", 2, 28);
  EXPECT_EQ(last_json(r.output)["kvstore"], "dist_sync");
  EXPECT_NE(r.output.find("Gradients:   kvstore dist_sync (2 worker(s)), optimizer on the workers"),
            std::string::npos)
      << r.output;
}

TEST(BenchTrain, TwoProcessesOfOneNodeThroughDistDeviceSyncUnderPsWorkerPerNodeReportTheKvstore) {
  // One ps worker for the node: its two processes sum through Gloo first.
  Result r =
      dtrain("run --ps-servers 1 --nproc-per-node 2 --ps-worker-per node -- " DTRAIN_BINARY_DIR
             "/dtrain bench train --model cnn --device cpu --batch-size 4 --steps 2 "
             "--warmup-steps 1 --display-every 1 --threads 1 --kvstore dist_device_sync "
             "--json");
  expect_run(r, "cnn", 2, 28);
  EXPECT_EQ(last_json(r.output)["kvstore"], "dist_device_sync");
  EXPECT_NE(r.output.find(
                "Gradients:   kvstore dist_device_sync (2 worker(s)), optimizer on the workers"),
            std::string::npos)
      << r.output;
}

TEST(BenchTrain, TensorboardGetsDtrainTrainsScalarsEveryNStepsAndTimelineTheSteps) {
  if (std::system("/usr/bin/python3 -c 'import tensorboard' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "TensorBoard's EventAccumulator (python3 tensorboard) is not installed";
  }
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("dtrain_bench_train_tb_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Result r = dtrain(
      "bench train --model cnn --device cpu --batch-size 4 --steps 4 --warmup-steps 1 "
      "--threads 1 --tensorboard " +
      (dir / "tb").string() + " --tensorboard-every 2 --timeline " + (dir / "tl.json").string());
  ASSERT_EQ(r.code, 0) << r.output;
  // TensorBoard's own reader: tag, then the steps and values it holds.
  Result read = Result{};
  {
    const std::string cmd =
        "/usr/bin/python3 -c \"from tensorboard.backend.event_processing.event_accumulator import "
        "EventAccumulator as E; a = E('" +
        (dir / "tb").string() +
        "'); a.Reload(); "
        "[print(t, [s.step for s in a.Scalars(t)], min(s.value for s in a.Scalars(t)) > 0) "
        "for t in ['train/images_per_sec', 'train/loss', 'train/lr']]; "
        "print('epoch/test_top1' in a.Tags()['scalars'])\" 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) read.output.append(buf, n);
    read.code = ::pclose(p);
  }
  // train()'s scalars at its global steps (1 warm-up + 4 timed); no
  // evaluation, so no test accuracy.
  EXPECT_EQ(read.output,
            "train/images_per_sec [2, 4] True\ntrain/loss [2, 4] True\ntrain/lr [2, 4] True\n"
            "False\n");
  // The phases of every warm-up and timed step.
  std::string timeline;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("tl", 0) == 0) timeline = e.path().string();
  }
  ASSERT_FALSE(timeline.empty()) << "no timeline file in " << dir;
  std::ifstream in(timeline);
  nlohmann::json t = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(t.is_discarded()) << timeline;
  const nlohmann::json& events = t.is_object() ? t["traceEvents"] : t;
  int forward = 0, optimizer = 0;
  for (const auto& e : events) {
    if (e.value("name", "") == "forward" && e.value("ph", "") != "E") ++forward;
    if (e.value("name", "") == "optimizer step" && e.value("ph", "") != "E") ++optimizer;
  }
  EXPECT_EQ(forward, 5);
  EXPECT_EQ(optimizer, 5);
  fs::remove_all(dir);
}

// The script beside PyTorch eager, with the peer's Python given as on the GPU
// machine: both sides' images/sec, the ratio, both TFLOP/s, memory n/a.
TEST(BenchTrain, TheScriptBesidePytorchPrintsTheRatioAndBothTflopsWithThePeerPythonGiven) {
  if (std::system("/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 with torch and torchvision (the peer) is not installed";
  }
  namespace fs = std::filesystem;
  const fs::path out =
      fs::temp_directory_path() / ("dtrain_bench_train_script_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const std::string cmd =
      "DTRAIN_PEER_PYTHON=/usr/bin/python3 timeout -k 5 300 bash " DTRAIN_SOURCE_DIR
      "/bench/train_synthetic_vs_pytorch.sh --model cnn --image-size 28 --num-classes 10 "
      "--batch-size 4 --nproc 1 --threads 1 --steps 2 --warmup-steps 1 --rounds 1 "
      "--build " DTRAIN_BINARY_DIR " --timeout 240 --out " +
      out.string() + " 2>&1";
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("dtrain/pytorch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("achieved TFLOP/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("peak GPU memory "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" n/a          n/a   (device cpu)"), std::string::npos) << r.output;
  // Both sides count the same multiply-adds for the same model and size.
  std::ifstream in(out / "summary.json");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["dtrain"][0]["forward_gmacs"], j["pytorch"][0]["forward_gmacs"]) << j.dump();
  EXPECT_GT(j["tflops"]["pytorch"].get<double>(), 0.0);
  EXPECT_TRUE(j["pytorch"][0]["peak_mem_gib"].is_null());
  fs::remove_all(out);
}

TEST(BenchTrain, Fp16OnCpuIsAOneLineErrorNamingBf16) {
  Result r = dtrain("bench train --model cnn --device cpu --amp fp16 --steps 1", 60);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count(r.output, "\n"), 1) << r.output;
  EXPECT_NE(r.output.find("bf16"), std::string::npos) << r.output;
}

TEST(BenchTrain, UnknownModelIsAnErrorListingTheModels) {
  Result r = dtrain("bench train --model no_such_net --device cpu --steps 1", 60);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no_such_net"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resnet18"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cnn"), std::string::npos) << r.output;
}

}  // namespace
