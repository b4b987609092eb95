// What train() shows while it runs: TensorBoard event files read back by
// readers that share no code with dtrain (tests/observe/read_events.py's
// protobuf decoder, TensorBoard's EventAccumulator), per-rank timelines
// checked against the reducer's statistics, the Prometheus endpoint scraped
// during training and checked by promtool, and the bad inputs.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "dtrain/errors.h"
#include "dtrain/metrics.h"
#include "dtrain/train.h"
#include "support/http.h"
#include "support/ranks.h"
#include "support/shell.h"
#include "train/fixtures.h"
#include "train/observers.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;
using Shell = testing::ShellRun;

const std::string kReader = std::string(DTRAIN_SOURCE_DIR) + "/tests/observe/read_events.py";
const std::string kProtoDir = std::string(DTRAIN_SOURCE_DIR) + "/tests/observe";

Shell dtrain_cli(const std::string& args) {
  return testing::run_shell("timeout -k 5 120 " DTRAIN_BINARY_DIR "/dtrain " + args + " 2>&1");
}

// read_events.py's JSON; skips the calling test when its reader is missing.
#define READ_EVENTS_OR_SKIP(args, json_out)                                                \
  do {                                                                                     \
    if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";            \
    Shell r_ = testing::run_shell("/usr/bin/python3 " + kReader + " " + (args) + " 2>&1"); \
    if (r_.code == 77) GTEST_SKIP() << r_.output;                                          \
    ASSERT_EQ(r_.code, 0) << r_.output;                                                    \
    json_out = nlohmann::json::parse(r_.output);                                           \
  } while (0)

class TrainObserve : public testing::ScratchDir {
 protected:
  void SetUp() override {
    ScratchDir::SetUp();
    testing::write_tiny_dataset(dir_ / "data", 96, 32);  // 12 steps of 8 per epoch
    data_ = "--dataset mnist --data-dir " + (dir_ / "data").string() +
            " --threads 1 --device cpu --batch-size 8 --quiet";
  }
  TrainOptions options(int64_t epochs) const {
    TrainOptions o;
    o.model = "cnn";
    o.dataset.name = "mnist";
    o.dataset.data_dir = (dir_ / "data").string();
    o.epochs = epochs;
    o.batch_size = 8;
    o.eval_batch_size = 32;
    o.threads = 1;
    o.device = DeviceChoice::cpu();
    o.progress = TrainOptions::Progress::kNone;
    return o;
  }
  // The one event file `dtrain train --tensorboard DIR/tb` wrote.
  std::string event_file() const {
    std::vector<fs::path> files(fs::directory_iterator(dir_ / "tb"), fs::directory_iterator{});
    EXPECT_EQ(files.size(), 1u);
    return files.empty() ? "" : files[0].string();
  }
  std::string data_;
};

// Tag -> steps, from read_events.py's protobuf decoding.
std::map<std::string, std::vector<int64_t>> steps_by_tag(const nlohmann::json& events) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& e : events) {
    for (const auto& v : e["values"]) out[v["tag"]].push_back(e["step"].get<int64_t>());
  }
  return out;
}

