// dtrain's check of torch.save files before LibTorch's reader sees them
// (src/models/torch_save_check.h): real torch.save files pass, damaged ones
// are one line naming the file and a byte offset. The files are the fuzz
// corpus (fuzz/corpus/torch_save): torch.save output of python3-torch 1.13
// and the inputs the fuzzer found.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "dtrain/errors.h"
#include "models/torch_save_check.h"

namespace dtrain::detail {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

const fs::path kCorpus = fs::path(DTRAIN_SOURCE_DIR) / "fuzz" / "corpus" / "torch_save";

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string error_of(const std::string& bytes) {
  try {
    check_torch_save(bytes.data(), bytes.size(), "w.pt");
    return "";
  } catch (const DataError& e) {
    return e.what();
  }
}

TEST(TorchSaveCheck, EveryFileTorchSaveWroteIsAccepted) {
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(kCorpus)) {
    if (entry.path().extension() != ".pt") continue;
    EXPECT_EQ(torch_save_problem(read(entry.path()).data(), fs::file_size(entry.path())),
              std::nullopt)
        << entry.path();
    ++checked;
  }
  EXPECT_GE(checked, 9);
}

TEST(TorchSaveCheck, AChangedStorageByteFailsItsCrcNamingTheEntryAndOffset) {
  std::string bytes = read(kCorpus / "plain-dict.pt");
  const std::string name = "plain-dict/data/0";
  const size_t at = bytes.find(name);  // in its local header, before the directory
  ASSERT_NE(at, std::string::npos);
  // The bytes follow the name and the extra field, whose length precedes the name.
  const size_t data = at + name.size() + static_cast<uint8_t>(bytes[at - 2]) +
                      256 * static_cast<uint8_t>(bytes[at - 1]);
  bytes[data] ^= 1;
  EXPECT_THAT(error_of(bytes),
              MatchesRegex("w\\.pt: entry 'plain-dict/data/0' fails its CRC-32 at byte [0-9]+; the "
                           "file is damaged or not written by torch\\.save"));
}

TEST(TorchSaveCheck, TruncatedAndNonZipFilesAreOneLineErrors) {
  const std::string bytes = read(kCorpus / "plain-dict.pt");
  for (size_t keep : {size_t{0}, size_t{3}, size_t{100}, bytes.size() / 2, bytes.size() - 1}) {
    const std::string error = error_of(bytes.substr(0, keep));
    EXPECT_THAT(error, HasSubstr("w.pt: ")) << keep;
    EXPECT_THAT(error, HasSubstr(" at byte ")) << keep;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(TorchSaveCheck, InputsTheFuzzerFoundAreRejectedAsOneLine) {
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(kCorpus)) {
    if (entry.path().filename().string().rfind("regression-", 0) != 0) continue;
    const std::string error = error_of(read(entry.path()));
    EXPECT_THAT(error, HasSubstr(" at byte ")) << entry.path();
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    EXPECT_EQ(error.find('\0'), std::string::npos) << entry.path();
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

}  // namespace
}  // namespace dtrain::detail
