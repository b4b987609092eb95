// JPEG through libjpeg-turbo and PNG through libpng, both to 8-bit RGB.
//
// JPEG: TurboJPEG reads headers and lists the DCT scaling factors; the decode
// itself goes through libjpeg-turbo's libjpeg API, which can also skip the
// rows above a region (jpeg_skip_scanlines), stop below it and decode only its
// columns (jpeg_crop_scanline): a RandomResizedCrop rarely needs the whole image.

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>
#include <stdio.h>  // jpeglib.h needs FILE
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"

namespace dtrain {
namespace {

// Larger sides are taken for corrupt headers (PIL refuses such "decompression bombs" too).
constexpr uint32_t kMaxSide = 1u << 16;
// Note [Pixel limit]: the sides alone allow 65536 x 65536 (12.9 GB of RGB),
// which a 60-byte PNG header claims and the decoder then allocates before
// reading a pixel (found by the long fuzz run of fuzz/image_decode.cpp). PIL
// raises DecompressionBombError above 2 * Image.MAX_IMAGE_PIXELS; the same
// bound here is 537 MB of RGB, far above any training image.
constexpr uint64_t kMaxPixels = 2 * 89478485ull;

bool too_many_pixels(uint64_t width, uint64_t height) { return width * height > kMaxPixels; }
constexpr uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

bool is_jpeg(const uint8_t* data, size_t size) {
  return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}
bool is_png(const uint8_t* data, size_t size) {
  return size >= 8 && std::memcmp(data, kPngMagic, 8) == 0;
}

// One TurboJPEG decompressor per thread: creating one costs more than a small decode.
class TjHandle {
 public:
  TjHandle() : handle_(tjInitDecompress()) {}
  ~TjHandle() {
    if (handle_) tjDestroy(handle_);
  }
  TjHandle(const TjHandle&) = delete;
  TjHandle& operator=(const TjHandle&) = delete;
  tjhandle get() const {
    if (!handle_) throw DataError("TurboJPEG: cannot create a decompressor");
    return handle_;
  }

 private:
  tjhandle handle_;
};

tjhandle thread_decompressor() {
  thread_local TjHandle handle;
  return handle.get();
}

struct JpegHeader {
  int width, height, subsampling, colorspace;
};

JpegHeader jpeg_header(tjhandle tj, const uint8_t* data, size_t size) {
  JpegHeader h{};
  if (tjDecompressHeader3(tj, data, static_cast<unsigned long>(size), &h.width, &h.height,
                          &h.subsampling, &h.colorspace) != 0) {
    throw DataError(cat("corrupt JPEG header: ", tjGetErrorStr2(tj)));
  }
  if (h.width < 1 || h.height < 1 || static_cast<uint32_t>(h.width) > kMaxSide ||
      static_cast<uint32_t>(h.height) > kMaxSide) {
    throw DataError(cat("corrupt JPEG header: size ", h.width, "x", h.height));
  }
  if (too_many_pixels(h.width, h.height)) {
    throw DataError(cat("JPEG of ", h.width, "x", h.height, " pixels is above the limit of ",
                        kMaxPixels, " (PIL's decompression-bomb limit)"));
  }
  return h;
}

// The smallest n/8 scaling factor >= min_scale (1/1 when none is smaller).
tjscalingfactor pick_scale(double min_scale) {
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  tjscalingfactor best{1, 1};
  for (int i = 0; i < count; ++i) {
    const double s = static_cast<double>(factors[i].num) / factors[i].denom;
    if (s <= 1.0 && s >= min_scale && s < static_cast<double>(best.num) / best.denom) {
      best = factors[i];
    }
  }
  return best;
}

// Adobe CMYK/YCCK JPEGs store inverted CMYK; RGB = inverted CMY scaled by K.
void cmyk_to_rgb(const std::vector<uint8_t>& cmyk, Image& out) {
  const size_t n = static_cast<size_t>(out.width) * out.height;
  for (size_t i = 0; i < n; ++i) {
    const unsigned k = cmyk[4 * i + 3];
    for (int c = 0; c < 3; ++c) {
      out.pixels[3 * i + c] = static_cast<uint8_t>(cmyk[4 * i + c] * k / 255);
    }
  }
}

// libjpeg's error manager: errors longjmp back to the stage that failed;
// warnings are remembered (a premature end of data makes the image corrupt).
struct JpegErrors {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

void jpeg_on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  longjmp(e->jump, 1);
}

void jpeg_on_message(j_common_ptr cinfo, int level) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    e->truncated = true;
    (*cinfo->err->format_message)(cinfo, e->message);
  }
}

