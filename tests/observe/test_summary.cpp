// TensorBoard event files, read back by readers that share no code with
// dtrain: protobuf's Python runtime over message definitions written from
// TensorFlow's field numbers, and TensorBoard's own EventAccumulator.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <thread>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "dtrain/errors.h"
#include "dtrain/summary.h"
#include "observe/observe_test_util.h"
#include "observe/tfrecord.h"

namespace dtrain {
namespace {

using testing::ObserveTempDir;
using testing::run_command;

const std::string kReader = std::string(DTRAIN_SOURCE_DIR) + "/tests/observe/read_events.py";
const std::string kProtoDir = std::string(DTRAIN_SOURCE_DIR) + "/tests/observe";

// Runs read_events.py; skips the calling test when its reader is missing.
#define READ_EVENTS_OR_SKIP(args, json_out)                                                  \
  do {                                                                                       \
    if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3"; \
    std::string out_;                                                                        \
    int rc_ = run_command("/usr/bin/python3 " + kReader + " " + (args), &out_);              \
    if (rc_ == 77) GTEST_SKIP() << out_;                                                     \
    ASSERT_EQ(rc_, 0) << out_;                                                               \
    json_out = nlohmann::json::parse(out_);                                                  \
  } while (0)

void write_sample_run(const std::string& dir) {
  SummaryWriter tb(dir);
  tb.add_text("config", "model: resnet18\nbatch: 64", 0);
  for (int step = 0; step < 5; ++step) tb.add_scalar("train/loss", 2.5 - 0.5 * step, step);
  tb.add_scalar("train/lr", 0.1, 4);
  torch::Tensor w = torch::arange(-8, 8, torch::kFloat32).reshape({4, 4}) / 4;
  tb.add_histogram("weights/fc", w, 3);
}

TEST(TfRecord, Crc32cMatchesTheCastagnoliCheckValue) {
  EXPECT_EQ(detail::crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(detail::crc32c(""), 0u);
}

TEST(SummaryWriter, FileIsNamedLikeTensorFlowsEventFiles) {
  ObserveTempDir dir;
  SummaryWriter tb(dir.path());
  const std::string name = std::filesystem::path(tb.path()).filename().string();
  EXPECT_TRUE(
      std::regex_match(name, std::regex(R"(events\.out\.tfevents\.\d{10}\.[^.]+.*\.\d+\.\d+)")))
      << name;
}

TEST(SummaryWriter, TwoWritersInOneDirectoryGetDistinctFiles) {
  ObserveTempDir dir;
  SummaryWriter a(dir.path()), b(dir.path());
  EXPECT_NE(a.path(), b.path());
}

TEST(SummaryWriter, DirectoryThatCannotBeCreatedIsAnErrorNamingIt) {
  ObserveTempDir dir;
  { std::ofstream(dir.file("blocker")) << "x"; }
  const std::string bad = dir.file("blocker") + "/runs";
  try {
    SummaryWriter tb(bad);
    FAIL() << "no error for " << bad;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("writable directory"), std::string::npos) << e.what();
  }
}

TEST(SummaryWriter, EventsDecodeWithAnIndependentProtobufReader) {
  ObserveTempDir dir;
  write_sample_run(dir.path());
  const auto files = std::vector<std::filesystem::path>(
      std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator());
  ASSERT_EQ(files.size(), 1u);
  nlohmann::json events;
  READ_EVENTS_OR_SKIP(files[0].string() + " " + kProtoDir, events);

  // The reader checked both masked CRCs of every record (it exits otherwise).
  ASSERT_EQ(events.size(), 1u + 1 + 5 + 1 + 1);
  EXPECT_EQ(events[0]["file_version"], "brain.Event:2");
  EXPECT_TRUE(events[0]["values"].empty());
  for (const auto& e : events) {
    EXPECT_TRUE(e["canonical"].get<bool>()) << "re-serialised bytes differ: " << e.dump();
    EXPECT_GT(e["wall_time"].get<double>(), 1.5e9);
  }
  const auto& text = events[1]["values"][0];
  EXPECT_EQ(text["tag"], "config");
  EXPECT_EQ(text["kind"], "tensor");
  EXPECT_EQ(text["plugin"], "text");
  EXPECT_EQ(text["dtype"], 7);  // DT_STRING
  EXPECT_EQ(text["text"][0], "model: resnet18\nbatch: 64");
  for (int step = 0; step < 5; ++step) {
    const auto& e = events[2 + step];
    EXPECT_EQ(e["step"], step);
    EXPECT_EQ(e["values"][0]["tag"], "train/loss");
    EXPECT_EQ(e["values"][0]["value"].get<double>(), 2.5 - 0.5 * step);
  }
  EXPECT_EQ(events[7]["step"], 4);
  EXPECT_FLOAT_EQ(events[7]["values"][0]["value"].get<double>(), 0.1f);
  const auto& h = events[8]["values"][0];
  EXPECT_EQ(events[8]["step"], 3);
  EXPECT_EQ(h["tag"], "weights/fc");
  EXPECT_EQ(h["kind"], "histo");
  EXPECT_EQ(h["num"].get<double>(), 16);
  EXPECT_EQ(h["min"].get<double>(), -2.0);
  EXPECT_EQ(h["max"].get<double>(), 1.75);
  EXPECT_EQ(h["sum"].get<double>(), -2.0);  // (-8 + ... + 7) / 4
  double count = 0;
  for (double c : h["bucket"]) count += c;
  EXPECT_EQ(count, 16);
  EXPECT_EQ(h["bucket"].size(), h["bucket_limit"].size());
}

TEST(SummaryWriter, TensorBoardsEventAccumulatorReadsScalarsHistogramsAndText) {
  ObserveTempDir dir;
  write_sample_run(dir.path());
  nlohmann::json tb;
  READ_EVENTS_OR_SKIP("--accumulator " + dir.path(), tb);
  const auto& loss = tb["scalars"]["train/loss"];
  ASSERT_EQ(loss.size(), 5u);
  for (int step = 0; step < 5; ++step) {
    EXPECT_EQ(loss[step][0], step);
    EXPECT_EQ(loss[step][1].get<double>(), 2.5 - 0.5 * step);
  }
  ASSERT_EQ(tb["histograms"]["weights/fc"].size(), 1u);
  EXPECT_EQ(tb["histograms"]["weights/fc"][0][0], 3);
  EXPECT_EQ(tb["histograms"]["weights/fc"][0][1].get<double>(), 16);
  ASSERT_EQ(tb["text"]["config"].size(), 1u);
  EXPECT_EQ(tb["text"]["config"][0][1][0], "model: resnet18\nbatch: 64");
}

TEST(SummaryWriter, EventsFromSeveralThreadsAreAllWrittenWhole) {
  ObserveTempDir dir;
  std::string path;
  {
    SummaryWriter tb(dir.path());
    path = tb.path();
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&tb, t] {
        for (int i = 0; i < 100; ++i) tb.add_scalar("thread" + std::to_string(t), i, i);
      });
    }
    for (auto& t : threads) t.join();
  }
  nlohmann::json events;
  READ_EVENTS_OR_SKIP(path + " " + kProtoDir, events);
  EXPECT_EQ(events.size(), 1u + 400);
}

TEST(Histogram, ValuesFallInTensorFlowsDefaultBuckets) {
  Histogram h = make_histogram({-1.0, 0.0, 0.5, 2.0, std::nan("")});
  EXPECT_EQ(h.num, 4);
  EXPECT_EQ(h.min, -1.0);
  EXPECT_EQ(h.max, 2.0);
  EXPECT_EQ(h.sum, 1.5);
  EXPECT_EQ(h.sum_squares, 1.0 + 0.25 + 4.0);
  // Each value v lies in [limit[i-1], limit[i]) of the bucket counting it.
  for (double v : {-1.0, 0.0, 0.5, 2.0}) {
    size_t i = 0;
    while (i < h.bucket_limit.size() && !(v < h.bucket_limit[i])) ++i;
    ASSERT_LT(i, h.bucket.size());
    EXPECT_GE(h.bucket[i], 1) << v;
  }
  EXPECT_EQ(h.bucket.front(), 1);
  EXPECT_EQ(h.bucket.back(), 1);
}

}  // namespace
}  // namespace dtrain
