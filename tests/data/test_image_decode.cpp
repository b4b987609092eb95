// Decoding (TurboJPEG, libpng) and transform geometry.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "common/random.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"
#include "image_fixtures.h"

namespace dtrain {
namespace {

using testing::encode_jpeg;
using testing::encode_png;
using testing::make_picture;

int max_abs_diff(const Image& a, const Image& b) {
  int worst = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i)
    worst = std::max(worst, std::abs(a.pixels[i] - b.pixels[i]));
  return worst;
}

TEST(ImageDecode, JpegPixelsMatchTheLibjpegReferenceDecode) {
  for (bool subsample : {false, true}) {
    const auto bytes = encode_jpeg(make_picture(61, 47, 3), 90, subsample);
    Image ours;
    decode_image(bytes.data(), bytes.size(), ours);
    const Image ref = testing::reference_decode_jpeg(bytes);
    ASSERT_EQ(ours.width, 61);
    ASSERT_EQ(ours.height, 47);
    ASSERT_EQ(ours.channels, 3);
    EXPECT_EQ(ours.pixels, ref.pixels) << "subsample " << subsample;
  }
}

TEST(ImageDecode, HighQualityJpegIsCloseToTheOriginalPixels) {
  const Image original = make_picture(64, 48, 5);
  const auto bytes = encode_jpeg(original, 100);
  Image decoded;
  decode_image(bytes.data(), bytes.size(), decoded);
  EXPECT_LE(max_abs_diff(original, decoded), 6);
}

TEST(ImageDecode, PngRgbGrayAndAlphaDecodeExactlyToRgb) {
  const Image rgb = make_picture(33, 21, 9);
  Image out;
  auto bytes = encode_png(rgb);
  decode_image(bytes.data(), bytes.size(), out);
  EXPECT_EQ(out.pixels, rgb.pixels);

  Image gray;
  gray.reset(5, 4, 1);
  for (size_t i = 0; i < gray.pixels.size(); ++i) gray.pixels[i] = static_cast<uint8_t>(i * 13);
  bytes = encode_png(gray);
  decode_image(bytes.data(), bytes.size(), out);
  ASSERT_EQ(out.channels, 3);
  for (size_t i = 0; i < gray.pixels.size(); ++i) {
    EXPECT_EQ(out.pixels[3 * i], gray.pixels[i]);
    EXPECT_EQ(out.pixels[3 * i + 2], gray.pixels[i]);
  }

  Image rgba;
  rgba.reset(4, 3, 4);
  for (size_t i = 0; i < rgba.pixels.size(); ++i) rgba.pixels[i] = static_cast<uint8_t>(i * 7);
  bytes = encode_png(rgba);
  decode_image(bytes.data(), bytes.size(), out);
  ASSERT_EQ(out.pixels.size(), 4u * 3 * 3);
  for (size_t p = 0; p < 12; ++p) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(out.pixels[3 * p + c], rgba.pixels[4 * p + c]);
  }
}

TEST(ImageDecode, ProbeReadsFormatAndSizeFromTheHeader) {
  const Image im = make_picture(50, 20, 1);
  auto jpeg = encode_jpeg(im);
  auto png = encode_png(im);
  ImageInfo j = probe_image(jpeg.data(), jpeg.size());
  ImageInfo p = probe_image(png.data(), png.size());
  EXPECT_EQ(j.format, ImageFormat::kJpeg);
  EXPECT_EQ(p.format, ImageFormat::kPng);
  EXPECT_EQ(j.width, 50);
  EXPECT_EQ(p.height, 20);
}

TEST(ImageDecode, DctScalingDecodesAtTheSmallestEighthAboveTheMinimumScale) {
  const auto bytes = encode_jpeg(make_picture(400, 300, 2));
  Image out;
  decode_image(bytes.data(), bytes.size(), out, 0.3);  // 3/8 is the smallest >= 0.3
  EXPECT_EQ(out.width, 150);
  EXPECT_EQ(out.height, 113);                          // ceil(300 * 3 / 8)
  decode_image(bytes.data(), bytes.size(), out, 0.1);  // 1/8
  EXPECT_EQ(out.width, 50);
  decode_image(bytes.data(), bytes.size(), out, 1.0);
  EXPECT_EQ(out.width, 400);
}