// The rows and columns of the (scaled) output that a decode produces.
struct JpegWindow {
  unsigned x, width, y, height;
  unsigned full_width, full_height;    // the scaled image
  unsigned image_width, image_height;  // the original
  bool cmyk;
};

// Stages of one decode, kept free of C++ objects with destructors because
// libjpeg errors longjmp out of them. Each returns false after an error.
bool jpeg_start(jpeg_decompress_struct* cinfo, JpegErrors* err, const uint8_t* data, size_t size,
                tjscalingfactor sf, const double* roi, JpegWindow* w) {
  if (setjmp(err->jump)) return false;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  w->image_width = cinfo->image_width;
  w->image_height = cinfo->image_height;
  w->cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  cinfo->out_color_space = w->cmyk ? JCS_CMYK : JCS_RGB;
  cinfo->scale_num = static_cast<unsigned>(sf.num);
  cinfo->scale_denom = static_cast<unsigned>(sf.denom);
  jpeg_start_decompress(cinfo);
  w->full_width = cinfo->output_width;
  w->full_height = cinfo->output_height;
  w->x = 0, w->y = 0, w->width = w->full_width, w->height = w->full_height;
  if (roi) {
    // roi = {x0, y0, x1, y1} in output pixels, already clamped.
    w->x = static_cast<unsigned>(roi[0]);
    w->y = static_cast<unsigned>(roi[1]);
    w->width = static_cast<unsigned>(roi[2]) - w->x;
    w->height = static_cast<unsigned>(roi[3]) - w->y;
    if (w->width < w->full_width) {
      JDIMENSION x = w->x, width = w->width;
      jpeg_crop_scanline(cinfo, &x, &width);  // widens to whole iMCUs
      w->x = x, w->width = width;
    }
  }
  return true;
}

bool jpeg_read_window(jpeg_decompress_struct* cinfo, JpegErrors* err, const JpegWindow* w,
                      uint8_t* dst, size_t row_bytes) {
  if (setjmp(err->jump)) return false;
  if (w->y > 0) jpeg_skip_scanlines(cinfo, w->y);
  for (unsigned y = 0; y < w->height; ++y) {
    JSAMPROW row = dst + y * row_bytes;
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {
      std::snprintf(err->message, sizeof(err->message), "no scanline %u", w->y + y);
      return false;
    }
  }
  if (w->y + w->height == w->full_height) jpeg_finish_decompress(cinfo);
  return true;
}

DecodedRegion decode_jpeg(const uint8_t* data, size_t size, Image& out, double min_scale,
                          const CropBox* roi) {
  const tjscalingfactor sf = pick_scale(min_scale);
  double window[4];
  if (roi) {
    // The region in scaled pixels, with a pixel of margin for the bilinear taps.
    const JpegHeader h = jpeg_header(thread_decompressor(), data, size);
    const double fx = static_cast<double>(TJSCALED(h.width, sf)) / h.width;
    const double fy = static_cast<double>(TJSCALED(h.height, sf)) / h.height;
    window[0] = std::max(0.0, std::floor(roi->x * fx) - 1);
    window[1] = std::max(0.0, std::floor(roi->y * fy) - 1);
    window[2] = std::min<double>(TJSCALED(h.width, sf), std::ceil((roi->x + roi->width) * fx) + 1);
    window[3] =
        std::min<double>(TJSCALED(h.height, sf), std::ceil((roi->y + roi->height) * fy) + 1);
    if (window[2] <= window[0] || window[3] <= window[1]) roi = nullptr;
  }
  jpeg_decompress_struct cinfo;
  JpegErrors err{};
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = &jpeg_on_error;
  err.pub.emit_message = &jpeg_on_message;
  jpeg_create_decompress(&cinfo);
  JpegWindow w{};
  bool ok = jpeg_start(&cinfo, &err, data, size, sf, roi ? window : nullptr, &w);
  thread_local std::vector<uint8_t> cmyk_buffer;
  if (ok) {
    out.reset(static_cast<int>(w.width), static_cast<int>(w.height), 3);
    if (w.cmyk) cmyk_buffer.resize(static_cast<size_t>(w.width) * w.height * 4);
    ok = jpeg_read_window(&cinfo, &err, &w, w.cmyk ? cmyk_buffer.data() : out.pixels.data(),
                          static_cast<size_t>(w.width) * (w.cmyk ? 4 : 3));
  }
  jpeg_destroy_decompress(&cinfo);
  if (!ok || err.truncated) throw DataError(cat("corrupt JPEG data: ", err.message));
  if (w.cmyk) cmyk_to_rgb(cmyk_buffer, out);
  return {static_cast<double>(w.full_width) / w.image_width,
          static_cast<double>(w.full_height) / w.image_height, static_cast<int>(w.x),
          static_cast<int>(w.y)};
}

