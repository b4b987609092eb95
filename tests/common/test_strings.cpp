// cat() appends text and integers without a stream (Note [cat without a
// stream] in src/common/strings.h): each case must give what an
// ostringstream gives, which is what cat() gave before.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <iomanip>
#include <sstream>
#include <string>
#include <string_view>

#include "common/strings.h"

namespace dtrain {
namespace {

template <typename... Args>
std::string streamed(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

TEST(Cat, TextCharsAndIntegersMatchAnOstringstream) {
  const std::string s = "key";
  const std::string_view v = "view";
  const char* c = "c-string";
  char* null = nullptr;
  EXPECT_EQ(cat("a", s, v, c, 'x', null, "!"), streamed("a", s, v, c, 'x', "!"));
  EXPECT_EQ(cat(0, -1, INT_MIN, LLONG_MIN, ULLONG_MAX, short{-7}, uint16_t{65535}),
            streamed(0, -1, INT_MIN, LLONG_MIN, ULLONG_MAX, short{-7}, uint16_t{65535}));
  EXPECT_EQ(cat("bytes=", uint64_t{0}, "-", uint64_t{88199}), "bytes=0-88199");
  EXPECT_EQ(cat(size_t{12}, " of ", int64_t{-3}), streamed(size_t{12}, " of ", int64_t{-3}));
  EXPECT_EQ(cat(), "");
}

TEST(Cat, OtherTypesAndManipulatorsKeepTheStreamsMeaning) {
  EXPECT_EQ(cat("0x", std::hex, 255, std::dec, " ", 10), "0xff 10");
  EXPECT_EQ(cat(true, " ", 1.5, " ", 0.1f), streamed(true, " ", 1.5, " ", 0.1f));
  EXPECT_EQ(cat(uint8_t{65}, int8_t{66}), "AB");  // character types stream as characters
}

}  // namespace
}  // namespace dtrain
