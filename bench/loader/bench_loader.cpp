// dtrain's side of the loader benchmark: ImageLoader over an ImageFolder or a
// packed directory with RandomResizedCrop(224) + flip + normalise, as
// torchvision_loader.py does. Prints one line: images/sec.
//
//   bench_loader FOLDER_OR_PACKED [--packed] [--threads N] [--batch-size B]
//                [--epochs E] [--uint8] [--no-dct] [--no-region]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "dtrain/errors.h"
#include "dtrain/image.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s DIR [--packed] [--threads N] [--batch-size B] [--epochs E] "
                 "[--uint8] [--no-dct] [--no-region]\n",
                 argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  bool packed = false;
  int epochs = 2;
  dtrain::LoaderOptions lo;
  lo.rank = 0;  // one process reads the whole dataset
  lo.world_size = 1;
  lo.threads = 1;
  dtrain::TransformOptions t = dtrain::TransformOptions::imagenet_train(224);
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--packed")
      packed = true;
    else if (a == "--threads")
      lo.threads = value();
    else if (a == "--batch-size")
      lo.batch_size = value();
    else if (a == "--epochs")
      epochs = value();
    else if (a == "--uint8")
      t.uint8_output = true;
    else if (a == "--no-dct")
      t.dct_scaling = false;
    else if (a == "--no-region")
      t.region_decode = false;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  try {
    auto source = packed ? dtrain::open_packed(dir) : dtrain::open_image_folder(dir);
    dtrain::ImageLoader loader(source, lo, t, {});
    dtrain::Batch b;
    loader.start_epoch(0);  // warm-up epoch: page cache, allocations
    while (loader.next(b)) {
    }
    int64_t n = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int e = 1; e <= epochs; ++e) {
      loader.start_epoch(e);
      while (loader.next(b)) n += b.inputs.size(0);
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "dtrain %s threads=%d dct=%d region=%d uint8=%d images=%lld seconds=%.2f "
        "images_per_sec=%.1f\n",
        packed ? "packed" : "folder", lo.threads, int{t.dct_scaling}, int{t.region_decode},
        int{t.uint8_output}, static_cast<long long>(n), s, n / s);
    return 0;
  } catch (const dtrain::Error& e) {
    std::fprintf(stderr, "bench_loader: error: %s\n", e.what());
    return 1;
  }
}