TEST(ImageDecode, RegionDecodeMatchesTheSameRegionOfTheFullDecode) {
  for (bool subsample : {false, true}) {
    const auto bytes = encode_jpeg(make_picture(203, 151, 12), 90, subsample);
    Image full, part;
    decode_image(bytes.data(), bytes.size(), full);
    const CropBox roi{70, 41, 60, 50};
    const DecodedRegion where = decode_image(bytes.data(), bytes.size(), part, 1.0, &roi);
    // The window covers the region plus a pixel, widened to whole iMCUs.
    EXPECT_LE(where.x, 69);
    EXPECT_EQ(where.y, 40);
    EXPECT_GE(where.x + part.width, 131);
    EXPECT_EQ(part.height, 52);
    int worst = 0;
    for (int y = 0; y < part.height; ++y) {
      for (int x = 0; x < part.width * 3; ++x) {
        const int a = part.pixels[static_cast<size_t>(y) * part.width * 3 + x];
        const int b =
            full.pixels[static_cast<size_t>(y + where.y) * full.width * 3 + where.x * 3 + x];
        worst = std::max(worst, std::abs(a - b));
      }
    }
    // 4:2:0: fancy upsampling at the window's first row lacks the row above.
    EXPECT_LE(worst, subsample ? 4 : 0) << "subsample " << subsample;
  }
}

TEST(ImageTransform, RenderingFromARegionDecodeEqualsRenderingFromTheFullDecode) {
  TransformOptions o = TransformOptions::imagenet_train(24);
  o.uint8_output = true;
  const auto bytes = encode_jpeg(make_picture(160, 120, 13), 92);
  Image full, part;
  decode_image(bytes.data(), bytes.size(), full);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const SamplePlan plan = plan_sample(160, 120, seed, o);
    const CropBox roi = sample_footprint(plan);
    const DecodedRegion where = decode_image(bytes.data(), bytes.size(), part, 1.0, &roi);
    std::vector<uint8_t> a(3 * 24 * 24), b(3 * 24 * 24);
    render_sample(full, {}, plan, o, a.data());
    render_sample(part, where, plan, o, b.data());
    EXPECT_EQ(a, b) << seed;
  }
}

TEST(ImageDecode, CorruptAndTruncatedDataThrowDataError) {
  std::vector<uint8_t> junk(100, 0x42);
  Image out;
  EXPECT_THROW(decode_image(junk.data(), junk.size(), out), DataError);
  EXPECT_THROW(probe_image(junk.data(), 0), DataError);
  auto jpeg = encode_jpeg(make_picture(64, 64, 1));
  jpeg.resize(jpeg.size() / 2);
  try {
    decode_image(jpeg.data(), jpeg.size(), out);
    FAIL() << "a truncated JPEG decoded";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("JPEG"), std::string::npos) << e.what();
  }
  auto png = encode_png(make_picture(64, 64, 1));
  png.resize(png.size() - 30);
  EXPECT_THROW(decode_image(png.data(), png.size(), out), DataError);
}

// ---- Transform geometry --------------------------------------------------------

TEST(ImageTransform, RandomResizedCropBoxesStayInsideTheImageAndTheBounds) {
  const TransformOptions o = TransformOptions::imagenet_train(224);
  int fallbacks = 0;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    const int w = 100 + static_cast<int>(seed % 400), h = 80 + static_cast<int>(seed % 300);
    const SamplePlan plan = plan_sample(w, h, seed, o);
    const CropBox& b = plan.region;
    ASSERT_GE(b.x, 0);
    ASSERT_GE(b.y, 0);
    ASSERT_LE(b.x + b.width, w);
    ASSERT_LE(b.y + b.height, h);
    ASSERT_EQ(b.x, std::floor(b.x));
    ASSERT_EQ(b.width, std::floor(b.width));
    const double area = b.width * b.height / (static_cast<double>(w) * h);
    const double ratio = b.width / b.height;
    // Rounding to whole pixels moves area and ratio slightly off the draws.
    const double slack_w = 1.0 / b.width + 1.0 / b.height;
    const bool in_bounds = area >= 0.08 * (1 - 2 * slack_w) && area <= 1.0 &&
                           ratio >= 0.75 * (1 - slack_w) && ratio <= 4.0 / 3.0 * (1 + slack_w);
    if (!in_bounds) ++fallbacks;
    EXPECT_TRUE(in_bounds || (b.width == w || b.height == h)) << seed;
  }
  EXPECT_LT(fallbacks, 20);
}

