// The header examples are compiled when this test is built (Note [Header
// examples] in tests/api/CMakeLists.txt); here their count is checked against
// the headers, so that no marked example escapes compilation.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "header_examples_count.h"  // generated with the examples

namespace {

int marked_examples() {
  int n = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(DTRAIN_SOURCE_DIR "/include/dtrain")) {
    if (entry.path().extension() != ".h") continue;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      const auto start = line.find_first_not_of(" \t");
      if (start != std::string::npos &&
          line.compare(start, std::string::npos, "/// Example:") == 0) {
        ++n;
      }
    }
  }
  return n;
}

TEST(HeaderExamples, EveryMarkedExampleInTheHeadersIsCompiledIntoThisTest) {
  const int marked = marked_examples();
  EXPECT_GT(marked, 0);
  EXPECT_EQ(DTRAIN_HEADER_EXAMPLE_COUNT, marked);
}

}  // namespace