TEST_F(TrainObserve, TensorBoardFlagWritesStepScalarsEpochScalarsConfigAndHistograms) {
  Shell r = dtrain_cli("train " + data_ + " --epochs 2 --tensorboard " + (dir_ / "tb").string() +
                       " --tensorboard-every 5 --tensorboard-histograms");
  ASSERT_EQ(r.code, 0) << r.output;
  nlohmann::json events;
  READ_EVENTS_OR_SKIP(event_file() + " " + kProtoDir, events);
  const auto tags = steps_by_tag(events);
  const std::vector<int64_t> every5 = {5, 10, 15, 20}, epochs = {12, 24};
  for (const char* tag : {"train/loss", "train/lr", "train/images_per_sec",
                          "train/data_wait_fraction", "train/exposed_comm_fraction"}) {
    ASSERT_TRUE(tags.count(tag)) << tag;
    EXPECT_EQ(tags.at(tag), every5) << tag;
  }
  EXPECT_EQ(tags.count("train/loss_scale"), 0u) << "no loss scaling without fp16";
  for (const char* tag :
       {"epoch/train_loss", "epoch/test_top1", "epoch/test_top5", "epoch/test_loss",
        "epoch/images_per_sec", "weights/fc1.weight", "gradients/fc1.weight"}) {
    ASSERT_TRUE(tags.count(tag)) << tag << " missing; " << events.dump().substr(0, 2000);
    EXPECT_EQ(tags.at(tag), epochs) << tag;
  }
  ASSERT_TRUE(tags.count("config"));
  EXPECT_EQ(tags.at("config"), std::vector<int64_t>{0});
  for (const auto& e : events) {
    for (const auto& v : e["values"]) {
      if (v["tag"] == "config") {
        EXPECT_EQ(v["plugin"], "text");
        EXPECT_NE(v["text"][0].get<std::string>().find("| model | cnn |"), std::string::npos);
      }
      if (v["tag"] == "train/lr") {
        EXPECT_FLOAT_EQ(v["value"].get<double>(), 0.01f);
      }
      if (v["tag"] == "epoch/test_top1") {
        EXPECT_GE(v["value"].get<double>(), 0.0);
        EXPECT_LE(v["value"].get<double>(), 1.0);
      }
      if (v["tag"] == "gradients/fc1.weight") {
        EXPECT_EQ(v["kind"], "histo");
      }
    }
  }
}

// Issue 19's observability: a RecoveryEvent becomes a log line naming who
// failed, how, the new world size and the time to resume; the counter and
// gauge on the endpoint; a TensorBoard scalar of the world size at the step;
// a timeline span as long as the recovery took.
TEST_F(TrainObserve, ALiveRecoveryEventIsALogLineMetricsAScalarAndATimelineSpan) {
  TrainOptions o = options(1);
  o.tensorboard = (dir_ / "tb").string();
  o.timeline = (dir_ / "timeline.json").string();
  o.metrics_port = testing::free_port();
  o.metrics_host = "127.0.0.1";
  testing::run_ranks(1, [&](const ProcessGroup& pg) {
    detail::TrainObservers obs(o, pg, nullptr);
    RecoveryEvent formed;
    formed.kind = RecoveryEvent::Kind::kFormed;
    formed.world_size = 4;
    obs.recovery(formed, nullptr);
    RecoveryEvent e;
    e.kind = RecoveryEvent::Kind::kLost;
    e.generation = 3;
    e.step = 41;
    e.lost = {{"rank1@node1", DetectionCause::kMissedHeartbeats}};
    e.previous_world_size = 4;
    e.world_size = 3;
    e.detect_to_group = std::chrono::milliseconds(410);
    std::ostringstream log;
    obs.recovery(e, &log);
    EXPECT_EQ(log.str(),
              "live recovery: generation 3 at step 41: lost rank1@node1 (missed heartbeats); 3 "
              "workers (was 4); training resumed 0.41 s after detection\n");
    // A step given up by a member's own failure, nobody lost: the line says why.
    RecoveryEvent redo = e;
    redo.generation = 4;
    redo.lost.clear();
    redo.world_size = 3;
    redo.previous_world_size = 3;
    redo.redo_reason = "rank2@node1: allreduce failed";
    EXPECT_EQ(detail::recovery_line(redo),
              "live recovery: generation 4 at step 41: step redone (rank2@node1: allreduce "
              "failed); 3 workers (was 3); training resumed 0.41 s after detection");
    const std::string scrape = testing::http_get(o.metrics_port, "/metrics");
    auto value_of = [&](const std::string& series) {
      const size_t at = scrape.find("\n" + series + "{");
      if (at == std::string::npos) return std::string("absent");
      const size_t end = scrape.find('\n', at + 1);
      return scrape.substr(scrape.rfind(' ', end) + 1, end - scrape.rfind(' ', end) - 1);
    };
    EXPECT_EQ(value_of("dtrain_recoveries_total"), "1") << scrape;
    EXPECT_EQ(value_of("dtrain_world_size"), "3") << scrape;
    obs.finish();
  });
  const nlohmann::json trace = nlohmann::json::parse(testing::read_text(dir_ / "timeline.json"));
  int spans = 0;
  for (const auto& ev : trace) {
    if (ev.value("name", "") != "live recovery") continue;
    ++spans;
    EXPECT_EQ(ev["ph"], "X");
    EXPECT_NEAR(ev["dur"].get<double>(), 410e3, 1e3);
    EXPECT_EQ(ev["args"]["world_size"], 3);
  }
  EXPECT_EQ(spans, 1);
  nlohmann::json events;
  READ_EVENTS_OR_SKIP(event_file() + " " + kProtoDir, events);
  const auto tags = steps_by_tag(events);
  ASSERT_TRUE(tags.count("live/world_size"));
  EXPECT_EQ(tags.at("live/world_size"), (std::vector<int64_t>{0, 41}));
}

