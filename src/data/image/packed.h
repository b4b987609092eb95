#pragma once
// The packed dataset format (`dtrain data pack`): an ImageFolder's files
// concatenated into a few large shards plus one index, so a loader opens a
// handful of files instead of millions and reads each image with one pread.
//
//   DIR/shard-00000.bin, shard-00001.bin, ...
//       The original JPEG/PNG bytes of each image, unchanged, back to back in
//       the folder's sample order; a shard is closed once it reaches the
//       shard size (an image never spans two shards).
//   DIR/index.bin, all integers little-endian:
//       char[8]  magic "DTRPACK1"
//       u32      version (1)
//       u32      number of shards S
//       u32      number of classes K
//       u64      number of samples N
//       K times  u16 length, bytes      class name (label = position)
//       N times  u32 shard, u64 offset, u32 size, u32 label,
//                u16 length, bytes      path relative to the folder
//       char[8]  end marker "DTRPEND1"
//   The index is written last, under a temporary name, and renamed into place,
//   so a directory with index.bin holds a complete pack.

#include <cstdint>
#include <string>

namespace dtrain::image {

constexpr char kPackMagic[9] = "DTRPACK1";
constexpr char kPackEnd[9] = "DTRPEND1";
constexpr uint32_t kPackVersion = 1;

/// "DIR/shard-00003.bin" for shard 3.
std::string shard_path(const std::string& dir, uint32_t shard);

}  // namespace dtrain::image
