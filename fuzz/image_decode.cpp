// Fuzz target: JPEG and PNG decoding as the image pipeline does it
// (src/data/image/decode.cpp, transform.cpp): the header probe, the full
// decode, and RandomResizedCrop's region decode (DCT downscaling plus a
// region of interest) followed by the crop/resize/flip render.
//
// Input: byte 0 holds flags (bit 0: random flip, bit 1: DCT scaling), bytes
// 1-8 the sample's seed, the rest is the file. PNG chunk CRCs are recomputed
// before decoding, so mutations of chunk contents reach libpng's parser and
// dtrain's conversions instead of failing the CRC check. Every rejection must
// be a DataError; an accepted image must have the size its header announced.
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dtrain/errors.h"
#include "dtrain/image.h"
#include "fuzz/fuzz_util.h"

using dtrain::fuzz::fail;

namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

/// Rewrites every complete chunk's CRC-32 (over type and data) in place.
void fix_png_crcs(std::vector<uint8_t>& png) {
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (png.size() < 8 || std::memcmp(png.data(), kSignature, 8) != 0) return;
  size_t at = 8;
  while (at + 12 <= png.size()) {
    const uint32_t length = be32(&png[at]);
    if (length > png.size() - at - 12) return;
    const uint32_t crc = static_cast<uint32_t>(crc32(0L, &png[at + 4], length + 4));
    uint8_t* out = &png[at + 8 + length];
    out[0] = static_cast<uint8_t>(crc >> 24);
    out[1] = static_cast<uint8_t>(crc >> 16);
    out[2] = static_cast<uint8_t>(crc >> 8);
    out[3] = static_cast<uint8_t>(crc);
    at += 12 + length;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 9) return 0;
  const uint8_t flags = data[0];
  uint64_t seed = 0;
  std::memcpy(&seed, data + 1, 8);
  std::vector<uint8_t> file(data + 9, data + size);
  fix_png_crcs(file);

  dtrain::ImageInfo info;
  try {
    info = dtrain::probe_image(file.data(), file.size());
  } catch (const dtrain::DataError&) {
    return 0;
  }
  if (info.width <= 0 || info.height <= 0) fail("probe_image accepted a size <= 0");
  dtrain::Image full;
  try {
    dtrain::decode_image(file.data(), file.size(), full);
    if (full.width != info.width || full.height != info.height || full.channels != 3 ||
        full.pixels.size() != static_cast<size_t>(full.width) * full.height * 3) {
      fail("decode_image's output differs from the probed size");
    }
  } catch (const dtrain::DataError&) {
  }

  dtrain::TransformOptions o;
  o.mode = dtrain::TransformOptions::Mode::kRandomResizedCrop;
  o.size = 32;
  o.random_flip = flags & 1;
  o.dct_scaling = flags & 2;
  o.uint8_output = true;
  const dtrain::SamplePlan plan = dtrain::plan_sample(info.width, info.height, seed, o);
  const double min_scale = dtrain::min_decode_scale(plan, o);
  const dtrain::CropBox roi = dtrain::sample_footprint(plan);
  dtrain::Image part;
  try {
    const dtrain::DecodedRegion where =
        dtrain::decode_image(file.data(), file.size(), part, min_scale, &roi);
    std::vector<uint8_t> out(3 * 32 * 32);
    dtrain::render_sample(part, where, plan, o, out.data());
  } catch (const dtrain::DataError&) {
  }
  return 0;
}
