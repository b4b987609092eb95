// Transforms on 8-bit RGB buffers: torchvision's crop geometry, bilinear
// resampling straight into the batch buffer, flip and normalisation.

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/random.h"
#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"

namespace dtrain {

TransformOptions TransformOptions::imagenet_train(int size) {
  TransformOptions o;
  o.mode = Mode::kRandomResizedCrop;
  o.size = size;
  o.random_flip = true;
  return o;
}

TransformOptions TransformOptions::imagenet_eval(int size) {
  TransformOptions o;
  o.mode = Mode::kResizeCenterCrop;
  o.size = size;
  o.resize = size * 8 / 7;  // 224 -> 256
  return o;
}

namespace detail {

double round_half_even(double x) { return std::nearbyint(x); }  // Python's round()

CropBox fallback_crop_box(int width, int height, const TransformOptions& o) {
  const double in_ratio = static_cast<double>(width) / height;
  double w = width, h = height;
  if (in_ratio < o.ratio_min) {
    h = round_half_even(w / o.ratio_min);
  } else if (in_ratio > o.ratio_max) {
    w = round_half_even(h * o.ratio_max);
  }
  return {std::floor((width - w) / 2), std::floor((height - h) / 2), w, h};
}

}  // namespace detail

CropBox center_crop_box(int width, int height, const TransformOptions& o) {
  // Resize(resize): the shorter side becomes `resize`, the longer one
  // int(resize * long / short), as torchvision truncates it.
  double new_w, new_h;
  if (width <= height) {
    new_w = o.resize;
    new_h = std::floor(static_cast<double>(o.resize) * height / width);
  } else {
    new_h = o.resize;
    new_w = std::floor(static_cast<double>(o.resize) * width / height);
  }
  // CenterCrop(size) on the resized image, mapped back to the source.
  const double top = detail::round_half_even((new_h - o.size) / 2.0);
  const double left = detail::round_half_even((new_w - o.size) / 2.0);
  const double sx = width / new_w, sy = height / new_h;
  return {left * sx, top * sy, o.size * sx, o.size * sy};
}

SamplePlan plan_sample(int width, int height, uint64_t seed, const TransformOptions& o) {
  SplitMix64 rng(seed);
  const CropBox whole{0, 0, static_cast<double>(width), static_cast<double>(height)};
  SamplePlan plan;
  switch (o.mode) {
    case TransformOptions::Mode::kNone:
      if (width != o.size || height != o.size) {
        throw DataError(cat("image is ", width, "x", height, ", expected ", o.size, "x", o.size));
      }
      plan.region = plan.bounds = whole;
      break;
    case TransformOptions::Mode::kRandomResizedCrop:
      plan.region = plan.bounds =
          random_resized_crop_box(width, height, o, [&rng] { return rng.uniform(); });
      break;
    case TransformOptions::Mode::kResizeCenterCrop:
      plan.region = center_crop_box(width, height, o);
      plan.bounds = whole;
      break;
  }
  plan.flip = o.random_flip && rng.uniform() < 0.5;
  return plan;
}

double min_decode_scale(const SamplePlan& plan, const TransformOptions& o) {
  if (!o.dct_scaling) return 1.0;
  const double scale = std::max(o.size / plan.region.width, o.size / plan.region.height);
  return scale <= 0.5 ? scale : 1.0;
}

namespace {

// One output coordinate's two source taps and the weight of the second.
struct Tap {
  int i0, i1;
  float w1;
};

// torch.nn.functional.interpolate(bilinear, align_corners=False) taps for `n`
// outputs covering [start, start + length) of an original axis, clamped to
// the bounds; the decoded axis is the original scaled by `f`, of which
// `extent` pixels from `offset` on were decoded.
void make_taps(double start, double length, double bound_lo, double bound_len, double f, int offset,
               int extent, int n, std::vector<Tap>& taps) {
  const double lo = std::max(0.0, bound_lo * f);
  const double hi = std::max(lo, (bound_lo + bound_len) * f - 1);
  const int last = std::min(extent - 1, static_cast<int>(hi) - offset);
  const double step = length * f / n;
  taps.resize(n);
  for (int i = 0; i < n; ++i) {
    const double s = std::clamp(start * f + (i + 0.5) * step - 0.5, lo, hi) - offset;
    const int i0 = std::clamp(static_cast<int>(s), 0, std::max(0, last));
    taps[i] = {i0, std::max(i0, std::min(i0 + 1, last)), static_cast<float>(s - i0)};
  }
}

}  // namespace

CropBox sample_footprint(const SamplePlan& plan) { return plan.region; }

void render_sample(const Image& src, const DecodedRegion& where, const SamplePlan& plan,
                   const TransformOptions& o, void* dst) {
  if (src.width < 1 || src.height < 1 || src.channels != 3) {
    throw DataError(
        cat("cannot render a ", src.width, "x", src.height, "x", src.channels, " image"));
  }
  const int n = o.size;
  thread_local std::vector<Tap> tx, ty;
  make_taps(plan.region.x, plan.region.width, plan.bounds.x, plan.bounds.width, where.scale_x,
            where.x, src.width, n, tx);
  make_taps(plan.region.y, plan.region.height, plan.bounds.y, plan.bounds.height, where.scale_y,
            where.y, src.height, n, ty);
  // Normalisation as a per-channel table over the rounded 8-bit value, so the
  // float output is exactly normalize_batch() of the uint8 output.
  float lut[3][256];
  if (!o.uint8_output) {
    for (int c = 0; c < 3; ++c) {
      for (int v = 0; v < 256; ++v) lut[c][v] = (v / 255.0f - o.mean[c]) / o.std[c];
    }
  }
  // Separable: blend the two source rows vertically over the columns the taps
  // use (contiguous, vectorised), then horizontally per output pixel into an
  // HWC row of rounded 8-bit values, then scatter that row into the three
  // output planes. Flags are copied to locals and the row is uint16_t so that
  // byte stores into the output cannot alias them (char aliases everything).
  const int x_lo = tx.front().i0, x_hi = tx.back().i1;
  const size_t span = static_cast<size_t>(x_hi - x_lo + 1) * 3;
  thread_local std::vector<float> blended;
  thread_local std::vector<uint16_t> row;
  blended.resize(span);
  row.resize(static_cast<size_t>(n) * 3);
  const bool to_uint8 = o.uint8_output, flip = plan.flip;
  const size_t plane = static_cast<size_t>(n) * n;
  const size_t stride = static_cast<size_t>(src.width) * 3;
  const Tap* taps = tx.data();
  float* b = blended.data();
  uint16_t* q = row.data();
  for (int oy = 0; oy < n; ++oy) {
    const uint8_t* r0 = src.pixels.data() + ty[oy].i0 * stride + x_lo * 3;
    const uint8_t* r1 = src.pixels.data() + ty[oy].i1 * stride + x_lo * 3;
    const float wy = ty[oy].w1;
    for (size_t k = 0; k < span; ++k) b[k] = r0[k] + wy * (static_cast<float>(r1[k]) - r0[k]);
    for (int ox = 0; ox < n; ++ox) {
      const float* p0 = b + (taps[ox].i0 - x_lo) * 3;
      const float* p1 = b + (taps[ox].i1 - x_lo) * 3;
      const float wx = taps[ox].w1;
      for (int c = 0; c < 3; ++c) {
        // A convex blend of values in [0, 255]: no clamping needed.
        q[ox * 3 + c] = static_cast<uint16_t>(p0[c] + wx * (p1[c] - p0[c]) + 0.5f);
      }
    }
    for (int c = 0; c < 3; ++c) {
      const size_t base = c * plane + static_cast<size_t>(oy) * n;
      const uint16_t* qc = q + c;
      if (to_uint8) {
        uint8_t* d = static_cast<uint8_t*>(dst) + base;
        for (int ox = 0; ox < n; ++ox) d[flip ? n - 1 - ox : ox] = static_cast<uint8_t>(qc[ox * 3]);
      } else {
        float* d = static_cast<float*>(dst) + base;
        const float* table = lut[c];
        for (int ox = 0; ox < n; ++ox) d[flip ? n - 1 - ox : ox] = table[qc[ox * 3]];
      }
    }
  }
}

}  // namespace dtrain
