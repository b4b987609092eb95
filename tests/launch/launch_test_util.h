#pragma once
// Shared helpers for the launcher tests: a temporary directory, output files,
// and checks that a process is gone.

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/launch.h"
#include "dtrain/store.h"

namespace dtrain::testing {

/// A fresh directory, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "dtrain-launch-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// True while `pid` exists and is not a zombie.
inline bool process_alive(int pid) {
  if (::kill(pid, 0) != 0) return false;
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'Z';
}

/// `lines` joined by newlines (a launch result's summary, for a failure message).
inline std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  return text;
}

/// A port 127.0.0.1 can bind now, searched from `first` plus this process's
/// pid modulo 800 in steps of `step` (each program its own range, so that
/// programs running side by side rarely pick the same one); 0 when none is.
inline int free_port_from(int first, int step) {
  for (int port = first + (::getpid() % 800); port < 65000; port += step) {
    if (port_is_free(port)) return port;
  }
  return 0;
}

/// Waits up to `timeout` for `pred`; returns its last value.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

/// Options running the scriptable test worker with `steps`, with output sent
/// to files in `dir` (read them back with out() / err()).
class WorkerRun {
 public:
  WorkerRun(const TempDir& dir, int nproc, std::vector<std::string> steps) : dir_(dir) {
    options.nproc_per_node = nproc;
    options.command = {LAUNCH_TEST_WORKER};
    options.command.insert(options.command.end(), steps.begin(), steps.end());
    out_fd_ = ::open(dir.file("out.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    err_fd_ = ::open(dir.file("err.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    options.stdout_fd = out_fd_;
    options.stderr_fd = err_fd_;
    options.handle_signals = false;
  }
  ~WorkerRun() {
    ::close(out_fd_);
    ::close(err_fd_);
  }
  std::string out() const { return read_file(dir_.file("out.txt")); }
  std::string err() const { return read_file(dir_.file("err.txt")); }

  LaunchOptions options;

 private:
  const TempDir& dir_;
  int out_fd_ = -1;
  int err_fd_ = -1;
};

}  // namespace dtrain::testing
