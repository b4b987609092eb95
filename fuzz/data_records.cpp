// Fuzz target: the fixed-layout dataset files: IDX (MNIST, Fashion-MNIST; raw
// or gzip), CIFAR-10 and STL-10 binaries (src/data/idx.cpp,
// src/data/image/binary_sets.cpp).
//
// Input: byte 0 picks the format: 0 IDX raw, 1 IDX gzipped by the harness (so
// mutations reach the IDX parser behind a valid gzip CRC), 2 CIFAR-10 batch,
// 3 STL-10 (bytes 1-4: length of the _X part, little-endian; the rest is
// _y). Every rejection must be a DataError naming the file; an accepted file
// must yield exactly what its header announces, every sample readable.
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <string>

#include <ATen/ATen.h>

#include "dtrain/errors.h"
#include "dtrain/idx.h"
#include "dtrain/image.h"
#include "fuzz/fuzz_util.h"

using dtrain::fuzz::fail;

namespace {

std::string gzip(std::string_view raw) {
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) fail("deflateInit2");
  std::string out(deflateBound(&z, raw.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) fail("deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void read_all(const dtrain::ImageSource& source, int side) {
  dtrain::SampleData sample;
  for (int64_t i = 0; i < source.size(); ++i) {
    source.read(i, sample);
    if (sample.encoded || sample.image.width != side || sample.image.height != side ||
        sample.image.channels != 3) {
      fail("a sample of the wrong shape");
    }
    const int64_t label = source.label(i);
    if (label < 0 || label >= static_cast<int64_t>(source.classes().size())) fail("bad label");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (4 << 20)) return 0;
  const int format = data[0] % 4;
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string dir = dtrain::fuzz::scratch_dir();
  try {
    if (format <= 1) {
      const std::string path = dir + "/records-idx";
      dtrain::fuzz::write_file(path, format == 1 ? gzip(body) : std::string(body));
      at::Tensor t = dtrain::read_idx(path);
      if (t.scalar_type() != at::kByte) fail("read_idx returned a non-uint8 tensor");
      const bool gzipped = body.size() >= 2 && static_cast<uint8_t>(body[0]) == 0x1f &&
                           static_cast<uint8_t>(body[1]) == 0x8b;
      if (body.size() >= 4 && !(format == 0 && gzipped)) {
        // The header's dimensions, as the file states them.
        const int dims = static_cast<uint8_t>(body[3]);
        if (t.dim() != dims) fail("read_idx returned another number of dimensions");
        // 128 bits: four sides of up to 2^32 overflow int64_t (a 0 side makes
        // such a shape valid and empty).
        unsigned __int128 numel = 1;
        for (int d = 0; d < dims; ++d) {
          const auto* p = reinterpret_cast<const uint8_t*>(body.data()) + 4 + 4 * d;
          const int64_t n = (int64_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
          if (t.size(d) != n) fail("read_idx returned another shape than the header's");
          numel *= n;
        }
        if (body.size() != 4 + 4 * static_cast<unsigned __int128>(dims) + numel) {
          fail("read_idx accepted a payload of the wrong size");
        }
      }
    } else if (format == 2) {
      dtrain::fuzz::write_file(dir + "/test_batch.bin", body);
      read_all(*dtrain::open_cifar10(dir, false), 32);
    } else {
      if (body.size() < 4) return 0;
      uint32_t x_len = 0;
      std::memcpy(&x_len, body.data(), 4);
      body.remove_prefix(4);
      x_len = std::min<uint32_t>(x_len, static_cast<uint32_t>(body.size()));
      dtrain::fuzz::write_file(dir + "/test_X.bin", body.substr(0, x_len));
      dtrain::fuzz::write_file(dir + "/test_y.bin", body.substr(x_len));
      read_all(*dtrain::open_stl10(dir, false), 96);
    }
  } catch (const dtrain::DataError& e) {
    if (std::string(e.what()).find(dir) == std::string::npos) fail("error does not name the file");
  }
  return 0;
}
