// Fuzz target: the torch.save check and LibTorch's reader behind it
// (src/models/weights.cpp's order): a file that passes check_torch_save goes
// to torch::jit::pickle_load, which may throw but must not crash. A crash
// here is an input the check should have refused: LibTorch's zip reader and
// unpickler are uninstrumented, so a finding shows as a SEGV or an abort.
//
// Inputs as fuzz/torch_save.cpp's (zip CRCs recomputed); the seeds are its
// corpus (scripts/fuzz.sh uses fuzz/corpus/torch_save for both).
#include <cstdint>
#include <exception>
#include <vector>

#include <torch/csrc/jit/serialization/pickle.h>

#include "dtrain/errors.h"
#include "fuzz/zip_crc.h"
#include "models/torch_save_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> file(data, data + size);
  dtrain::fuzz::fix_zip_crcs(file);
  const char* bytes = reinterpret_cast<const char*>(file.data());
  if (!dtrain::detail::looks_like_zip(bytes, file.size()) ||
      dtrain::detail::torch_save_problem(bytes, file.size())) {
    return 0;
  }
  try {
    torch::jit::pickle_load(std::vector<char>(bytes, bytes + file.size()));
  } catch (const std::exception&) {
  }
  return 0;
}
