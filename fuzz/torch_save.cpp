// Fuzz target: dtrain's check of torch.save files (src/models/torch_save_check.h),
// the gate in front of LibTorch's zip reader and unpickler for weights and
// checkpoints.
//
// Before checking, the harness rewrites each entry's CRC-32 (central and local
// headers) to match the entry's bytes, so mutations of data.pkl reach the
// pickle walk instead of stopping at the CRC. Every rejection must be one
// DataError line naming the file and a byte offset.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dtrain/errors.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/zip_crc.h"
#include "models/torch_save_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> file(data, data + size);
  dtrain::fuzz::fix_zip_crcs(file);
  try {
    dtrain::detail::check_torch_save(reinterpret_cast<const char*>(file.data()), file.size(),
                                     "weights.pt");
  } catch (const dtrain::DataError& e) {
    const std::string what = e.what();
    if (what.rfind("weights.pt: ", 0) != 0 || what.find(" at byte ") == std::string::npos ||
        what.find('\n') != std::string::npos) {
      dtrain::fuzz::fail("not a one-line error naming the file and offset: " + what);
    }
  }
  return 0;
}
