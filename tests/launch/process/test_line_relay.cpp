// The line relay (line_relay.h): a worker's output re-emitted one prefixed
// line at a time, and unprefixed to its log file; lines redrawn in place
// ("\r") pass through with the prefix when the destination is a terminal.

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
  static std::shared_ptr<TerminalLine> terminal() { return std::make_shared<TerminalLine>(); }
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

// What dtrain train's ProgressLine writes in place (src/train/progress.cpp),
// fed in the pieces a pipe may deliver.
TEST_F(LineRelayTest, PassesRedrawsInPlaceThroughWithThePrefixWhenAskedTo) {
  {
    LineRelay relay("[rank0]: ", dest_.get(), open_log_file(dir_.file("log")), terminal());
    relay.feed("header\n\r  step 1/3\x1b[K");
    relay.feed("\r  step 2/3\x1b[K\r  st");
    relay.feed("ep 3/3\x1b[K");
    relay.feed("\r\x1b[K");
    relay.feed("epoch 1/1  loss 0.5\n");
    relay.feed("\r  step 1/3\x1b[K");  // a worker that dies mid-line
    relay.finish();
  }
  EXPECT_EQ(drain(),
            "[rank0]: header\n"
            "\r[rank0]:   step 1/3\x1b[K"
            "\r[rank0]:   step 2/3\x1b[K\r[rank0]:   st"
            "\r[rank0]:   step 3/3\x1b[K"
            "\r[rank0]: \x1b[K"
            "\r[rank0]: \x1b[Kepoch 1/1  loss 0.5\n"
            "\r[rank0]:   step 1/3\x1b[K"
            "\r[rank0]:   step 1/3\x1b[K\n");
  EXPECT_EQ(read_file(dir_.file("log")), "header\n\x1b[Kepoch 1/1  loss 0.5\n  step 1/3\x1b[K\n");
}

TEST_F(LineRelayTest, TextBeforeACarriageReturnIsDrawnAndCrLfEndsTheLine) {
  LineRelay relay("> ", dest_.get(), Fd(), terminal());
  relay.feed("10%\r20%\r");
  relay.feed("done\r\n");
  relay.finish();
  EXPECT_EQ(drain(), "\r> 10%\r> 20%\r> done\r> \n");
}

TEST_F(LineRelayTest, ARedrawSplitInsideAnEscapeSequenceWaitsForTheRestOfIt) {
  LineRelay relay("> ", dest_.get(), Fd(), terminal());
  relay.feed("\r  step 1\x1b");
  relay.feed("[");
  relay.feed("K");
  relay.feed("\r\x1b[2");
  relay.feed("K\n");
  relay.finish();
  EXPECT_EQ(drain(), "\r>   step 1\r>   step 1\x1b[K\r> \x1b[2K\n");
}

TEST_F(LineRelayTest, AnotherRelaysOutputEndsTheLineDrawnInPlaceFirst) {
  auto shared = terminal();
  LineRelay rank0("[rank0]: ", dest_.get(), Fd(), shared);
  LineRelay rank1("[rank1]: ", dest_.get(), Fd(), shared);
  rank0.feed("\r  step 1/3");
  rank1.feed("warning\n");
  rank0.feed("\r  step 2/3");
  rank1.feed("\rrank 1 draws too");
  rank0.feed("\n");
  rank1.finish();
  EXPECT_EQ(drain(),
            "\r[rank0]:   step 1/3"
            "\n[rank1]: warning\n"
            "\r[rank0]:   step 2/3"
            "\n\r[rank1]: rank 1 draws too"
            "\n[rank0]:   step 2/3\n"
            "[rank1]: rank 1 draws too\n");
}

TEST_F(LineRelayTest, KeepsCarriageReturnsInsideTheLineWithoutRedraws) {
  LineRelay relay("> ", dest_.get());
  relay.feed("a\rb\n");
  relay.finish();
  EXPECT_EQ(drain(), "> a\rb\n");
}

}  // namespace
}  // namespace dtrain::detail
