// dtrain's side of the loader benchmarks: ImageLoader over an ImageFolder or a
// packed directory (local, or `s3://bucket/prefix` with credentials and
// endpoint from the environment) with RandomResizedCrop(224) + flip +
// normalise, as torchvision_loader.py and bench/s3/s3torchconnector_loader.py
// do. Prints one line: images/sec, and the process's CPU seconds over the
// timed epochs.
//
//   bench_loader FOLDER_OR_PACKED [--packed] [--threads N] [--batch-size B]
//                [--epochs E] [--uint8] [--no-dct] [--no-region]
//                [--fetch-threads N] [--fetch-only] [--shuffle-block K]
//
// --fetch-threads: ImageLoaderOptions::fetch_threads (default -1: 16 for s3://).
// --fetch-only: read every sample's bytes and decode nothing, on --fetch-threads
// threads (16 when not given), to measure the client's own cost per byte;
// with --shuffle-block K, K neighbours a request where the source allows.
// --shuffle-block: LoaderOptions::shuffle_block (Note [Block order]); a packed
// or WebDataset source then reads each block of K neighbours with one request.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/errors.h"
#include "dtrain/image.h"

namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Every sample's bytes read once per epoch, by `threads` threads taking
// runs of up to `block` neighbours in turn (ImageSource::run_length and
// read_run: one request a run; block 1, one a sample); returns the bytes read.
int64_t fetch_epochs(const dtrain::ImageSource& source, int threads, int epochs, int64_t block) {
  std::atomic<int64_t> next{0}, bytes{0};
  const int64_t n = source.size(), blocks = (n + block - 1) / block, total = blocks * epochs;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      std::vector<dtrain::SampleData> run(static_cast<size_t>(block));
      for (int64_t b; (b = next++) < total;) {
        const int64_t first = b % blocks * block, end = std::min(n, first + block);
        for (int64_t i = first; i < end;) {
          const int64_t count = source.run_length(i, end - i);
          source.read_run(i, count, run.data());
          for (int64_t k = 0; k < count; ++k) bytes += static_cast<int64_t>(run[k].bytes.size());
          i += count;
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s DIR [--packed] [--threads N] [--batch-size B] [--epochs E] "
                 "[--uint8] [--no-dct] [--no-region] [--fetch-threads N] [--fetch-only] "
                 "[--shuffle-block K]\n",
                 argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  bool packed = false;
  bool fetch_only = false;
  int epochs = 2;
  dtrain::ImageLoaderOptions io;
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
    else if (a == "--fetch-threads")
      io.fetch_threads = value();
    else if (a == "--fetch-only")
      fetch_only = true;
    else if (a == "--shuffle-block")
      lo.shuffle_block = std::max(1, value());
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  try {
    auto source = packed ? dtrain::open_packed(dir) : dtrain::open_image_folder(dir);
    if (fetch_only) {
      const int threads = io.fetch_threads > 0 ? io.fetch_threads : 16;
      fetch_epochs(*source, threads, 1, lo.shuffle_block);  // warm-up: connections
      const double cpu0 = cpu_seconds();
      const auto start = std::chrono::steady_clock::now();
      const int64_t bytes = fetch_epochs(*source, threads, epochs, lo.shuffle_block);
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const int64_t n = source->size() * epochs;
      std::printf(
          "dtrain fetch-only threads=%d images=%lld seconds=%.2f images_per_sec=%.1f "
          "cpu_seconds=%.2f bytes=%lld\n",
          threads, static_cast<long long>(n), s, n / s, cpu_seconds() - cpu0,
          static_cast<long long>(bytes));
      return 0;
    }
    dtrain::ImageLoader loader(source, lo, t, io);
    dtrain::Batch b;
    loader.start_epoch(0);  // warm-up epoch: page cache, allocations
    while (loader.next(b)) {
    }
    int64_t n = 0;
    const double cpu0 = cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    for (int e = 1; e <= epochs; ++e) {
      loader.start_epoch(e);
      while (loader.next(b)) n += b.inputs.size(0);
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "dtrain %s threads=%d fetch_threads=%d dct=%d region=%d uint8=%d images=%lld "
        "seconds=%.2f images_per_sec=%.1f cpu_seconds=%.2f\n",
        packed ? "packed" : "folder", lo.threads, io.fetch_threads, int{t.dct_scaling},
        int{t.region_decode}, int{t.uint8_output}, static_cast<long long>(n), s, n / s,
        cpu_seconds() - cpu0);
    return 0;
  } catch (const dtrain::Error& e) {
    std::fprintf(stderr, "bench_loader: error: %s\n", e.what());
    return 1;
  }
}
