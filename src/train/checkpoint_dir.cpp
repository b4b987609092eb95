// Checkpoint directories: atomic writes, checksum files, pruning, and finding
// the newest checkpoint that is whole.
//
// Note [Atomic checkpoints]
// A reader must never see half a checkpoint, and a crash at any instant must
// leave the previous checkpoints usable. So for checkpoint-<step>.pt:
//   1. remove an old checkpoint-<step>.pt.crc32 (same step written again),
//   2. write the bytes to <dir>/.ckpt-XXXXXX.tmp, fsync it, rename it to
//      checkpoint-<step>.pt, fsync the directory (the rename is durable),
//   3. the same for the checksum file "dtrain-checkpoint-1 size=N crc32=X",
//   4. prune: keep the newest keep_last by step, remove stray temporaries.
// A crash before 3 leaves a .pt without a checksum file, which readers skip;
// a crash in 4 leaves extra files. The checksum (zlib's CRC-32 over the whole
// file, plus its size) lives beside the .pt rather than inside it so that the
// .pt stays exactly what torch.load expects. CRC-32 catches truncation and
// flipped bytes (accidental damage), not tampering.
//
// Note [Checkpoints in object storage]
// With dir = s3://bucket/prefix a checkpoint is one object,
// <prefix>/checkpoint-<step>.pt, and there is no checksum object: S3 makes
// a PUT (and a multipart upload's Complete) visible whole or not at all, so
// a reader never sees half of one, and every upload carries Content-MD5
// (per part for multipart), so S3 refuses bytes damaged in transit. Writes
// use If-None-Match: * and never replace an object: one already at the key
// (another writer's, or an abandoned run's) fails the save by name, unless
// it holds exactly these bytes (same ETag). Resume lists the prefix's direct
// children (ListObjectsV2, delimiter '/') and reads the newest that decodes.
// Pruning deletes, by step, as on disk. Credentials, region and endpoint come
// from the environment (s3_options_from_env, dtrain/object_store.h).

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/fd.h"
#include "common/strings.h"
#include "dtrain/checkpoint.h"
#include "dtrain/errors.h"
#include "dtrain/object_store.h"

namespace dtrain {
namespace {

using detail::Fd;

constexpr char kPrefix[] = "checkpoint-";
constexpr char kSuffix[] = ".pt";
constexpr char kSumSuffix[] = ".crc32";
constexpr char kTempPrefix[] = ".ckpt-";
constexpr char kTempSuffix[] = ".tmp";
constexpr char kSumFormat[] = "dtrain-checkpoint-1 size=%" PRId64 " crc32=%08" PRIx32 "\n";

[[noreturn]] void fail(const std::string& op, const std::string& path, int err) {
  throw Error(cat("checkpoint: cannot ", op, " '", path, "': ", std::strerror(err)));
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The step in "checkpoint-<digits>.pt", or -1 for any other name.
int64_t step_of(const std::string& name) {
  const size_t p = std::strlen(kPrefix), s = std::strlen(kSuffix);
  if (name.size() <= p + s || name.compare(0, p, kPrefix) != 0 || !ends_with(name, kSuffix)) {
    return -1;
  }
  const std::string digits = name.substr(p, name.size() - p - s);
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

uint32_t crc32_of(const char* data, size_t n) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(data), chunk);
    data += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

void fsync_dir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail("open directory", dir, errno);
  if (::fsync(fd.get()) != 0 && errno != EINVAL) fail("fsync directory", dir, errno);
}

// A temporary file in `dir` that is removed unless renamed into place.
class TempFile {
 public:
  explicit TempFile(const std::string& dir)
      : path_(cat(dir, "/", kTempPrefix, "XXXXXX", kTempSuffix)),
        fd_(::mkstemps(path_.data(), static_cast<int>(std::strlen(kTempSuffix)))) {
    if (fd_.get() < 0) fail("create a temporary file in", dir, errno);
    ::fchmod(fd_.get(), 0644);  // mkstemps makes it 0600; checkpoints are shared
  }
  ~TempFile() {
    if (!renamed_) ::unlink(path_.c_str());
  }

  void write_all(const char* data, size_t n, const std::string& target) {
    while (n > 0) {
      const ssize_t w = ::write(fd_.get(), data, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) fail("write", target, errno);
      data += w;
      n -= static_cast<size_t>(w);
    }
  }

  void sync_close_rename(const std::string& target) {
    if (::fsync(fd_.get()) != 0) fail("fsync", target, errno);
    if (fd_.close() != 0) fail("close", target, errno);
    if (::rename(path_.c_str(), target.c_str()) != 0) fail("rename into place", target, errno);
    renamed_ = true;
  }

