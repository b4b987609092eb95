#pragma once
// Helpers shared by the checkpoint and resume tests: a scratch directory, a
// tiny MNIST-shaped dataset, file surgery.

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace dtrain::testing {

namespace fs = std::filesystem;

/// A fresh directory per test, removed afterwards.
class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / (std::string("dtrain-ckpt-") + info->test_suite_name() +
                                        "-" + info->name() + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

inline void write_idx_gz(const fs::path& path, const std::vector<uint32_t>& dims,
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

/// A tiny learnable MNIST-like dataset of size x size images (class k lights
/// up a band of rows), readable as --dataset mnist --data-dir dir.
inline void write_tiny_dataset(const fs::path& dir, uint32_t train, uint32_t test,
                               uint32_t size = 12) {
  fs::create_directories(dir);
  std::mt19937 rng(7);
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

inline void truncate_file(const fs::path& path, uintmax_t size) { fs::resize_file(path, size); }

inline void flip_byte(const fs::path& path, uintmax_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x5a));
}

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace dtrain::testing
