#pragma once
// Helpers of the observe tests: a temporary directory and running a program
// for its standard output.

#include <stdlib.h>

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace dtrain::testing {

/// A fresh directory, removed with its contents on destruction.
class ObserveTempDir {
 public:
  ObserveTempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "dtrain-observe-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~ObserveTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ObserveTempDir(const ObserveTempDir&) = delete;
  ObserveTempDir& operator=(const ObserveTempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Runs `command` through the shell; returns its exit status and fills
/// *output with its standard output.
inline int run_command(const std::string& command, std::string* output) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  std::array<char, 4096> buf;
  output->clear();
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) output->append(buf.data(), n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace dtrain::testing