 private:
  std::string path_;
  Fd fd_;
  bool renamed_ = false;
};

void write_atomically(const std::string& dir, const std::string& target, const char* data,
                      size_t n) {
  TempFile tmp(dir);
  tmp.write_all(data, n, target);
  tmp.sync_close_rename(target);
  fsync_dir(dir);
}

// Reads `path` whole; "" or why not.
std::string read_all(const std::string& path, std::vector<char>& out) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return std::strerror(errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return std::strerror(errno);
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::read(fd.get(), out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return std::strerror(errno);
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return "";
}

// Why `bytes` (the contents of `path`) do not match the checksum file, or "".
std::string check(const std::string& path, const std::vector<char>& bytes) {
  std::vector<char> sum;
  const std::string sum_path = path + kSumSuffix;
  if (!read_all(sum_path, sum).empty()) {
    return cat("no readable checksum file ", sum_path, " (the write did not finish)");
  }
  sum.push_back('\0');
  int64_t size = -1;
  uint32_t crc = 0;
  if (std::sscanf(sum.data(), "dtrain-checkpoint-1 size=%" SCNd64 " crc32=%" SCNx32, &size, &crc) !=
      2) {
    return cat("checksum file ", sum_path, " is not 'dtrain-checkpoint-1 size=N crc32=X'");
  }
  const int64_t have = static_cast<int64_t>(bytes.size());
  if (have != size) {
    return cat(have < size ? "truncated: " : "wrong size: ", have,
               " bytes, the checksum file says ", size);
  }
  const uint32_t actual = crc32_of(bytes.data(), bytes.size());
  if (actual != crc) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%08" PRIx32 ", the checksum file says %08" PRIx32, actual,
                  crc);
    return cat("checksum mismatch (corrupt): crc32 ", buf);
  }
  return "";
}

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) fail("remove", path, errno);
}

/// Keeps `just_written` and the newest keep_last - 1 before it. Checkpoints of
/// later steps belong to a run that was abandoned (this one resumed from an
/// earlier step, so they were invalid or unfinished) and go too: otherwise
/// they would count against keep_last and push out the valid ones. Best
/// effort: the save has already succeeded, a file that cannot be removed now
/// is tried again at the next save.
void prune(const std::string& dir, const std::string& just_written, int keep_last) {
  std::vector<std::string> all;
  try {
    all = list_checkpoints(dir);
  } catch (const std::exception&) {
    return;
  }
  const int64_t newest = step_of(std::filesystem::path(just_written).filename().string());
  int kept = 0;
  for (const auto& path : all) {
    const int64_t step = step_of(std::filesystem::path(path).filename().string());
    if (step <= newest && kept < keep_last) {
      ++kept;
      continue;
    }
    ::unlink((path + kSumSuffix).c_str());  // first: a .pt without one is already invalid
    ::unlink(path.c_str());
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kTempPrefix, 0) == 0 && ends_with(name, kTempSuffix)) {
      ::unlink(e.path().c_str());
    }
  }
}

// ---- s3://bucket/prefix (Note [Checkpoints in object storage]) ----------------

struct S3Dir {
  S3Uri uri;
  std::string prefix;  // "" or ending in '/'
  S3Client client;
  explicit S3Dir(const std::string& dir)
      : uri(S3Uri::parse(dir)), prefix(uri.key), client(s3_options_from_env()) {
    if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  }
  std::string url(const std::string& key) const { return cat("s3://", uri.bucket, "/", key); }
};

// Checkpoint objects directly under the prefix, newest first, as (step, key).
std::vector<std::pair<int64_t, std::string>> s3_list(S3Dir& d) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::string token;
  do {
    ListPage page = d.client.list_objects_page(d.uri.bucket, d.prefix, token, 1000, "/");
    for (const auto& object : page.objects) {
      const int64_t step = step_of(object.key.substr(d.prefix.size()));
      if (step >= 0) found.emplace_back(step, object.key);
    }
    token = page.next_continuation_token;
  } while (!token.empty());
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  return found;
}

std::string s3_save(const std::string& dir, const std::vector<char>& bytes, int64_t step,
                    int keep_last) {
  S3Dir d(dir);
  const std::string key =
      d.prefix + std::filesystem::path(checkpoint_path("", step)).filename().string();
  const std::string url = d.url(key);
  const std::string_view data(bytes.data(), bytes.size());
  PutOptions once;
  once.if_none_match = true;
  try {
    d.client.put_object(d.uri.bucket, key, data, once);
  } catch (const PreconditionFailedError&) {
    const ObjectInfo there = d.client.head_object(d.uri.bucket, key);
    // Ours when the answer to our own (multipart) upload was lost and the
    // retry met the stored object.
    if (there.etag != put_object_etag(data, d.client.options())) {
      throw Error(cat("checkpoint: ", url, " already exists and is never replaced (If-None-Match)",
                      "; fix: remove it (aws s3 rm ", url,
                      ") or use another checkpoint directory"));
    }
  }
  // Prune as on disk (prune() above): keep the newest keep_last at or below
  // this step. Best effort: the save has succeeded.
  try {
    int kept = 0;
    for (const auto& [other_step, other_key] : s3_list(d)) {
      if (other_step <= step && kept < keep_last) {
        ++kept;
        continue;
      }
      d.client.delete_object(d.uri.bucket, other_key);
    }
  } catch (const ObjectStoreError&) {
  }
  return url;
}

