// The local cache of S3 objects behind Storage (DataCacheOptions).
//
// Note [Data cache]
// What is cached: whole objects. The first read of an object copies all of
// it (ranged GETs of 8 MiB carrying the listing's ETag, written to disk as
// they arrive, so memory stays bounded); every later read -- later epochs,
// later runs, other ranks of the node -- reads the copy. A packed or tar
// shard is read by ranges, but the ranks of a node together read all of
// it in an epoch, and a WebDataset shard is read whole anyway when it is
// indexed, so whole objects cost no extra traffic over an epoch; caching
// ranges would need a map of holes per object. While the first thread
// copies a shard, the process's other threads read it by ranges from S3.
// An object larger than a quarter of the bound, or without an ETag, is not
// copied (read as without a cache).
//
// Keys: SHA-256 of bucket, key and ETag name the copy
// (objects/<2 hex>/<64 hex>), so an object replaced in the bucket (a new
// ETag in the listing or HEAD) is a different copy: never served stale. A
// copy whose size is not the object's is deleted instead of served.
//
// Crash safety: a copy is written as tmp/<hash>.<size>.<pid>.<n>.tmp and
// renamed into objects/ when complete; readers only open objects/, so a
// partial file is never served. A temporary file whose writer process is
// gone is deleted at the next scan.
//
// Processes sharing the directory (the ranks of a node; one PID namespace,
// a local filesystem): the copy of one object is made by one of them at a
// time -- an OFD lock (fcntl F_OFD_SETLK, per open file, so threads too) on
// the byte hash mod 2^20 of the file `locks`. Nobody waits for it: a reader
// that finds it held reads by ranges from S3 and looks for the copy again
// at its next read, so a loader thread never stalls on another's download.
//
// The bound: the file `bytes` holds the bytes reserved, under flock. Making
// a copy first creates its temporary file (so every scan sees it), then
// reserves its size; when the reservation would pass
// max_bytes, the reserving process scans tmp/ (writes in flight count with
// the size in their names) and objects/, and deletes the copies read least
// recently (each read sets a copy's mtime) until the total is 90% of the
// bound less the new copy; the total it finds replaces the file's count. A
// copy that cannot fit is not made. Counts only err high (a crashed write,
// two processes renaming the same copy): the directory never holds more
// than max_bytes of copies, and a scan corrects the count.

#include "data/image/cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>
#include <vector>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/object_store.h"

