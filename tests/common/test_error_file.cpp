// Error files in torchelastic's format: what dtrain writes, what torchrun's
// workers write, and failing quietly where a failing process cannot help it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error_file.h"

namespace dtrain::detail {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class ErrorFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dtrain_error_file_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
  fs::path dir_;
};

ErrorRecord sample() {
  ErrorRecord r;
  r.message = "dataset 'mnist': directory '/data' does not exist";
  r.error_type = "dtrain::DataError";
  r.rank = 3;
  r.local_rank = 1;
  r.host = "node7";
  r.pid = 4242;
  r.timestamp = 1700000000.75;
  return r;
}

TEST_F(ErrorFile, JsonHasTorchelasticsShapeAndDtrainsFields) {
  const json j = json::parse(to_json(sample()));
  EXPECT_EQ(j["message"]["message"],
            "dtrain::DataError: dataset 'mnist': directory '/data' does not exist");
  EXPECT_EQ(j["message"]["extraInfo"]["py_callstack"], "");
  EXPECT_EQ(j["message"]["extraInfo"]["timestamp"], "1700000000") << "a string of whole seconds";
  EXPECT_EQ(j["dtrain"]["rank"], 3);
  EXPECT_EQ(j["dtrain"]["local_rank"], 1);
  EXPECT_EQ(j["dtrain"]["host"], "node7");
  EXPECT_EQ(j["dtrain"]["pid"], 4242);
  EXPECT_EQ(j["dtrain"]["error_type"], "dtrain::DataError");
  EXPECT_EQ(j["dtrain"]["message"], "dataset 'mnist': directory '/data' does not exist");
  EXPECT_DOUBLE_EQ(j["dtrain"]["timestamp"].get<double>(), 1700000000.75);
}

TEST_F(ErrorFile, WithoutATypeTheTorchMessageIsTheMessageAlone) {
  ErrorRecord r = sample();
  r.error_type.clear();
  EXPECT_EQ(json::parse(to_json(r))["message"]["message"], r.message);
}

// Python's b"bad \xff byte, caf\xc3\xa9".decode("utf-8", errors="replace"):
// the invalid byte becomes U+FFFD (EF BF BD in UTF-8), valid UTF-8 is kept.
TEST_F(ErrorFile, InvalidUtf8InTheMessageIsReplacedNotThrown) {
  ErrorRecord r = sample();
  r.message = "bad \xff byte, caf\xc3\xa9";
  std::string text;
  ASSERT_NO_THROW(text = to_json(r));
  const json j = json::parse(text);
  EXPECT_EQ(j["dtrain"]["message"], "bad \xef\xbf\xbd byte, caf\xc3\xa9");
  EXPECT_EQ(j["message"]["message"], "dtrain::DataError: bad \xef\xbf\xbd byte, caf\xc3\xa9");
  EXPECT_EQ(text.find('\xff'), std::string::npos) << "the raw byte must not reach the file";
}

TEST_F(ErrorFile, WrittenRecordReadsBackFieldForField) {
  const fs::path p = dir_ / "a" / "b" / "error.json";  // parents are created
  ASSERT_TRUE(write_error_file(p.string(), sample()));
  auto r = read_error_file(p.string());
  ASSERT_TRUE(r.has_value());
  const ErrorRecord s = sample();
  EXPECT_EQ(r->message, s.message);
  EXPECT_EQ(r->error_type, s.error_type);
  EXPECT_EQ(r->rank, s.rank);
  EXPECT_EQ(r->local_rank, s.local_rank);
  EXPECT_EQ(r->host, s.host);
  EXPECT_EQ(r->pid, s.pid);
  EXPECT_DOUBLE_EQ(r->timestamp, s.timestamp);
  EXPECT_EQ(std::distance(fs::directory_iterator(p.parent_path()), fs::directory_iterator()), 1)
      << "no temporary file is left behind";
}

