// Fuzz target: what a ps-lite peer sends before any data frame is looked at:
// the ROUTER's identity frame ("ps<id>") and the PBMeta frame (src/ps/protocol.h).
//
// Input: byte 0 is the identity's length L, then L bytes of identity, then the
// meta frame. Checks beyond "no crash": a rejected meta has a reason, and an
// accepted one re-encodes to bytes that decode to the same encoding (the
// codec's canonical form is a fixed point).
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "ps/wire/protocol.h"

using namespace dtrain::ps;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t id_len = std::min<size_t>(static_cast<uint8_t>(in[0]), in.size() - 1);
  const std::string_view id = in.substr(1, id_len);
  const std::string_view meta_bytes = in.substr(1 + id_len);

  // Leading zeros are accepted ("ps09" is node 9), as ps-lite's ZMQVan
  // accepts them; what must hold is that a parsed id prints back to itself.
  const int sender = parse_identity(id);
  if (sender != kEmpty && parse_identity(identity(sender)) != sender) {
    dtrain::fuzz::fail("identity '" + std::string(id) + "' parsed as node " +
                       std::to_string(sender) + ", which does not round-trip");
  }
  std::string error;
  auto meta = decode_meta(meta_bytes, &error);
  if (!meta) {
    if (error.empty()) dtrain::fuzz::fail("decode_meta rejected a frame without a reason");
    return 0;
  }
  const std::string once = encode_meta(*meta);
  std::string again_error;
  auto again = decode_meta(once, &again_error);
  if (!again) dtrain::fuzz::fail("decode_meta rejects encode_meta's output: " + again_error);
  if (encode_meta(*again) != once) dtrain::fuzz::fail("encode(decode(encode(m))) != encode(m)");
  return 0;
}
