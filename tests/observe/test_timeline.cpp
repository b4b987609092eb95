// The Chrome-trace timeline: valid JSON, spans nested per track, safe from
// several threads, bucket spans equal to what the DDP reducer measured, and
// the merge of ranks into one trace.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "dtrain/ddp.h"
#include "dtrain/errors.h"
#include "dtrain/timeline.h"
#include "observe/observe_test_util.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

using testing::ObserveTempDir;
using testing::slurp;
using Clock = Timeline::Clock;

nlohmann::json load(const std::string& path) { return nlohmann::json::parse(slurp(path)); }

// Checks that on every (pid, tid) the B/E pairs match like brackets and the
// X events either contain or miss each other (what the viewers draw as a
// stack). Returns "" or what is wrong.
std::string nesting_error(const nlohmann::json& events) {
  std::map<std::pair<int, int>, std::vector<std::string>> open;  // B/E stacks
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> spans;
  for (const auto& e : events) {
    const std::string ph = e.at("ph");
    if (ph == "M") continue;
    auto key = std::make_pair(e.at("pid").get<int>(), e.at("tid").get<int>());
    if (ph == "B") open[key].push_back(e.at("name"));
    if (ph == "E") {
      if (open[key].empty() || open[key].back() != e.at("name")) return "unmatched E " + e.dump();
      open[key].pop_back();
    }
    if (ph == "X") {
      const double ts = e.at("ts"), dur = e.at("dur");
      if (dur < 0) return "negative duration " + e.dump();
      spans[key].emplace_back(ts, ts + dur);
    }
  }
  for (const auto& [key, stack] : open) {
    if (!stack.empty()) return "unclosed B " + stack.back();
  }
  for (auto& [key, list] : spans) {
    for (const auto& a : list) {
      for (const auto& b : list) {
        const bool overlap = a.first < b.second && b.first < a.second;
        const bool nested = (a.first <= b.first && b.second <= a.second) ||
                            (b.first <= a.first && a.second <= b.second);
        if (overlap && !nested) return "overlapping spans on tid " + std::to_string(key.second);
      }
    }
  }
  return "";
}

TEST(Timeline, FileIsValidJsonWithNestedSpansAndRankMetadata) {
  ObserveTempDir dir;
  const std::string path = dir.file("rank3.json");
  {
    Timeline tl(path, TimelineOptions{3, ""});
    TimelineSpan step(&tl, "step");
    { TimelineSpan s(&tl, "data wait"); }
    { TimelineSpan s(&tl, "forward"); }
    tl.begin("backward", "train");
    tl.end("backward", "train");
    { TimelineSpan s(&tl, "optimizer step"); }
  }
  nlohmann::json events = load(path);
  ASSERT_TRUE(events.is_array());
  EXPECT_EQ(nesting_error(events), "");
  bool named = false;
  std::vector<std::string> x_names;
  for (const auto& e : events) {
    EXPECT_EQ(e.at("pid"), 3);
    if (e["ph"] == "M" && e["name"] == "process_name") named = e["args"]["name"] == "rank 3";
    if (e["ph"] == "X") x_names.push_back(e["name"]);
  }
  EXPECT_TRUE(named);
  // Spans are written as they end; the step ends last.
  EXPECT_EQ(x_names, (std::vector<std::string>{"data wait", "forward", "optimizer step", "step"}));
}

TEST(Timeline, EventsFromSeveralThreadsAreAllWrittenWhole) {
  ObserveTempDir dir;
  const std::string path = dir.file("t.json");
  {
    Timeline tl(path);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&tl, t] {
        for (int i = 0; i < 2000; ++i) TimelineSpan s(&tl, "work", "test", 10 + t);
      });
    }
    for (auto& t : threads) t.join();
  }
  nlohmann::json events = load(path);
  size_t spans = 0;
  for (const auto& e : events) spans += e["ph"] == "X";
  EXPECT_EQ(spans, 8000u);
  EXPECT_EQ(nesting_error(events), "");
}

TEST(Timeline, NullTimelineRecordsNothingAndGivesNoObserver) {
  { TimelineSpan s(nullptr, "forward"); }
  EXPECT_FALSE(static_cast<bool>(timeline_bucket_observer(nullptr)));
}

TEST(Timeline, FileThatCannotBeCreatedIsAnErrorNamingIt) {
  const std::string bad = "/nonexistent-dir/trace.json";
  try {
    Timeline tl(bad);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
}

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : a(register_module("a", torch::nn::Linear(64, 64))),
        b(register_module("b", torch::nn::Linear(64, 64))),
        c(register_module("c", torch::nn::Linear(64, 4))) {}
  torch::Tensor forward(torch::Tensor x) {
    return c->forward(torch::relu(b->forward(torch::relu(a->forward(x)))));
  }
  torch::nn::Linear a, b, c;
};
TORCH_MODULE(Mlp);

