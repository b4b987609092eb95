// The line relay (line_relay.h): a worker's output re-emitted one prefixed
// line at a time, and unprefixed to its log file.

#include <gtest/gtest.h>

#include <string>

#include "launch/launch_test_util.h"
#include "launch/process/line_relay.h"

namespace dtrain::detail {
namespace {

using dtrain::testing::read_file;
using dtrain::testing::TempDir;

class LineRelayTest : public ::testing::Test {
 protected:
  LineRelayTest() : dest_(open_log_file(dir_.file("dest"))) {}
  std::string drain() { return read_file(dir_.file("dest")); }
  TempDir dir_;
  Fd dest_;
};

TEST_F(LineRelayTest, EmitsOnlyCompleteLinesUntilFinished) {
  LineRelay relay("[rank3]: ", dest_.get());
  relay.feed("ab");
  relay.feed("c\nde");
  relay.feed("f\n\ng");
  relay.finish();
  EXPECT_EQ(drain(), "[rank3]: abc\n[rank3]: def\n[rank3]: \n[rank3]: g\n");
}

TEST_F(LineRelayTest, CutsOverlongLines) {
  LineRelay relay("> ", dest_.get());
  relay.feed(std::string(LineRelay::kMaxLine + 10, 'x'));
  relay.finish();
  std::string out = drain();
  EXPECT_EQ(out,
            "> " + std::string(LineRelay::kMaxLine, 'x') + "\n> " + std::string(10, 'x') + "\n");
}

TEST_F(LineRelayTest, WritesUnprefixedLinesToTheLogFile) {
  {
    LineRelay relay("[rank0]: ", dest_.get(), open_log_file(dir_.file("log")));
    relay.feed("one\ntwo");
    relay.finish();
  }
  EXPECT_EQ(drain(), "[rank0]: one\n[rank0]: two\n");
  EXPECT_EQ(read_file(dir_.file("log")), "one\ntwo\n");
}

}  // namespace
}  // namespace dtrain::detail
