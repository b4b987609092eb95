#pragma once
// Rewrites the CRC-32s of a zip's stored entries to match their bytes, so
// mutated torch.save files get past the CRC check (fuzz/torch_save*.cpp).

#include <zlib.h>

#include <cstdint>
#include <vector>

namespace dtrain::fuzz {

inline uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Rewrites the CRC-32 of every stored entry whose headers are in bounds
// (no Zip64: the seeds are small).
inline void fix_zip_crcs(std::vector<uint8_t>& z) {
  const size_t n = z.size();
  if (n < 22) return;
  size_t end = n;
  for (size_t at = n - 22;; --at) {
    if (le(&z[at], 4) == 0x06054b50) {
      end = at;
      break;
    }
    if (at == 0 || n - at > 22 + 0xffff) return;
  }
  const uint64_t count = le(&z[end + 10], 2);
  uint64_t at = le(&z[end + 16], 4);
  for (uint64_t i = 0; i < count && at + 46 <= end; ++i) {
    if (le(&z[at], 4) != 0x02014b50) return;
    const uint64_t size = le(&z[at + 20], 4);
    const uint64_t local = le(&z[at + 42], 4);
    const uint64_t next = at + 46 + le(&z[at + 28], 2) + le(&z[at + 30], 2) + le(&z[at + 32], 2);
    if (local + 30 <= n) {
      const uint64_t data = local + 30 + le(&z[local + 26], 2) + le(&z[local + 28], 2);
      if (data <= n && size <= n - data) {
        const uint32_t crc = static_cast<uint32_t>(crc32_z(0L, &z[data], size));
        put32(&z[at + 16], crc);
        put32(&z[local + 14], crc);
      }
    }
    at = next;
  }
}

}  // namespace dtrain::fuzz