TEST_F(ErrorFile, ASecondRecordReplacesTheFirst) {
  const fs::path p = dir_ / "error.json";
  ASSERT_TRUE(write_error_file(p.string(), sample()));
  ErrorRecord later = sample();
  later.message = "second";
  ASSERT_TRUE(write_error_file(p.string(), later));
  EXPECT_EQ(read_error_file(p.string())->message, "second");
}

TEST_F(ErrorFile, TorchrunWorkersFilesAreReadFromTheirMessage) {
  // What torch.distributed.elastic's ErrorHandler.record_exception writes.
  write(
      dir_ / "torch.json",
      R"j({"message": {"message": "ValueError: loss is nan", "extraInfo": )j"
      R"j({"py_callstack": "Traceback (most recent call last):\n ...", "timestamp": "1699999999"}}})j");
  auto r = read_error_file((dir_ / "torch.json").string());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->message, "ValueError: loss is nan");
  EXPECT_EQ(r->error_type, "");
  EXPECT_EQ(r->rank, -1);
  EXPECT_EQ(r->local_rank, -1);
  EXPECT_EQ(r->pid, 0);
  EXPECT_DOUBLE_EQ(r->timestamp, 1699999999);
  // The older shape: a string message with a top-level timestamp.
  write(dir_ / "old.json", R"j({"message": "Signal 9 (SIGKILL)", "timestamp": 1699999998})j");
  auto old = read_error_file((dir_ / "old.json").string());
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->message, "Signal 9 (SIGKILL)");
  EXPECT_DOUBLE_EQ(old->timestamp, 1699999998);
}

TEST_F(ErrorFile, AbsentUnparsableOrMessagelessFilesAreNullopt) {
  EXPECT_FALSE(read_error_file((dir_ / "absent.json").string()).has_value());
  write(dir_ / "half.json", R"j({"message": {"message": "cut off)j");
  EXPECT_FALSE(read_error_file((dir_ / "half.json").string()).has_value());
  write(dir_ / "none.json", R"j({"error": "x"})j");
  EXPECT_FALSE(read_error_file((dir_ / "none.json").string()).has_value());
  write(dir_ / "array.json", "[1, 2]");
  EXPECT_FALSE(read_error_file((dir_ / "array.json").string()).has_value());
  write(dir_ / "wrong.json", R"j({"message": 3})j");
  EXPECT_FALSE(read_error_file((dir_ / "wrong.json").string()).has_value());
}

TEST_F(ErrorFile, UnwritablePathReturnsFalseWithoutThrowing) {
  // A regular file where a directory should be: fails even for root.
  write(dir_ / "file", "x");
  EXPECT_FALSE(write_error_file((dir_ / "file" / "error.json").string(), sample()));
  EXPECT_FALSE(write_error_file("", sample()));
  EXPECT_FALSE(write_error_file(dir_.string(), sample())) << "a directory is not a file";
}

// Found by the long run of fuzz/error_file.cpp (fuzz/corpus/error_file/regression-*):
// both were conversions out of range, undefined behaviour under UBSan.
TEST_F(ErrorFile, NumbersNoIntHoldsAreReadAsUnknownAndHugeTimesWriteAsZero) {
  write(dir_ / "big.json",
        R"j({"message": "m", "dtrain": {"message": "m", "rank": 1e78, "local_rank": 4294967296,
             "pid": 2.5, "timestamp": 1.7957e45}})j");
  auto r = read_error_file((dir_ / "big.json").string());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, -1);
  EXPECT_EQ(r->local_rank, -1);
  EXPECT_EQ(r->pid, 0);
  EXPECT_EQ(r->timestamp, 1.7957e45);
  const json j = json::parse(to_json(*r));
  EXPECT_EQ(j["message"]["extraInfo"]["timestamp"], "0");
  EXPECT_EQ(j["dtrain"]["timestamp"], 1.7957e45);
}

}  // namespace
}  // namespace dtrain::detail
