#include "observe/tfrecord.h"

#include <array>

namespace dtrain::detail {
namespace {

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char byte : data) crc = kTable[(crc ^ byte) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

void append_tfrecord(std::string& out, std::string_view data) {
  std::string length;
  append_le(length, data.size(), 8);
  out += length;
  append_le(out, mask_crc(crc32c(length)), 4);
  out.append(data.data(), data.size());
  append_le(out, mask_crc(crc32c(data)), 4);
}

}  // namespace dtrain::detail
