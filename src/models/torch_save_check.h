#pragma once
// A check of torch.save files (zip + pickle) before LibTorch reads them.
//
// LibTorch's zip reader and unpickler are not hardened against malformed
// input: fuzzing found crashes in both (pytorch/pytorch#77573, #103667,
// #109791), and Debian's 1.13 has them. dtrain therefore walks the bytes
// itself first -- the zip's directory, every entry's bounds and CRC-32, the
// pickle's opcodes, stack and memo, and that every tensor's persistent
// storage exists and is large enough for the view built on it -- and hands
// only files that pass to torch::pickle_load. Torch-free (bytes in, error
// out), so fuzz/torch_save.cpp fuzzes it without LibTorch.

#include <cstddef>
#include <optional>
#include <string>

namespace dtrain::detail {

/// Throws DataError "<origin>: <what is wrong> at byte <offset>" (one line)
/// when `data` is not a torch.save zip archive whose data.pkl only uses the
/// opcodes LibTorch's unpickler reads, keeps its stack and memo consistent,
/// and references storages that exist and hold the elements its tensors
/// address. Never reads outside [data, data + size). Bytes that do not start
/// with a zip's local header ("PK\3\4") are rejected too; callers that want
/// to name other forms (legacy torch.save pickles) test for those first.
void check_torch_save(const char* data, size_t size, const std::string& origin);

/// The same check, returning the problem ("<what> at byte <offset>") instead
/// of throwing; nullopt when the file passes.
std::optional<std::string> torch_save_problem(const char* data, size_t size);

/// True when `data` starts with a zip's local header, as torch.save files do.
inline bool looks_like_zip(const char* data, size_t size) {
  return size >= 4 && data[0] == 'P' && data[1] == 'K' && data[2] == 3 && data[3] == 4;
}

}  // namespace dtrain::detail