TEST(ImageTransform, RandomResizedCropFallsBackToACentreCropForExtremeAspectRatios) {
  TransformOptions o = TransformOptions::imagenet_train(32);
  o.scale_min = o.scale_max = 1.0;  // the whole area never fits a 10:1 image within 4:3
  const CropBox b = random_resized_crop_box(1000, 100, o, [] { return 0.5; });
  EXPECT_EQ(b.height, 100);
  EXPECT_EQ(b.width, 133);  // round(100 * 4 / 3)
  EXPECT_EQ(b.x, std::floor((1000 - 133) / 2));
  EXPECT_EQ(b.y, 0);
}

TEST(ImageTransform, CenterCropBoxIsResizeThenCropMappedToTheSource) {
  const TransformOptions o = TransformOptions::imagenet_eval(224);
  EXPECT_EQ(o.resize, 256);
  // 500x375 -> Resize(256) -> 341x256 -> CenterCrop(224): left 58, top 16.
  const CropBox b = center_crop_box(500, 375, o);
  const double s = 500.0 / 341.0;
  EXPECT_NEAR(b.x, 58 * s, 1e-9);
  EXPECT_NEAR(b.width, 224 * s, 1e-9);
  EXPECT_NEAR(b.y, 16 * 375.0 / 256.0, 1e-9);
}

TEST(ImageTransform, IdentityPlanCopiesPixelsIntoChwAndFlipMirrors) {
  TransformOptions o;
  o.size = 8;
  o.uint8_output = true;
  const Image im = make_picture(8, 8, 4);
  SamplePlan plan = plan_sample(8, 8, 0, o);
  std::vector<uint8_t> out(3 * 64), flipped(3 * 64);
  render_sample(im, {}, plan, o, out.data());
  plan.flip = true;
  render_sample(im, {}, plan, o, flipped.data());
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 8; ++y) {
      for (int x = 0; x < 8; ++x) {
        EXPECT_EQ(out[c * 64 + y * 8 + x], im.pixels[(y * 8 + x) * 3 + c]);
        EXPECT_EQ(flipped[c * 64 + y * 8 + x], out[c * 64 + y * 8 + 7 - x]);
      }
    }
  }
}

TEST(ImageTransform, FloatOutputIsTheNormalisedUint8Output) {
  TransformOptions o = TransformOptions::imagenet_train(16);
  const Image im = make_picture(40, 30, 8);
  const SamplePlan plan = plan_sample(40, 30, 77, o);
  std::vector<uint8_t> u8(3 * 256);
  std::vector<float> f(3 * 256);
  o.uint8_output = true;
  render_sample(im, {}, plan, o, u8.data());
  o.uint8_output = false;
  render_sample(im, {}, plan, o, f.data());
  for (int i = 0; i < 3 * 256; ++i) {
    const int c = i / 256;
    EXPECT_NEAR(f[i], (u8[i] / 255.0f - o.mean[c]) / o.std[c], 1e-5);
  }
}

TEST(ImageTransform, DownscaledDecodeRendersCloseToTheFullDecode) {
  TransformOptions o = TransformOptions::imagenet_eval(32);
  o.uint8_output = true;
  const auto bytes = encode_jpeg(make_picture(320, 240, 6), 95);
  const SamplePlan plan = plan_sample(320, 240, 1, o);
  ASSERT_LE(min_decode_scale(plan, o), 0.5);
  Image full, scaled;
  decode_image(bytes.data(), bytes.size(), full);
  const DecodedRegion where =
      decode_image(bytes.data(), bytes.size(), scaled, min_decode_scale(plan, o));
  ASSERT_LT(scaled.width, full.width);
  EXPECT_DOUBLE_EQ(where.scale_x, static_cast<double>(scaled.width) / 320);
  std::vector<uint8_t> a(3 * 32 * 32), b(3 * 32 * 32);
  render_sample(full, {}, plan, o, a.data());
  render_sample(scaled, where, plan, o, b.data());
  double mean_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) mean_diff += std::abs(a[i] - b[i]);
  EXPECT_LT(mean_diff / a.size(), 4.0);
}

}  // namespace
}  // namespace dtrain