TEST(Timeline, BucketSpansEqualTheReducersStatistics) {
  ObserveTempDir dir;
  std::vector<DdpStats> stats(2);
  testing::run_ranks(2, [&](const ProcessGroup& pg) {
    Timeline tl(dir.file("rank" + std::to_string(pg.rank()) + ".json"),
                TimelineOptions{pg.rank(), ""});
    torch::manual_seed(1);
    Mlp model;
    DdpOptions o;
    o.first_bucket_cap_mb = 0.01;  // two buckets: (c, b) and (a)
    o.bucket_cap_mb = 0.01;
    o.bucket_observer = timeline_bucket_observer(&tl);
    DistributedDataParallel<MlpImpl> ddp(model.ptr(), pg, o);
    torch::Tensor loss = ddp.forward(torch::randn({8, 64})).sum();
    loss.backward();
    stats[pg.rank()] = ddp.stats();
  });
  for (int rank = 0; rank < 2; ++rank) {
    const DdpStats& s = stats[rank];
    ASSERT_EQ(s.iterations, 1);
    ASSERT_GE(s.bucket_bytes.size(), 2u);
    std::vector<std::pair<double, double>> buckets(s.bucket_bytes.size(), {-1, -1});
    nlohmann::json events = load(dir.file("rank" + std::to_string(rank) + ".json"));
    EXPECT_EQ(nesting_error(events), "");
    for (const auto& e : events) {
      if (e["ph"] != "X" || e["cat"] != "comm") continue;
      const int index = e["args"]["bucket"];
      ASSERT_LT(index, static_cast<int>(buckets.size()));
      EXPECT_EQ(e["tid"], Timeline::kBucketTrack + index);
      EXPECT_EQ(e["args"]["bytes"].get<int64_t>(), s.bucket_bytes[index]);
      buckets[index] = {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
    }
    // The reducer's rule (Note [Reducer], record_stats): the wire is serial,
    // bucket i occupies it from max(launch_i, end_{i-1}) to its completion.
    double comm_us = 0, wire_free = 0;
    for (const auto& [launch, done] : buckets) {
      ASSERT_GE(launch, 0) << "a bucket has no span";
      const double start = std::max(launch, wire_free);
      const double end = std::max(done, start);
      comm_us += end - start;
      wire_free = end;
    }
    EXPECT_NEAR(comm_us * 1e-6, s.comm_seconds, 1e-5) << "rank " << rank;
  }
}

TEST(Timeline, EachRankGetsItsOwnFileName) {
  EXPECT_EQ(timeline_path_for_rank("/t/tl.json", 0, 1), "/t/tl.json");
  EXPECT_EQ(timeline_path_for_rank("/t/tl.json", 1, 2), "/t/tl.rank1.json");
  EXPECT_EQ(timeline_path_for_rank("/t.d/tl", 1, 2), "/t.d/tl.rank1");
  EXPECT_EQ(timeline_path_for_rank("/t/r{rank}/tl.json", 3, 4), "/t/r3/tl.json");
}

TEST(TimelineMerge, RanksBecomeProcessesOfOneTrace) {
  ObserveTempDir dir;
  for (int rank = 0; rank < 3; ++rank) {
    Timeline tl(dir.file("r" + std::to_string(rank) + ".json"), TimelineOptions{rank, ""});
    TimelineSpan s(&tl, "forward");
  }
  const size_t n = merge_timelines({dir.file("r0.json"), dir.file("r1.json"), dir.file("r2.json")},
                                   dir.file("all.json"));
  nlohmann::json events = load(dir.file("all.json"));
  ASSERT_EQ(events.size(), n);
  std::map<int, std::string> names;
  std::map<int, int> forwards;
  for (const auto& e : events) {
    if (e["name"] == "process_name") names[e["pid"]] = e["args"]["name"];
    if (e["name"] == "forward") forwards[e["pid"]] += 1;
  }
  EXPECT_EQ(names, (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}, {2, "rank 2"}}));
  EXPECT_EQ(forwards, (std::map<int, int>{{0, 1}, {1, 1}, {2, 1}}));
  EXPECT_EQ(nesting_error(events), "");
}

TEST(TimelineMerge, ReadsTheFileOfARankThatDiedBeforeClosingIt) {
  ObserveTempDir dir;
  {
    Timeline tl(dir.file("r1.json"), TimelineOptions{1, ""});
    { TimelineSpan s(&tl, "forward"); }
    tl.flush();
    std::filesystem::copy_file(dir.file("r1.json"), dir.file("cut.json"));
  }
  Timeline r0(dir.file("r0.json"));
  r0.close();
  merge_timelines({dir.file("r0.json"), dir.file("cut.json")}, dir.file("all.json"));
  nlohmann::json events = load(dir.file("all.json"));
  int forwards = 0;
  for (const auto& e : events) forwards += e["name"] == "forward" && e["pid"] == 1;
  EXPECT_EQ(forwards, 1);
}

TEST(TimelineMerge, TwoFilesOfTheSameRankAreAnErrorNamingBoth) {
  ObserveTempDir dir;
  { Timeline a(dir.file("a.json")), b(dir.file("b.json")); }
  try {
    merge_timelines({dir.file("a.json"), dir.file("b.json")}, dir.file("all.json"));
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("a.json"), std::string::npos) << m;
    EXPECT_NE(m.find("b.json"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
  }
}

TEST(TimelineMerge, AFileThatIsNotATraceIsAnErrorNamingIt) {
  ObserveTempDir dir;
  { std::ofstream(dir.file("junk.json")) << "hello"; }
  try {
    merge_timelines({dir.file("junk.json")}, dir.file("all.json"));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("junk.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain
