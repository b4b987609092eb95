#pragma once
// Reading neighbouring samples of one shard with one request: the shared
// body of ImageSource::run_length and read_run for the packed and WebDataset
// sources (Note [Block order] in dtrain/sampler.h).

#include <cstdint>
#include <memory>
#include <vector>

#include "data/image/io.h"
#include "dtrain/image.h"

namespace dtrain::image {

/// Where a sample's encoded bytes lie.
struct Extent {
  int64_t shard = 0;
  int64_t offset = 0;
  int64_t size = 0;
};

// Note [Runs of neighbours]
// Samples i, i + 1, ... form a run while each lies in i's shard and starts
// at most kMaxRunGap bytes after the previous one ends: 0 in a packed shard;
// in a WebDataset tar the .cls member and three 512-byte headers, about
// 1.5 KB, read and dropped. A run spans at most kMaxRunBytes, so that one
// request, and the memory it needs, stays bounded whatever the caller asks.
constexpr int64_t kMaxRunGap = int64_t{16} << 10;
constexpr int64_t kMaxRunBytes = int64_t{16} << 20;

/// ImageSource::run_length over `size` samples whose extents extent_of(i)
/// gives.
template <typename ExtentOf>
int64_t run_length(const ExtentOf& extent_of, int64_t size, int64_t i, int64_t max) {
  if (max < 1) return 0;
  const Extent first = extent_of(i);
  int64_t end = first.offset + first.size;
  int64_t n = 1;
  while (n < max && i + n < size) {
    const Extent e = extent_of(i + n);
    if (e.shard != first.shard || e.offset < end || e.offset - end > kMaxRunGap ||
        e.offset + e.size - first.offset > kMaxRunBytes) {
      break;
    }
    end = e.offset + e.size;
    ++n;
  }
  return n;
}

/// ImageSource::read_run: the run's bytes with one pread_exact of `shard`
/// (extent_of(first).shard's), then each sample's slice into out[k]: while
/// it runs, twice the run's bytes (at most 2 x kMaxRunBytes).
template <typename ExtentOf>
void read_run(const ByteSource& shard, const ExtentOf& extent_of, int64_t first, int64_t count,
              SampleData* out) {
  const Extent a = extent_of(first), z = extent_of(first + count - 1);
  const auto length = static_cast<size_t>(z.offset + z.size - a.offset);
  const std::unique_ptr<uint8_t[]> run(new uint8_t[length]);  // not zero-filled
  shard.pread_exact(run.get(), length, a.offset);
  for (int64_t k = 0; k < count; ++k) {
    const Extent e = extent_of(first + k);
    const uint8_t* from = run.get() + (e.offset - a.offset);
    out[k].encoded = true;
    out[k].bytes.assign(from, from + e.size);
  }
}

}  // namespace dtrain::image
