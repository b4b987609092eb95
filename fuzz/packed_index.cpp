// Fuzz target: the packed dataset's index.bin (src/data/image/packed.h), read
// by open_packed() beside four shard files of 256 KiB each (the seeds' images
// lie in shard 0).
//
// Every rejection must be a DataError naming the index or the folder; an
// accepted index must give every sample a label among the classes and a
// readable byte range inside its shard.
#include <cstdint>
#include <string>

#include "dtrain/errors.h"
#include "dtrain/image.h"
#include "fuzz/fuzz_util.h"

using dtrain::fuzz::fail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = dtrain::fuzz::scratch_dir() + "/pack";
  static const bool made = [&] {
    std::system(("mkdir -p '" + dir + "'").c_str());
    for (int s = 0; s < 4; ++s) {
      char name[32];
      std::snprintf(name, sizeof(name), "/shard-%05d.bin", s);
      dtrain::fuzz::write_file(dir + name, std::string(256 << 10, static_cast<char>('a' + s)));
    }
    return true;
  }();
  (void)made;
  dtrain::fuzz::write_file(dir + "/index.bin",
                           std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    auto source = dtrain::open_packed(dir, {});
    dtrain::SampleData sample;
    for (int64_t i = 0; i < source->size(); ++i) {
      const int64_t label = source->label(i);
      if (label < 0 || label >= static_cast<int64_t>(source->classes().size())) {
        fail("a sample's label is outside the classes");
      }
      source->read(i, sample);
      if (!sample.encoded) fail("a packed sample that is not encoded bytes");
      (void)source->name(i);
    }
  } catch (const dtrain::DataError& e) {
    if (std::string(e.what()).find(dir) == std::string::npos) fail("error does not name the pack");
  }
  return 0;
}
