// Note [2-bit compression] (compression.h).
#include "ps/wire/compression.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/kvstore.h"

namespace dtrain::ps {
namespace {
constexpr uint8_t kPosBits[4] = {0xc0, 0x30, 0x0c, 0x03};
constexpr uint8_t kNegBits[4] = {0x80, 0x20, 0x08, 0x02};
}  // namespace

void quantize_2bit(const float* grad, float* residual, size_t n, float threshold, char* out) {
  std::memset(out, 0, compressed_floats(n) * 4);
  auto* bytes = reinterpret_cast<uint8_t*>(out);
  for (size_t i = 0; i < n; ++i) {
    residual[i] += grad[i];
    if (residual[i] >= threshold) {
      bytes[i >> 2] |= kPosBits[i & 3];
      residual[i] -= threshold;
    } else if (residual[i] <= -threshold) {
      bytes[i >> 2] |= kNegBits[i & 3];
      residual[i] += threshold;
    }
  }
}

void dequantize_2bit(const char* in, size_t n, float threshold, float* out) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(in);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t masked = bytes[i >> 2] & kPosBits[i & 3];
    out[i] = masked == kPosBits[i & 3] ? threshold : masked == kNegBits[i & 3] ? -threshold : 0.0f;
  }
}

std::string encode_compression_params(int type, float threshold) {
  if (type == kCompressionNone) return "0";
  std::ostringstream out;
  out << type << "," << std::to_string(threshold);  // std::to_string, as MXNet writes it
  return out.str();
}

bool decode_compression_params(std::string_view text, int* type, float* threshold) {
  const auto parts = split(text, ',');
  long long t = 0;
  if (parts.empty() || parts.size() > 2 || !parse_int(parts[0], &t) || t < 0 || t > 2) return false;
  *type = static_cast<int>(t);
  if (parts.size() == 2 && !parts[1].empty()) {
    double v = 0;
    if (!parse_double(parts[1], &v) || !std::isfinite(v) || v <= 0) return false;
    *threshold = static_cast<float>(v);
  }
  return true;
}

}  // namespace dtrain::ps

namespace dtrain {

std::string to_string(GradientCompressionType type) {
  return type == GradientCompressionType::k2Bit ? "2bit" : "none";
}

GradientCompressionType parse_gradient_compression_type(const std::string& name) {
  for (GradientCompressionType t :
       {GradientCompressionType::kNone, GradientCompressionType::k2Bit}) {
    if (name == to_string(t)) return t;
  }
  throw InvalidArgument(cat("unknown gradient compression '", name, "'; use none or 2bit"));
}

}  // namespace dtrain
