#pragma once
// MXNet's 2-bit gradient compression with error feedback
// (src/kvstore/gradient_compression-inl.h).
//
// Note [2-bit compression]
// The worker adds the gradient to a residual it keeps per key; an element
// whose residual reaches +threshold is sent as +threshold (bits 11) and the
// threshold is subtracted, one at or below -threshold as -threshold (bits
// 10), anything else as 0 (bits 00) and stays in the residual. Four values
// per byte, value i in byte i/4 at bits 7-6, 5-4, 3-2, 1-0 for i%4 = 0..3,
// so 16 values per float: n values take ceil(n/16) floats. A compressed push
// (request type 2) carries two keys, a length-0 "meta" key whose offset in
// the server's range is the part's original element count, then the data
// key; big arrays are split on multiples of 16 values (MXNet's
// EncodeCompressedKey). The servers dequantize and go on as for a default
// push. Pulls are not compressed. The servers learn the threshold from
// kSetGradientCompression, whose body is "<type>,<threshold>" with type 2
// for 2-bit (MXNet's EncodeParams).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dtrain::ps {

/// MXNet's CompressionType values.
constexpr int kCompressionNone = 0;
constexpr int kCompressionTwoBit = 2;

/// Floats that carry n values.
inline size_t compressed_floats(size_t n) { return (n + 15) / 16; }

/// Quantizes grad[0..n) with `residual` (updated) into `out`
/// (compressed_floats(n) * 4 bytes, overwritten).
void quantize_2bit(const float* grad, float* residual, size_t n, float threshold, char* out);

/// Expands `in` (compressed_floats(n) * 4 bytes) into out[0..n).
void dequantize_2bit(const char* in, size_t n, float threshold, float* out);

/// "2,0.5" for a threshold of 0.5 (MXNet's EncodeParams).
std::string encode_compression_params(int type, float threshold);
/// Parses EncodeParams' text; false when malformed.
bool decode_compression_params(std::string_view text, int* type, float* threshold);

}  // namespace dtrain::ps
