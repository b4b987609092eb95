#pragma once
// Reading neighbouring samples of one shard with one request: the shared
// body of ImageSource::run_length and read_run for the packed and WebDataset
// sources (Note [Block order] in dtrain/sampler.h).

#include <cstdint>
#include <vector>

#include "common/strings.h"
#include "data/image/io.h"
#include "dtrain/errors.h"
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

/// ImageSource::read_run: the run's bytes with one read of `shard`
/// (extent_of(first).shard's), each sample's straight into out[k].bytes
/// (ByteSource::pread_spans; the gaps between samples are read and dropped).
template <typename ExtentOf>
void read_run(const ByteSource& shard, const ExtentOf& extent_of, int64_t first, int64_t count,
              SampleData* out) {
  std::vector<ReadSpan> spans;
  spans.reserve(static_cast<size_t>(2 * count));
  const Extent head = extent_of(first);
  const int64_t start = head.offset;
  int64_t at = start;
  for (int64_t k = 0; k < count; ++k) {
    const Extent e = k == 0 ? head : extent_of(first + k);
    if (e.offset < at || e.shard != head.shard) {
      // Not a run (run_length's contract broken): the caller reads each alone.
      throw DataError(cat(
          "'", shard.path(), "': samples ", first, "..", first + count - 1,
          " are not back to back in it; fix: read them one by one (a source's run_length bug)"));
    }
    if (e.offset > at) spans.push_back({nullptr, static_cast<size_t>(e.offset - at)});
    // A recycled buffer keeps its size (Note [Recycled sample buffers]): only
    // what grows is zero-filled.
    out[k].encoded = true;
    out[k].bytes.resize(static_cast<size_t>(e.size));
    spans.push_back({out[k].bytes.data(), static_cast<size_t>(e.size)});
    at = e.offset + e.size;
  }
  shard.pread_spans(spans, start);
}

}  // namespace dtrain::image
