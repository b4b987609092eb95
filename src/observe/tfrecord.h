#pragma once
// TFRecord framing, the container of TensorBoard's event files:
//   [length u64 LE][masked CRC-32C of length][data][masked CRC-32C of data]
// with mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8. Torch-free.

#include <cstdint>
#include <string>
#include <string_view>

namespace dtrain::detail {

/// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), as TensorFlow's
/// crc32c::Value: crc32c("123456789") == 0xe3069283.
uint32_t crc32c(std::string_view data);

/// TensorFlow's crc32c::Mask.
uint32_t mask_crc(uint32_t crc);

/// Appends one framed record holding `data` to `out`.
void append_tfrecord(std::string& out, std::string_view data);

}  // namespace dtrain::detail