namespace dtrain {

void validate(const DataCacheOptions& o) {
  if (o.max_bytes <= 0) {
    throw InvalidArgument(cat("DataCacheOptions::max_bytes must be positive, got ", o.max_bytes,
                              "; fix: give the cache's size, e.g. 50G"));
  }
  if (o.dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(o.dir, ec);
  if (ec || !image::is_directory(o.dir)) {
    throw InvalidArgument(cat("DataCacheOptions::dir '", o.dir, "' cannot be made (",
                              ec ? ec.message() : "not a directory",
                              "); fix: choose a writable directory on a local disk"));
  }
  std::string probe = o.dir + "/.dtrain-probe-XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    throw InvalidArgument(cat("DataCacheOptions::dir '", o.dir, "' is not writable (",
                              std::strerror(errno),
                              "); fix: choose a writable directory on a local disk"));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

namespace image {
namespace {

using CacheClock = std::chrono::steady_clock;
constexpr int64_t kCacheBlock = int64_t{8} << 20;
constexpr auto kCountLockTimeout = std::chrono::seconds(60);
constexpr auto kLockPoll = std::chrono::milliseconds(10);

// A descriptor closed on destruction (its OFD and flock locks go with it).
struct CacheFd {
  int fd = -1;
  explicit CacheFd(int f) : fd(f) {}
  ~CacheFd() {
    if (fd >= 0) ::close(fd);
  }
  CacheFd(const CacheFd&) = delete;
  CacheFd& operator=(const CacheFd&) = delete;
};

// Note [Data cache]: the write lock of one byte of the lock file, without
// waiting. False when another thread or process holds it.
bool lock_cache_byte(const CacheFd& f, int64_t byte) {
  struct flock l;
  std::memset(&l, 0, sizeof l);
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  l.l_start = byte;
  l.l_len = 1;
  int rc;
  do {
    rc = ::fcntl(f.fd, F_OFD_SETLK, &l);
  } while (rc != 0 && errno == EINTR);
  return rc == 0;
}

bool flock_cache_file(const CacheFd& f) {
  const auto deadline = CacheClock::now() + kCountLockTimeout;
  while (::flock(f.fd, LOCK_EX | LOCK_NB) != 0) {
    if ((errno != EWOULDBLOCK && errno != EINTR) || CacheClock::now() > deadline) return false;
    std::this_thread::sleep_for(kLockPoll);
  }
  return true;
}

int64_t read_cache_count(int fd) {
  char text[32] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  long long v = -1;
  if (n <= 0 || !parse_int(std::string_view(text, static_cast<size_t>(n)), &v) || v < 0) return -1;
  return v;
}

void write_cache_count(int fd, int64_t v) {
  const std::string text = std::to_string(v);
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    throw DataError(cat("cannot write the data cache's byte count: ", std::strerror(errno)));
  }
}

bool cache_writer_alive(long long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

DataCache::DataCache(DataCacheOptions options) : options_(std::move(options)) {
  validate(options_);
  objects_ = options_.dir + "/objects";
  tmp_ = options_.dir + "/tmp";
  lock_file_ = options_.dir + "/locks";
  bytes_file_ = options_.dir + "/bytes";
  try {
    make_dirs(objects_);
    make_dirs(tmp_);
  } catch (const DataError& e) {
    throw InvalidArgument(cat("DataCacheOptions::dir: ", e.what(),
                              "; fix: choose a writable directory on a local disk"));
  }
}

bool DataCache::admits(int64_t size, const std::string& etag) const {
  return !etag.empty() && size >= 0 && size <= options_.max_bytes / 4;
}

std::string DataCache::object_path(const std::string& hash) const {
  return cat(objects_, "/", hash.substr(0, 2), "/", hash);
}

File DataCache::find(const std::string& bucket, const std::string& key, const std::string& etag,
                     int64_t size) const {
  const std::string path = object_path(sha256_hex(cat(bucket, '\n', key, '\n', etag)));
  File f = File::open_if_exists(path);
  if (!f.is_open()) return f;
  if (size >= 0 && f.size() != size) {
    ::unlink(path.c_str());  // damaged (a disk or a hand): never served
    return File();
  }
  ::futimens(f.fd(), nullptr);  // just read: evicted last
  return f;
}

File DataCache::fill(const std::string& bucket, const std::string& key, const std::string& etag,
                     int64_t size, const std::function<void(int64_t, void*, size_t)>& read,
                     bool* busy) const {
  if (busy) *busy = false;
  if (!admits(size, etag)) return File();
  if (File f = find(bucket, key, etag, size); f.is_open()) return f;
  const std::string hash = sha256_hex(cat(bucket, '\n', key, '\n', etag));
  const std::string path = object_path(hash);
  CacheFd lock(::open(lock_file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock.fd < 0) {
    warn_once(cat("cannot open '", lock_file_, "': ", std::strerror(errno)));
    return File();
  }
  if (!lock_cache_byte(lock, static_cast<int64_t>(std::stoul(hash.substr(0, 5), nullptr, 16)))) {
    if (busy) *busy = true;  // another thread or process is copying it: read from S3
    return File();
  }
  if (File f = find(bucket, key, etag, size); f.is_open()) return f;
  // The temporary file exists before its size is reserved, so a scan that
  // resets the count always sees it (Note [Data cache]).
  const std::string tmp =
      cat(tmp_, "/", hash, ".", size, ".", ::getpid(), ".", next_tmp_++, ".tmp");
  File out;
  bool reserved = false;
  try {
    make_dirs(path.substr(0, path.rfind('/')));
    out = File::create(tmp);
    reserved = reserve(size);
  } catch (const DataError& e) {
    warn_once(e.what());
  }
  if (!reserved) {
    ::unlink(tmp.c_str());
    return File();
  }
  bool reading = false;
  try {
    std::vector<uint8_t> block(static_cast<size_t>(std::min(size, kCacheBlock)));
    for (int64_t at = 0; at < size; at += kCacheBlock) {
      const size_t n = static_cast<size_t>(std::min(kCacheBlock, size - at));
      reading = true;
      read(at, block.data(), n);  // may throw: the object's error
      reading = false;
      out.write_all(block.data(), n);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      throw DataError(cat("cannot rename '", tmp, "': ", std::strerror(errno)));
    }
  } catch (const std::exception& e) {
    try {
      release(size);  // before the unlink: a scan meanwhile counts it again, never misses it
    } catch (const DataError&) {
    }
    ::unlink(tmp.c_str());
    if (reading) throw;  // the object's read failed, not the cache
    warn_once(e.what());
    return File();
  }
  return File::open_if_exists(path);
}

bool DataCache::reserve(int64_t size) const {
  CacheFd f(::open(bytes_file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (f.fd < 0) throw DataError(cat("cannot open '", bytes_file_, "': ", std::strerror(errno)));
  if (!flock_cache_file(f)) return false;
  int64_t total = read_cache_count(f.fd);
  if (total < 0 || total + size > options_.max_bytes) total = scan_and_evict(size);
  if (total + size > options_.max_bytes) {
    write_cache_count(f.fd, total);
    return false;
  }
  write_cache_count(f.fd, total + size);
  return true;
}

void DataCache::release(int64_t size) const {
  CacheFd f(::open(bytes_file_.c_str(), O_RDWR | O_CLOEXEC));
  if (f.fd < 0 || !flock_cache_file(f)) return;
  const int64_t total = read_cache_count(f.fd);
  if (total >= 0) write_cache_count(f.fd, std::max<int64_t>(0, total - size));
}

int64_t DataCache::used_bytes() const { return scan_and_evict(-1); }

// Note [Data cache]: called with `bytes` locked (or for used_bytes, where
// `need` < 0 evicts nothing). tmp/ first, so a copy renamed during the scan
// counts twice rather than never.
int64_t DataCache::scan_and_evict(int64_t need) const {
  namespace fs = std::filesystem;
  int64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(tmp_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::vector<std::string> parts = split(it->path().filename().string(), '.');
    long long bytes = 0, pid = 0;
    if (parts.size() == 5 && parse_int(parts[1], &bytes) && parse_int(parts[2], &pid) &&
        cache_writer_alive(pid)) {
      total += bytes;
    } else {
      fs::remove(it->path(), ec);  // its writer is gone
      ec.clear();
    }
  }
  struct Copy {
    fs::file_time_type read;
    int64_t size;
    fs::path path;
  };
  std::vector<Copy> copies;
  ec.clear();
  for (fs::recursive_directory_iterator it(objects_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (!it->is_regular_file(e2)) continue;
    const auto bytes = it->file_size(e2);
    const auto when = it->last_write_time(e2);
    if (e2) continue;  // deleted by another process meanwhile
    copies.push_back({when, static_cast<int64_t>(bytes), it->path()});
    total += static_cast<int64_t>(bytes);
  }
  if (need < 0 || total + need <= options_.max_bytes) return total;
  std::sort(copies.begin(), copies.end(),
            [](const Copy& a, const Copy& b) { return a.read < b.read; });
  const int64_t low_water = options_.max_bytes - options_.max_bytes / 10 - need;
  for (const Copy& c : copies) {
    if (total <= low_water) break;
    std::error_code e2;
    if (fs::remove(c.path, e2)) total -= c.size;
  }
  return total;
}

void DataCache::warn_once(const std::string& what) const {
  if (warned_.exchange(true)) return;
  std::cerr << "dtrain: warning: data cache '" << options_.dir << "': " << first_line(what)
            << "; reading from S3 instead\n";
}

}  // namespace image
}  // namespace dtrain