TEST_F(TrainObserve, TensorBoardsEventAccumulatorReadsTheTrainingRun) {
  Shell r = dtrain_cli("train " + data_ + " --epochs 1 --tensorboard " + (dir_ / "tb").string() +
                       " --tensorboard-every 4");
  ASSERT_EQ(r.code, 0) << r.output;
  nlohmann::json tb;
  READ_EVENTS_OR_SKIP("--accumulator " + (dir_ / "tb").string(), tb);
  const auto& loss = tb["scalars"]["train/loss"];
  ASSERT_EQ(loss.size(), 3u) << tb.dump();
  EXPECT_EQ(loss[0][0], 4);
  EXPECT_EQ(loss[2][0], 12);
  ASSERT_EQ(tb["scalars"]["epoch/test_top1"].size(), 1u);
  EXPECT_EQ(tb["scalars"]["epoch/test_top1"][0][0], 12);
  ASSERT_EQ(tb["text"]["config"].size(), 1u);
}

TEST_F(TrainObserve, TensorBoardDirectoryThatCannotBeCreatedIsAUsageErrorBeforeTraining) {
  { std::ofstream(dir_ / "blocker") << "x"; }
  const std::string bad = (dir_ / "blocker" / "runs").string();
  Shell r = dtrain_cli("train " + data_ + " --epochs 1 --tensorboard " + bad);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("dtrain train: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(bad), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("epoch 1/1"), std::string::npos) << "trained anyway: " << r.output;
}

// Note [Checking a timeline's nesting]
// Per (pid, tid), events sorted by start (longer first on ties) must each
// lie inside the innermost open event or start after it ended: Perfetto
// draws anything else as overlapping slices.
void expect_properly_nested(const nlohmann::json& events, const std::string& file) {
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  for (const auto& e : events) {
    if (e["ph"] != "X") continue;
    tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back(
        {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  }
  for (auto& [track, spans] : tracks) {
    std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<double> open_ends;
    for (const auto& [start, end] : spans) {
      while (!open_ends.empty() && start >= open_ends.back()) open_ends.pop_back();
      if (!open_ends.empty()) {
        EXPECT_LE(end, open_ends.back() + 1e-3) << file << ": event at " << start << " on track "
                                                << track.second << " overlaps its enclosing event";
      }
      open_ends.push_back(end);
    }
  }
}

TEST_F(TrainObserve, TimelinesOfTwoRanksAreNestedTracesWithOneSpanPerBucketAllreduce) {
  TrainOptions o = options(2);
  o.timeline = (dir_ / "tl.json").string();
  o.checkpoint_dir = (dir_ / "ckpt").string();
  std::mutex mu;
  std::map<int, int64_t> expected_buckets;  // rank -> sum over steps of bucket count
  std::map<int, int64_t> steps;
  testing::run_ranks(
      2,
      [&](const ProcessGroup& pg) {
        TrainOptions mine = o;
        mine.on_step = [&, rank = pg.rank()](int64_t step, const DdpStats& s) {
          std::lock_guard<std::mutex> lock(mu);
          expected_buckets[rank] += static_cast<int64_t>(s.bucket_bytes.size());
          steps[rank] = step;
        };
        train(mine, pg, nullptr);
      },
      std::chrono::seconds(120));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string file = (dir_ / ("tl.rank" + std::to_string(rank) + ".json")).string();
    ASSERT_TRUE(fs::exists(file)) << file;
    const nlohmann::json events = nlohmann::json::parse(testing::read_text(file));  // valid JSON
    std::map<std::string, int> count;
    int buckets = 0;
    for (const auto& e : events) {
      EXPECT_EQ(e["pid"], rank);
      if (e["ph"] == "X" || e["ph"] == "B") ++count[e["name"].get<std::string>()];
      if (e["ph"] == "X" && e["cat"] == "comm") {
        ++buckets;
        EXPECT_GE(e["tid"].get<int>(), 100);
      }
    }
    EXPECT_EQ(steps[rank], 12);  // 2 epochs of 96 / (2 ranks x 8) steps
    EXPECT_EQ(buckets, expected_buckets[rank]) << "one span per bucket per synchronised step";
    EXPECT_GT(buckets, 0);
    EXPECT_EQ(count["forward"], 12) << file;
    EXPECT_EQ(count["backward"], 12);
    EXPECT_EQ(count["optimizer step"], 12);
    EXPECT_EQ(count["data wait"], 12);
    EXPECT_EQ(count["evaluate"], 2);
    EXPECT_EQ(count["epoch 1"], 1);
    EXPECT_EQ(count["epoch 2"], 1);
    EXPECT_EQ(count["checkpoint"], rank == 0 ? 2 : 0) << "rank 0 writes the checkpoints";
    expect_properly_nested(events, file);
  }
}

std::string detail_host() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// The exporter lives as long as train(): the scrape happens from on_step,
// on the training thread, after the third optimizer step was recorded.
TEST_F(TrainObserve, MetricsEndpointScrapedDuringTrainingHasTheRunsSeriesAndPassesPromtool) {
  ::setenv("TORCHELASTIC_RUN_ID", "obs-test", 1);
  ::setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
  TrainOptions o = options(1);
  o.metrics_port = testing::free_port();
  o.metrics_host = "127.0.0.1";
  std::string scrape;
  o.on_step = [&](int64_t step, const DdpStats&) {
    if (step == 3) scrape = testing::http_get(o.metrics_port, "/metrics");
  };
  std::ostringstream log;
  train(o, ProcessGroup(), &log);
  ::unsetenv("TORCHELASTIC_RUN_ID");
  ::unsetenv("TORCHELASTIC_RESTART_COUNT");
  EXPECT_NE(log.str().find("rank 0: metrics on http://127.0.0.1:" + std::to_string(o.metrics_port) +
                           "/metrics"),
            std::string::npos)
      << log.str();
  ASSERT_FALSE(scrape.empty());
  const std::string labels = R"({node=")" + detail_host() + R"(",rank="0",run_id="obs-test"} )";
  EXPECT_NE(scrape.find("\ndtrain_steps_total" + labels + "3\n"), std::string::npos) << scrape;
  EXPECT_NE(scrape.find("\ndtrain_samples_total" + labels + "24\n"), std::string::npos)
      << "3 steps x 8 samples";
  EXPECT_NE(scrape.find("\ndtrain_restarts" + labels + "2\n"), std::string::npos);
  EXPECT_NE(scrape.find("\ndtrain_epoch" + labels + "1\n"), std::string::npos);
  EXPECT_NE(scrape.find("\ndtrain_step_seconds_count" + labels + "3\n"), std::string::npos);
  if (!fs::exists("/usr/bin/promtool")) GTEST_SKIP() << "promtool missing (Debian: prometheus)";
  { std::ofstream(dir_ / "scrape.txt") << scrape; }
  Shell r = testing::run_shell("/usr/bin/promtool check metrics < " +
                               (dir_ / "scrape.txt").string() + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, "") << r.output;
}

TEST_F(TrainObserve, MetricsPortInUseIsAUsageErrorNamingHostPortAndTheHint) {
  MetricsOptions taken;
  taken.host = "127.0.0.1";
  MetricsExporter first(taken);
  const std::string port = std::to_string(first.port());
  Shell r =
      dtrain_cli("train " + data_ + " --epochs 1 --metrics-host 127.0.0.1 --metrics-port " + port);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("127.0.0.1:" + port), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("pass another --metrics-port, or 0 to pick a free one"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("epoch 1/1"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << "one line: " << r.output;
}

TEST_F(TrainObserve, MetricsPortZeroPicksAFreePortAndPrintsIt) {
  Shell r = dtrain_cli("train " + data_ + " --epochs 1 --metrics-host 127.0.0.1 --metrics-port 0");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0: metrics on http://127.0.0.1:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("127.0.0.1:0/"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dtrain
