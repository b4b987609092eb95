#pragma once
// A tiny learnable MNIST-shaped dataset written as gzipped IDX files, for tests
// that train through the real data path (`--dataset mnist --data-dir DIR`).

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::testing {

/// Writes an unsigned-byte IDX file (gzipped) with the given dimensions.
inline void write_idx_gz(const std::filesystem::path& path, const std::vector<uint32_t>& dims,
                         const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b = {0, 0, 8, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  }
  b.insert(b.end(), data.begin(), data.end());
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
  gzclose(f);
}

/// `train` and `test` images of size x size in `dir` (MNIST file names):
/// class k lights up the k-th tenth of the rows, so a small model learns it.
inline void write_tiny_dataset(const std::filesystem::path& dir, uint32_t train, uint32_t test,
                               uint32_t size = 12, uint32_t seed = 7) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(seed);
  for (auto [prefix, n] : {std::pair<std::string, uint32_t>{"train", train}, {"t10k", test}}) {
    std::vector<uint8_t> images(size_t{n} * size * size), labels(n);
    for (uint32_t i = 0; i < n; ++i) {
      labels[i] = static_cast<uint8_t>(rng() % 10);
      for (uint32_t y = 0; y < size; ++y) {
        for (uint32_t x = 0; x < size; ++x) {
          const bool on = y * 10 / size == labels[i];
          images[(size_t{i} * size + y) * size + x] =
              static_cast<uint8_t>(on ? 200 + rng() % 55 : rng() % 40);
        }
      }
    }
    write_idx_gz(dir / (prefix + "-images-idx3-ubyte.gz"), {n, size, size}, images);
    write_idx_gz(dir / (prefix + "-labels-idx1-ubyte.gz"), {n}, labels);
  }
}

}  // namespace dtrain::testing
