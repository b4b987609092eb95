#pragma once
// A long-lived reference Python (support/peer_version.h: torch and torchvision of this
// LibTorch's release) running tests/models/torchvision_peer.py: one command line in, one answer
// line out, so a whole model family is served by one interpreter. The process is killed and
// reaped when the peer goes out of scope; every answer is awaited with a timeout.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "support/peer_version.h"

namespace dtrain::testing {

/// True when the reference Python has torch and torchvision; tests skip with
/// reference_python_missing() when not.
inline bool python_has_torchvision() { return reference_python_imports("torch, torchvision"); }

class PythonPeer {
 public:
  PythonPeer() {
    // Built before fork: the child only execs (the reference Python is a shell word list).
    const std::string command =
        "exec " + reference_python() + " " DTRAIN_SOURCE_DIR "/tests/models/torchvision_peer.py";
    int to_child[2], from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0) {
      throw std::runtime_error("pipe failed");
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(to_child[0], 0);
      ::dup2(from_child[1], 1);
      ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    in_ = to_child[1];
    out_ = from_child[0];
  }
  ~PythonPeer() {
    ::close(in_);  // EOF ends the command loop
    ::close(out_);
    int status = 0;
    for (int i = 0; i < 50 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) ::usleep(100000);
    if (::waitpid(pid_, &status, WNOHANG) == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
  }
  PythonPeer(const PythonPeer&) = delete;
  PythonPeer& operator=(const PythonPeer&) = delete;

  /// Sends one command and returns the answer line (without the newline); "" when the peer
  /// died or did not answer within `timeout_s`.
  std::string ask(const std::string& command, int timeout_s = 300) {
    const std::string line = command + "\n";
    if (::write(in_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return "";
    std::string answer;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char c = 0;
      if (::read(out_, &c, 1) != 1) return "";
      if (c == '\n') return answer;
      answer += c;
    }
  }

 private:
  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
};

}  // namespace dtrain::testing
