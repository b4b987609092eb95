#pragma once
// Helpers shared by the libFuzzer targets (fuzz/CMakeLists.txt).

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::fuzz {

/// Stops the run with a message: the harness found a wrong result (not a
/// crash), which libFuzzer records as a crash input all the same.
[[noreturn]] inline void fail(const std::string& why) {
  std::fprintf(stderr, "fuzz: %s\n", why.c_str());
  std::abort();
}

/// Splits the input into parts at a separator (how multi-part inputs are
/// written in the corpora: one separator line between parts).
inline std::vector<std::string_view> split_parts(std::string_view in, std::string_view sep) {
  std::vector<std::string_view> parts;
  size_t at = 0;
  while (true) {
    size_t next = in.find(sep, at);
    if (next == std::string_view::npos) {
      parts.push_back(in.substr(at));
      return parts;
    }
    parts.push_back(in.substr(at, next - at));
    at = next + sep.size();
  }
}

/// A file holding `bytes` in memory (memfd), for parsers that take a path:
/// /proc/self/fd/N. Closed when destroyed.
class MemFile {
 public:
  explicit MemFile(std::string_view bytes) {
    fd_ = memfd_create("fuzz", 0);
    if (fd_ < 0) fail("memfd_create failed");
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n <= 0) fail("write to memfd failed");
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace dtrain::fuzz

namespace dtrain::fuzz {

/// A private folder for one fuzzing process (in /dev/shm when it exists),
/// removed at exit. Parsers that open folders of files get it.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/dtrain-fuzz.XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) fail("mkdtemp failed");
    std::string made = tmpl;
    static std::string to_remove = made;
    std::atexit([] { std::system(("rm -rf '" + to_remove + "'").c_str()); });
    return made;
  }();
  return dir;
}

/// Writes `bytes` to `path` (replacing it).
inline void write_file(const std::string& path, std::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) fail("cannot write " + path);
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    fail("short write to " + path);
  }
  std::fclose(f);
}

}  // namespace dtrain::fuzz
