// The observability subcommands of the dtrain executable: exit codes,
// messages, and a real multi-process collective benchmark under dtrain run.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "observe/observe_test_util.h"

namespace dtrain {
namespace {

using testing::ObserveTempDir;
using testing::run_command;

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

Result dtrain(const std::string& args, int timeout_s = 120) {
  Result r;
  r.code = run_command("timeout -k 5 " + std::to_string(timeout_s) +
                           " " DTRAIN_BINARY_DIR "/dtrain " + args + " 2>&1",
                       &r.output);
  return r;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(TimelineMergeCli, JoinsRankFilesIntoOneTrace) {
  ObserveTempDir dir;
  write(dir.file("r0.json"),
        R"([{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"rank 0"}},)"
        R"({"name":"forward","cat":"train","ph":"X","ts":1.0,"dur":2.0,"pid":0,"tid":0}])");
  write(dir.file("r1.json"),  // cut off: no closing bracket
        "[{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"rank "
        "1\"}},\n"
        "{\"name\":\"forward\",\"cat\":\"train\",\"ph\":\"X\",\"ts\":1.5,\"dur\":2.0,\"pid\":1,"
        "\"tid\":0},\n");
  Result r = dtrain("timeline merge " + dir.file("r0.json") + " " + dir.file("r1.json") + " -o " +
                    dir.file("all.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("4 events from 2 files"), std::string::npos) << r.output;
  auto events = nlohmann::json::parse(testing::slurp(dir.file("all.json")));
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[3]["pid"], 1);
}

TEST(TimelineMergeCli, SameRankTwiceIsAUsageErrorNamingBothFiles) {
  ObserveTempDir dir;
  const std::string one = R"([{"name":"forward","ph":"X","ts":1,"dur":1,"pid":0,"tid":0}])";
  write(dir.file("a.json"), one);
  write(dir.file("b.json"), one);
  Result r = dtrain("timeline merge " + dir.file("a.json") + " " + dir.file("b.json") + " -o " +
                    dir.file("all.json"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("a.json' and '"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("one file per rank"), std::string::npos) << r.output;
}

TEST(BenchCollectiveCli, UnknownCollectiveIsAUsageError) {
  Result r = dtrain("bench collective allscatter");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown collective 'allscatter'"), std::string::npos) << r.output;
}

TEST(BenchCollectiveCli, BadSizeRangeIsAUsageError) {
  Result r = dtrain("bench collective -b 1M -e 1K");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("bad size range"), std::string::npos) << r.output;
  r = dtrain("bench collective -b 12Q");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("bad byte size '12Q'"), std::string::npos) << r.output;
}

// Three worker processes under the launcher; the table is nccl-tests' and
// every element is right.
TEST(BenchCollectiveCli, ReduceScatterOverThreeProcessesPrintsNcclTestsTableWithNoWrongElement) {
  Result r = dtrain("run --nproc-per-node 3 -- " DTRAIN_BINARY_DIR
                    "/dtrain bench collective reduce_scatter -b 1K -e 64K -f 4 -n 5 -w 1",
                    180);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(
      r.output.find(
          "#       size         count      type   redop    root     time   algbw   busbw #wrong"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("# Out of bounds values : 0 OK"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("float     sum      -1"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dtrain
