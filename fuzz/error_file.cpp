// Fuzz target: the error file a failing worker leaves for its launcher
// (src/common/error_file.h): dtrain's own records and torchelastic's
// (@record) in both of its shapes.
//
// Checks beyond "no crash": read_error_file never throws, and a record it
// accepts survives to_json -> read_error_file with every field unchanged.
#include <cmath>
#include <cstdint>
#include <string>

#include "common/error_file.h"
#include "fuzz/fuzz_util.h"

using dtrain::detail::ErrorRecord;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<ErrorRecord> record;
  {
    dtrain::fuzz::MemFile file(std::string_view(reinterpret_cast<const char*>(data), size));
    try {
      record = dtrain::detail::read_error_file(file.path());
    } catch (...) {
      dtrain::fuzz::fail("read_error_file threw");
    }
  }
  if (!record) return 0;
  dtrain::fuzz::MemFile again_file(dtrain::detail::to_json(*record));
  auto again = dtrain::detail::read_error_file(again_file.path());
  if (!again) dtrain::fuzz::fail("read_error_file rejects to_json's output");
  const bool same_time = again->timestamp == record->timestamp ||
                         (std::isnan(again->timestamp) && std::isnan(record->timestamp));
  if (again->message != record->message || again->error_type != record->error_type ||
      again->rank != record->rank || again->local_rank != record->local_rank ||
      again->host != record->host || again->pid != record->pid || !same_time) {
    dtrain::fuzz::fail("a record changed through to_json -> read_error_file");
  }
  return 0;
}
