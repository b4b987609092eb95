// The rendezvous values kept in the store, decoded from what another program
// (or a corrupted store) may have written there: malformed values are one
// StoreError naming where, never a silently different number. Inputs found by
// fuzz/rdzv_state.cpp are in fuzz/corpus/rdzv_state/.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "dtrain/errors.h"
#include "launch/rendezvous/state.h"

namespace dtrain::detail {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string error_of(const std::string& text, int which) {
  try {
    if (which == 0) RoundState::decode(text, "etcd key x");
    if (which == 1) NodeRecord::decode(text, "etcd key x");
    return "";
  } catch (const StoreError& e) {
    return e.what();
  }
}

TEST(RendezvousState, NumbersAnIntCannotHoldAreRejectedNotNarrowed) {
  EXPECT_THAT(error_of("4294967297 open", 0), HasSubstr("is malformed"));
  EXPECT_THAT(error_of("3 complete 4294967298 5", 0), HasSubstr("is malformed"));
  EXPECT_THAT(error_of("n0\t10.0.0.1:1\t4294967297\t-1", 1), HasSubstr("is malformed"));
  EXPECT_THAT(error_of("n0\t10.0.0.1:1\t4\t-2", 1), HasSubstr("is malformed"));
  EXPECT_THAT(error_of("n0\t10.0.0.1:1\t4\t2147483648", 1), HasSubstr("is malformed"));
  EXPECT_EQ(RoundState::decode("2147483647 open", "x").round, 2147483647);
  EXPECT_EQ(NodeRecord::decode("n0\t10.0.0.1:1\t8\t-1", "x").local_world_size, 8);
}

TEST(RendezvousState, ControlBytesInAValueAreQuotedSoTheMessageKeepsWhereAndTheFix) {
  const std::string with_nul("\n\0003 open", 8);
  const std::string error = error_of(with_nul, 0);
  EXPECT_THAT(error, HasSubstr("'\\x0a\\x003 open' at etcd key x is malformed"));
  EXPECT_THAT(error, HasSubstr("use a fresh LaunchOptions::run_id"));
  EXPECT_THAT(error, Not(HasSubstr("\n")));
}

}  // namespace
}  // namespace dtrain::detail