std::optional<LoadedCheckpoint> s3_load_latest(const std::string& dir,
                                               std::vector<std::string>* skipped) {
  S3Dir d(dir);
  for (const auto& [step, key] : s3_list(d)) {
    const std::string url = d.url(key);
    std::string why;
    try {
      GetResult got = d.client.get_object(d.uri.bucket, key);
      const std::vector<char> bytes(got.data.begin(), got.data.end());
      return LoadedCheckpoint{url, decode_checkpoint(bytes, url)};
    } catch (const ObjectNotFoundError&) {
      why = "removed while it was being read";
    } catch (const DataError& e) {
      const std::string msg = e.what();
      why = msg.rfind(url + ": ", 0) == 0 ? msg.substr(url.size() + 2) : msg;
    }
    if (skipped) skipped->push_back(cat(url, ": ", why));
  }
  return std::nullopt;
}

}  // namespace

std::string checkpoint_path(const std::string& dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s%08" PRId64 "%s", kPrefix, step, kSuffix);
  return dir + "/" + name;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  if (S3Uri::is_s3_location(dir)) {
    S3Dir d(dir);
    std::vector<std::string> out;
    for (const auto& [step, key] : s3_list(d)) out.push_back(d.url(key));
    return out;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return {};
  std::vector<std::pair<int64_t, std::string>> found;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0) found.emplace_back(step, e.path().string());
  }
  if (ec) throw Error(cat("checkpoint: cannot list '", dir, "': ", ec.message()));
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string save_checkpoint(const std::string& dir, const Checkpoint& checkpoint, int keep_last) {
  if (keep_last < 1) throw InvalidArgument(cat("keep_last must be >= 1, got ", keep_last));
  if (checkpoint.step < 0) {
    throw InvalidArgument(cat("checkpoint step must be >= 0, got ", checkpoint.step));
  }
  if (S3Uri::is_s3_location(dir)) {
    S3Uri::parse(dir);  // a bad location fails before the encoding
    return s3_save(dir, encode_checkpoint(checkpoint), checkpoint.step, keep_last);
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(cat("checkpoint: cannot create directory '", dir, "': ", ec.message()));
  const std::vector<char> bytes = encode_checkpoint(checkpoint);
  const std::string path = checkpoint_path(dir, checkpoint.step);
  char sum[128];
  const int len = std::snprintf(sum, sizeof(sum), kSumFormat, static_cast<int64_t>(bytes.size()),
                                crc32_of(bytes.data(), bytes.size()));
  remove_file(path + kSumSuffix);
  write_atomically(dir, path, bytes.data(), bytes.size());
  write_atomically(dir, path + kSumSuffix, sum, static_cast<size_t>(len));
  prune(dir, path, keep_last);
  return path;
}

std::string verify_checkpoint_file(const std::string& path) {
  if (S3Uri::is_s3_location(path)) {
    // S3 stores objects whole (Note [Checkpoints in object storage]): one
    // that exists is complete.
    try {
      const S3Uri uri = S3Uri::parse(path);
      S3Client(s3_options_from_env()).head_object(uri.bucket, uri.key);
      return "";
    } catch (const ObjectStoreError& e) {
      return e.what();
    }
  }
  std::vector<char> bytes;
  const std::string err = read_all(path, bytes);
  if (!err.empty()) return cat("cannot read: ", err);
  return check(path, bytes);
}

std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& dir,
                                                       std::vector<std::string>* skipped) {
  if (S3Uri::is_s3_location(dir)) return s3_load_latest(dir, skipped);
  for (const std::string& path : list_checkpoints(dir)) {
    std::vector<char> bytes;
    std::string why = read_all(path, bytes);
    if (!why.empty()) why = cat("cannot read: ", why);
    if (why.empty()) why = check(path, bytes);
    if (why.empty()) {
      try {
        return LoadedCheckpoint{path, decode_checkpoint(bytes, path)};
      } catch (const DataError& e) {
        // decode_checkpoint names the path first; keep only the reason.
        const std::string msg = e.what();
        why = msg.rfind(path + ": ", 0) == 0 ? msg.substr(path.size() + 2) : msg;
      }
    }
    if (skipped) skipped->push_back(cat(path, ": ", why));
  }
  return std::nullopt;
}

}  // namespace dtrain
