// The scaling table and plot: ideal line and efficiency from the smallest
// run, and an SVG that an XML parser accepts whose points equal the table.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "dtrain/bench.h"
#include "dtrain/errors.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

using testing::error_of;

std::string result(int world, double ips, double step_ms, const std::string& model = "cnn") {
  return nlohmann::json{{"model", model},
                        {"world_size", world},
                        {"images_per_sec", ips},
                        {"step_ms", step_ms},
                        {"batch_size", 64}}
      .dump();
}

TEST(Scaling, IdealAndEfficiencyComeFromTheSmallestRun) {
  ScalingTable t =
      scaling_table_from_results({result(4, 1400, 183), result(1, 400, 160), result(2, 760, 168)});
  ASSERT_EQ(t.points.size(), 3u);
  EXPECT_EQ(t.points[0].procs, 1);
  EXPECT_EQ(t.points[2].procs, 4);
  EXPECT_DOUBLE_EQ(t.ideal_images_per_sec(t.points[2]), 1600);
  EXPECT_DOUBLE_EQ(t.efficiency(t.points[1]), 0.95);
  EXPECT_DOUBLE_EQ(t.epoch_seconds(t.points[0]), 150);  // 60000 / 400
}

TEST(Scaling, TwoResultsOfOneWorldSizeAreAnError) {
  const std::string m = error_of([] {
    scaling_table_from_results({result(2, 1, 1), result(2, 2, 2)});
  });
  EXPECT_NE(m.find("two results for 2 processes"), std::string::npos) << m;
}

TEST(Scaling, AnObjectThatIsNotABenchResultIsAnError) {
  const std::string m = error_of([] { scaling_table_from_results({R"({"hello": 1})"}); });
  EXPECT_NE(m.find("is not a 'dtrain bench ddp --json' result"), std::string::npos) << m;
}

TEST(Scaling, SvgIsWellFormedAndItsPointsEqualTheJson) {
  if (!std::filesystem::exists("/usr/bin/python3"))
    GTEST_SKIP() << "no /usr/bin/python3 for its XML parser";
  ScalingTable t =
      scaling_table_from_results({result(1, 400, 160), result(2, 760, 168), result(4, 1400, 183)});
  nlohmann::json table = nlohmann::json::parse(to_json(t));
  char dir[] = "/tmp/dtrain-scaling-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string svg = std::string(dir) + "/scaling.svg";
  std::ofstream(svg) << scaling_svg(t);
  std::string out;
  {
    FILE* p = ::popen(
        ("/usr/bin/python3 " DTRAIN_SOURCE_DIR "/tests/measure/svg_points.py " + svg).c_str(), "r");
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ASSERT_EQ(::pclose(p), 0) << out;
  }
  std::filesystem::remove_all(dir);
  nlohmann::json plot = nlohmann::json::parse(out);
  EXPECT_EQ(plot["ideal_lines"], 2);
  EXPECT_EQ(plot["labels"], (nlohmann::json{"100%", "95%", "88%"}));
  std::map<std::string, std::vector<nlohmann::json>> series;
  for (const auto& p : plot["points"]) series[p["series"]].push_back(p);
  ASSERT_EQ(series["images_per_sec"].size(), 3u);
  ASSERT_EQ(series["epoch_seconds"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto& row = table["points"][i];
    EXPECT_EQ(series["images_per_sec"][i]["procs"], row["procs"]);
    EXPECT_NEAR(series["images_per_sec"][i]["value"].get<double>(),
                row["images_per_sec"].get<double>(), 1e-3);
    EXPECT_NEAR(series["epoch_seconds"][i]["value"].get<double>(),
                row["epoch_seconds"].get<double>(), 1e-3);
  }
  // Higher throughput is drawn higher (smaller y), more processes further right.
  EXPECT_LT(series["images_per_sec"][2]["cy"].get<double>(),
            series["images_per_sec"][0]["cy"].get<double>());
  EXPECT_GT(series["images_per_sec"][2]["cx"].get<double>(),
            series["images_per_sec"][0]["cx"].get<double>());
}

TEST(Scaling, SvgRendersInHeadlessChromiumWithEveryPointWhereTheSvgPutsIt) {
  const char* chromium = "/usr/bin/chromium";
  if (!std::filesystem::exists(chromium))
    GTEST_SKIP() << "no " << chromium << " (Debian's chromium)";
  if (std::system("/usr/bin/python3 -c 'import PIL' 2>/dev/null") != 0)
    GTEST_SKIP() << "no python3-pil to read the PNG";
  ScalingTable t =
      scaling_table_from_results({result(1, 400, 160), result(2, 760, 168), result(4, 1400, 183)});
  char dir[] = "/tmp/dtrain-scaling-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string svg = std::string(dir) + "/scaling.svg";
  std::ofstream(svg) << scaling_svg(t);
  std::string out;
  {
    FILE* p = ::popen(("HOME=" + std::string(dir) +
                       " timeout -k 5 120 /usr/bin/python3 " DTRAIN_SOURCE_DIR
                       "/tests/measure/svg_render_check.py " +
                       svg + " " + chromium + " " + dir + "/scaling.png")
                          .c_str(),
                      "r");
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ASSERT_EQ(::pclose(p), 0) << out;
  }
  std::filesystem::remove_all(dir);
  nlohmann::json r = nlohmann::json::parse(out);
  EXPECT_EQ(r["points"], 6) << out;  // images/sec and epoch time at 1, 2, 4 processes
  EXPECT_TRUE(r["wrong"].empty()) << out;
  EXPECT_GT(r["non_white"].get<int>(), 1000) << out;
}

}  // namespace
}  // namespace dtrain