// libpng reads from memory through this cursor; errors longjmp to decode_png.
struct PngCursor {
  const uint8_t* data;
  size_t size;
  size_t offset;
};

void png_read_from_memory(png_structp png, png_bytep dst, png_size_t length) {
  auto* cursor = static_cast<PngCursor*>(png_get_io_ptr(png));
  if (cursor->offset + length > cursor->size) png_error(png, "truncated PNG data");
  std::memcpy(dst, cursor->data + cursor->offset, length);
  cursor->offset += length;
}

void png_record_error(png_structp png, png_const_charp message) {
  auto* text = static_cast<std::string*>(png_get_error_ptr(png));
  *text = message;
  png_longjmp(png, 1);
}

void png_ignore_warning(png_structp, png_const_charp) {}

// Kept free of C++ objects with destructors: png_error longjmps out of it.
bool decode_png_unsafe(png_structp png, png_infop info, PngCursor* cursor, Image& out,
                       std::vector<png_bytep>& rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, cursor, &png_read_from_memory);
  png_set_user_limits(png, kMaxSide, kMaxSide);
  png_read_info(png, info);
  if (too_many_pixels(png_get_image_width(png, info), png_get_image_height(png, info))) {
    png_error(png, "more pixels than the limit of 178956970 (PIL's decompression-bomb limit)");
  }
  const png_byte color = png_get_color_type(png, info);
  const png_byte depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  if (depth == 16) png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int w = static_cast<int>(png_get_image_width(png, info));
  const int h = static_cast<int>(png_get_image_height(png, info));
  if (png_get_rowbytes(png, info) != static_cast<size_t>(w) * 3) {
    png_error(png, "unexpected PNG row layout after conversion to RGB");
  }
  out.reset(w, h, 3);
  rows.resize(h);
  for (int y = 0; y < h; ++y) rows[y] = out.pixels.data() + static_cast<size_t>(y) * w * 3;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  return true;
}

void decode_png(const uint8_t* data, size_t size, Image& out) {
  std::string error;
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &error, &png_record_error, &png_ignore_warning);
  if (!png) throw DataError("libpng: cannot create a reader");
  png_infop info = png_create_info_struct(png);
  PngCursor cursor{data, size, 0};
  std::vector<png_bytep> rows;
  const bool ok = info && decode_png_unsafe(png, info, &cursor, out, rows);
  png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  if (!ok) throw DataError(cat("corrupt PNG data: ", error.empty() ? "unknown error" : error));
}

uint32_t big_endian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

ImageInfo probe_image(const uint8_t* data, size_t size) {
  if (is_jpeg(data, size)) {
    const JpegHeader h = jpeg_header(thread_decompressor(), data, size);
    return {ImageFormat::kJpeg, h.width, h.height};
  }
  if (is_png(data, size)) {
    // Signature, then the IHDR chunk: length, "IHDR", width, height.
    if (size < 24 || std::memcmp(data + 12, "IHDR", 4) != 0) {
      throw DataError("corrupt PNG header: no IHDR chunk");
    }
    const uint32_t w = big_endian32(data + 16), h = big_endian32(data + 20);
    if (w == 0 || h == 0 || w > kMaxSide || h > kMaxSide) {
      throw DataError(cat("corrupt PNG header: size ", w, "x", h));
    }
    if (too_many_pixels(w, h)) {
      throw DataError(cat("PNG of ", w, "x", h, " pixels is above the limit of ", kMaxPixels,
                          " (PIL's decompression-bomb limit)"));
    }
    return {ImageFormat::kPng, static_cast<int>(w), static_cast<int>(h)};
  }
  throw DataError(size == 0 ? "empty file" : "neither a JPEG nor a PNG image");
}

DecodedRegion decode_image(const uint8_t* data, size_t size, Image& out, double min_scale,
                           const CropBox* roi) {
  if (is_jpeg(data, size)) return decode_jpeg(data, size, out, min_scale, roi);
  if (is_png(data, size)) {
    decode_png(data, size, out);
    return {};
  }
  throw DataError(size == 0 ? "empty file" : "neither a JPEG nor a PNG image");
}

}  // namespace dtrain
