#pragma once
// Test fixtures for the image pipeline: temporary directories, synthetic
// pictures, JPEG/PNG encoders and a tar writer.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/image.h"

namespace dtrain::testing {

/// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// A smooth RGB test picture whose content depends on `seed`.
Image make_picture(int width, int height, uint32_t seed);

/// JPEG bytes (TurboJPEG, 4:4:4 unless `subsample`) of an RGB image.
std::vector<uint8_t> encode_jpeg(const Image& image, int quality = 95, bool subsample = false);

/// PNG bytes (libpng) of an image with 1 (gray), 3 (RGB) or 4 (RGBA) channels.
std::vector<uint8_t> encode_png(const Image& image);

/// Reference decode through the libjpeg API (not TurboJPEG's), to RGB.
Image reference_decode_jpeg(const std::vector<uint8_t>& bytes);

void write_file(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> read_bytes(const std::string& path);

/// A ustar archive of (name, contents) members.
std::vector<uint8_t> make_tar(
    const std::vector<std::pair<std::string, std::vector<uint8_t>>>& members);

/// Writes DIR/<class>/<class>_<i>.<ext> pictures, `per_class` per class;
/// alternating JPEG and PNG when `mixed`. Returns the files written in order.
std::vector<std::string> make_image_folder(const std::string& dir,
                                           const std::vector<std::string>& classes, int per_class,
                                           bool mixed = true);

}  // namespace dtrain::testing
