#pragma once
// The packed dataset format (`dtrain data pack`): an ImageFolder's files
// concatenated into a few large shards plus one index, so a loader opens a
// handful of files instead of millions and reads each image with one pread.
//
//   DIR/shard-00000.bin, shard-00001.bin, ...
//       The original JPEG/PNG bytes of each image, unchanged, back to back in
//       the folder's sample order (or its seeded shuffle: PackOptions::
//       shuffle); a shard is closed once it reaches the shard size (an image
//       never spans two shards). The index lists the samples in the order
//       they were written, so neighbours in it are neighbours in a shard
//       (Note [Runs of neighbours] in runs.h).
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
#include <memory>
#include <string>
#include <vector>

namespace dtrain {
class ImageSource;  // dtrain/image.h
}

namespace dtrain::image {

constexpr char kPackMagic[9] = "DTRPACK1";
constexpr char kPackEnd[9] = "DTRPEND1";
constexpr uint32_t kPackVersion = 1;

/// "DIR/shard-00003.bin" for shard 3.
std::string shard_path(const std::string& dir, uint32_t shard);

class Storage;  // data/image/location.h

/// open_packed (dtrain/image.h) through `storage`, the registry's. Each rank
/// reads index.bin and HEADs the shards itself; only the directory probe is
/// shared with the group (Note [Shared listing]).
std::shared_ptr<ImageSource> open_packed(std::shared_ptr<Storage> storage, const std::string& dir,
                                         const std::vector<std::string>& class_names);

}  // namespace dtrain::image
