#include "image_fixtures.h"

#include <jpeglib.h>
#include <png.h>
#include <stdio.h>  // jpeglib.h needs FILE
#include <turbojpeg.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace dtrain::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/dtrain-image-test-XXXXXX";
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Image make_picture(int width, int height, uint32_t seed) {
  Image im;
  im.reset(width, height, 3);
  const double a = 0.02 + (seed % 7) * 0.01, b = 0.03 + (seed % 5) * 0.01;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = &im.pixels[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = static_cast<uint8_t>(127.5 + 127.5 * std::sin(a * x + seed));
      p[1] = static_cast<uint8_t>(127.5 + 127.5 * std::cos(b * y + 0.5 * seed));
      p[2] = static_cast<uint8_t>((x * 255 / std::max(1, width - 1) + seed * 37) % 256);
    }
  }
  return im;
}

std::vector<uint8_t> encode_jpeg(const Image& image, int quality, bool subsample) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(tj, image.pixels.data(), image.width, 0, image.height, TJPF_RGB, &out,
                             &size, subsample ? TJSAMP_420 : TJSAMP_444, quality, 0);
  std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(tj);
  if (rc != 0) throw std::runtime_error("tjCompress2 failed");
  return bytes;
}

namespace {
void png_append(png_structp png, png_bytep data, png_size_t length) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + length);
}
}  // namespace

std::vector<uint8_t> encode_png(const Image& image) {
  std::vector<uint8_t> bytes;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) throw std::runtime_error("png encode failed");
  png_set_write_fn(png, &bytes, &png_append, nullptr);
  const int color = image.channels == 1   ? PNG_COLOR_TYPE_GRAY
                    : image.channels == 3 ? PNG_COLOR_TYPE_RGB
                                          : PNG_COLOR_TYPE_RGBA;
  png_set_IHDR(png, info, image.width, image.height, 8, color, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < image.height; ++y) {
    png_write_row(png, const_cast<png_bytep>(
                           &image.pixels[static_cast<size_t>(y) * image.width * image.channels]));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return bytes;
}

Image reference_decode_jpeg(const std::vector<uint8_t>& bytes) {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), bytes.size());
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  Image im;
  im.reset(static_cast<int>(cinfo.output_width), static_cast<int>(cinfo.output_height), 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = &im.pixels[static_cast<size_t>(cinfo.output_scanline) * im.width * 3];
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return im;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::vector<uint8_t> make_tar(
    const std::vector<std::pair<std::string, std::vector<uint8_t>>>& members) {
  std::vector<uint8_t> tar;
  for (const auto& [name, data] : members) {
    char h[512] = {};
    std::snprintf(h, 100, "%s", name.c_str());
    std::snprintf(h + 100, 8, "%07o", 0644);
    std::snprintf(h + 108, 8, "%07o", 0);
    std::snprintf(h + 116, 8, "%07o", 0);
    std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(data.size()));
    std::snprintf(h + 136, 12, "%011o", 0);
    h[156] = '0';
    std::memcpy(h + 257, "ustar", 6);
    std::memcpy(h + 263, "00", 2);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    tar.insert(tar.end(), h, h + 512);
    tar.insert(tar.end(), data.begin(), data.end());
    tar.resize((tar.size() + 511) / 512 * 512, 0);
  }
  tar.resize(tar.size() + 1024, 0);
  return tar;
}

std::vector<std::string> make_image_folder(const std::string& dir,
                                           const std::vector<std::string>& classes, int per_class,
                                           bool mixed) {
  std::vector<std::string> files;
  uint32_t seed = 1;
  for (const std::string& cls : classes) {
    for (int i = 0; i < per_class; ++i, ++seed) {
      const Image im = make_picture(40 + 7 * (seed % 5), 30 + 5 * (seed % 3), seed);
      const bool png = mixed && i % 2 == 1;
      const std::string path =
          dir + "/" + cls + "/" + cls + "_" + std::to_string(i) + (png ? ".png" : ".jpg");
      write_file(path, png ? encode_png(im) : encode_jpeg(im));
      files.push_back(path);
    }
  }
  return files;
}

}  // namespace dtrain::testing
