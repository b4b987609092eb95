// The local cache of S3 objects (Note [Data cache] in
// src/data/image/cache.cpp) on its own, with objects made up in memory:
// the bound and eviction order, partial files never served, one copy per
// object when threads race, bad options. tests/data/test_s3_data.cpp reads
// through it from moto's server.

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "data/image/cache.h"
#include "dtrain/errors.h"
#include "dtrain/object_store.h"
#include "image_fixtures.h"

namespace dtrain::image {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

// The bytes of made-up object `id`: `size` bytes, each id + offset.
std::vector<uint8_t> object_bytes(int id, int64_t size) {
  std::vector<uint8_t> out(static_cast<size_t>(size));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(id + i);
  return out;
}

// Copies object `id` into the cache (key "k<id>", ETag "e<id>"), counting reads.
File fill(const DataCache& cache, int id, int64_t size, std::atomic<int>* reads = nullptr) {
  const std::vector<uint8_t> bytes = object_bytes(id, size);
  return cache.fill("b", "k" + std::to_string(id), "e" + std::to_string(id), size,
                    [&](int64_t at, void* dst, size_t n) {
                      if (reads) ++*reads;
                      std::memcpy(dst, bytes.data() + at, n);
                    });
}

// Bytes of the copies under `objects` now (entries deleted meanwhile skipped).
int64_t copies_bytes(const std::string& objects) {
  int64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(objects, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    const auto size = it->is_regular_file(e2) ? it->file_size(e2) : 0;
    if (!e2) total += static_cast<int64_t>(size);
  }
  return total;
}

bool cached(const DataCache& cache, int id) {
  return cache.find("b", "k" + std::to_string(id), "e" + std::to_string(id)).is_open();
}

std::vector<uint8_t> read_all(const File& f) {
  std::vector<uint8_t> out(static_cast<size_t>(f.size()));
  f.pread_exact(out.data(), out.size(), 0);
  return out;
}

TEST(DataCache, ACopyHoldsTheObjectsBytesAndIsFoundByBucketKeyAndETag) {
  TempDir dir;
  DataCache cache(DataCacheOptions().set_dir(dir / "c"));
  const File f = fill(cache, 1, 1000);
  ASSERT_TRUE(f.is_open());
  EXPECT_EQ(read_all(f), object_bytes(1, 1000));
  EXPECT_EQ(read_all(cache.find("b", "k1", "e1", 1000)), object_bytes(1, 1000));
  EXPECT_FALSE(cache.find("b", "k1", "another-etag").is_open()) << "a replaced object";
  EXPECT_FALSE(cache.find("other", "k1", "e1").is_open());
  EXPECT_EQ(cache.used_bytes(), 1000);
}

TEST(DataCache, CopiesPastTheBoundEvictTheLeastRecentlyReadFirst) {
  TempDir dir;
  DataCache cache(DataCacheOptions().set_dir(dir / "c").set_max_bytes(10000));
  for (int id = 0; id < 4; ++id) ASSERT_TRUE(fill(cache, id, 2000).is_open());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(cached(cache, 0));  // read again: now the most recent
  for (int id = 4; id < 12; ++id) {
    ASSERT_TRUE(fill(cache, id, 2000).is_open()) << id;
    EXPECT_LE(cache.used_bytes(), 10000) << "after copy " << id;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_FALSE(cached(cache, 1)) << "the least recently read went first";
  EXPECT_TRUE(cached(cache, 11)) << "the newest copy stays";
  EXPECT_FALSE(fill(cache, 99, 2501).is_open()) << "over a quarter of the bound: not copied";
  EXPECT_FALSE(cache.admits(2501, "e"));
  EXPECT_FALSE(cache.admits(10, "")) << "no ETag, no key";
}

// Note [Data cache]: a copy is renamed into place only when whole.
TEST(DataCache, AHalfWrittenTemporaryFileIsNeverServedAndIsDeletedOnceItsWriterIsGone) {
  TempDir dir;
  DataCache cache(DataCacheOptions().set_dir(dir / "c"));
  const std::string hash = sha256_hex("b\nk7\ne7");
  // As a writer killed half-way leaves it (pid 2^30: no such process).
  const std::string tmp = dir / ("c/tmp/" + hash + ".1000.1073741824.0.tmp");
  {
    std::ofstream out(tmp, std::ios::binary);
    const std::vector<uint8_t> half = object_bytes(7, 500);
    out.write(reinterpret_cast<const char*>(half.data()), 500);
  }
  EXPECT_FALSE(cached(cache, 7));
  EXPECT_EQ(cache.used_bytes(), 0);
  EXPECT_FALSE(fs::exists(tmp)) << "a scan deletes it";
  EXPECT_EQ(read_all(fill(cache, 7, 1000)), object_bytes(7, 1000));
  // A copy cut short (a disk, a hand) is deleted, not served.
  fs::resize_file(dir / ("c/objects/" + hash.substr(0, 2) + "/" + hash), 10);
  EXPECT_FALSE(cache.find("b", "k7", "e7", 1000).is_open());
  EXPECT_EQ(cache.used_bytes(), 0);
}

TEST(DataCache, AFailingReadPropagatesAndLeavesNothingBehind) {
  TempDir dir;
  DataCache cache(DataCacheOptions().set_dir(dir / "c"));
  EXPECT_THROW(cache.fill("b", "k", "e", int64_t{20} << 20,
                          [](int64_t at, void*, size_t) {
                            if (at > 0) throw DataError("HTTP 412 at the second block");
                          }),
               DataError);
  EXPECT_FALSE(cache.find("b", "k", "e").is_open());
  EXPECT_TRUE(fs::is_empty(dir / "c/tmp"));
  EXPECT_EQ(cache.used_bytes(), 0);
  EXPECT_TRUE(fill(cache, 1, 100).is_open()) << "the reservation was given back";
}

// One copier per object; the others are told it is busy instead of waiting
// (and would read from the store meanwhile), then find the copy.
TEST(DataCache, ThreadsCopyingOneObjectAtOnceReadItFromTheStoreOnce) {
  TempDir dir;
  std::atomic<int> reads{0}, copied{0}, busy{0};
  const std::vector<uint8_t> bytes = object_bytes(3, 3 << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      DataCache cache(DataCacheOptions().set_dir(dir / "c"));  // as separate processes do
      bool was_busy = false;
      const File f = cache.fill(
          "b", "k3", "e3", 3 << 20,
          [&](int64_t at, void* dst, size_t n) {
            ++reads;
            std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a slow store
            std::memcpy(dst, bytes.data() + at, n);
          },
          &was_busy);
      if (f.is_open() && read_all(f) == bytes) ++copied;
      if (was_busy) ++busy;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(reads.load(), 1) << "one 3 MiB object: one block, read by one thread";
  EXPECT_EQ(copied.load() + busy.load(), 8);
  EXPECT_GE(copied.load(), 1);
  DataCache cache(DataCacheOptions().set_dir(dir / "c"));
  EXPECT_EQ(read_all(cache.find("b", "k3", "e3", 3 << 20)), bytes);
}

// Note [Data cache]: the ranks of a node share a directory. Four processes
// copy the same twenty objects in different orders into a bound of five:
// each gets the right bytes, the bound holds, nothing is left in tmp/.
TEST(DataCache, ProcessesSharingADirectoryKeepTheBoundAndServeOnlyWholeCopies) {
  TempDir dir;
  const DataCacheOptions o = DataCacheOptions().set_dir(dir / "c").set_max_bytes(10000);
  std::vector<pid_t> children;
  for (int p = 0; p < 4; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int bad = 0;
      try {
        DataCache cache(o);
        for (int i = 0; i < 20; ++i) {
          const int id = (i * (p + 1) * 7) % 20;
          const File f = fill(cache, id, 2000);
          if (f.is_open() && read_all(f) != object_bytes(id, 2000)) ++bad;
          if (copies_bytes(dir / "c/objects") > 10000) ++bad;
        }
      } catch (...) {
        bad = 100;
      }
      ::_exit(bad == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (pid_t pid : children) {
    int status = -1;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "process " << pid;
  }
  DataCache cache(o);
  EXPECT_LE(cache.used_bytes(), 10000);
  EXPECT_TRUE(fs::is_empty(dir / "c/tmp"));
  int copies = 0;
  for (int id = 0; id < 20; ++id) {
    const File f = cache.find("b", "k" + std::to_string(id), "e" + std::to_string(id), 2000);
    if (!f.is_open()) continue;
    ++copies;
    EXPECT_EQ(read_all(f), object_bytes(id, 2000)) << id;
  }
  EXPECT_GT(copies, 0);
}

TEST(DataCache, AnUnusableDirectoryOrSizeIsAnInvalidArgumentNamingTheFieldAndTheFix) {
  TempDir dir;
  std::ofstream(dir / "file") << "x";
  auto error = [](const DataCacheOptions& o) -> std::string {
    try {
      validate(o);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string under_file = error(DataCacheOptions().set_dir(dir / "file/cache"));
  EXPECT_NE(under_file.find("DataCacheOptions::dir '" + dir / "file/cache" + "'"),
            std::string::npos)
      << under_file;
  EXPECT_NE(under_file.find("fix:"), std::string::npos) << under_file;
  const std::string zero = error(DataCacheOptions().set_dir(dir / "c").set_max_bytes(0));
  EXPECT_NE(zero.find("DataCacheOptions::max_bytes must be positive"), std::string::npos) << zero;
  EXPECT_EQ(error(DataCacheOptions()), "no error") << "no directory: no cache";
}

}  // namespace
}  // namespace dtrain::image
