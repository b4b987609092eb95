#pragma once
// Test support for tests/objstore: the Python venv of scripts/s3-test-env.sh
// (boto3, botocore, moto), servers started on loopback as child processes
// (moto's, and fault_proxy.py in front of it), and the Python side
// (s3_peer.py) run with JSON in and out.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../support/http.h"
#include "../support/shell.h"

namespace dtrain::testing {

/// The venv's folder, or "" when it has not been made (tests then skip,
/// naming scripts/s3-test-env.sh).
inline std::string s3_test_venv() {
  ShellRun r = run_shell("bash " DTRAIN_SOURCE_DIR "/scripts/s3-test-env.sh --path 2>/dev/null");
  std::string path = r.output.substr(0, r.output.find('\n'));
  if (r.code != 0 || path.empty()) return "";
  ShellRun check = run_shell("timeout 60 '" + path + "/bin/python' -c 'import boto3, moto' 2>&1");
  return check.code == 0 ? path : "";
}

inline const char* kNoVenv = "no S3 test venv (boto3, moto): run scripts/s3-test-env.sh to make it";

/// A child process killed (TERM, then KILL) and reaped on destruction.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      int null = open("/dev/null", O_RDWR);
      dup2(null, STDIN_FILENO);
      dup2(null, STDOUT_FILENO);
      dup2(null, STDERR_FILENO);
      for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~ChildProcess() {
    if (pid_ <= 0) return;
    kill(-pid_, SIGTERM);
    for (int i = 0; i < 50; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

 private:
  pid_t pid_ = -1;
};

/// Waits (up to `seconds`) until something accepts connections on the port.
inline bool wait_for_port(int port, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (ok) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

/// Single-quotes `text` for /bin/sh.
inline std::string sh_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// Runs s3_peer.py with `args` (shell-quoted by the caller) and `input` as
/// JSON on stdin; returns its JSON answer, or throws with its output.
inline nlohmann::json run_peer(const std::string& venv, const std::string& args,
                               const nlohmann::json& input = nullptr) {
  char path[] = "/tmp/dtrain-s3-peer-XXXXXX";
  int fd = mkstemp(path);
  std::string text = input.dump();
  if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    throw std::runtime_error("cannot write the peer's input");
  }
  close(fd);
  ShellRun r = run_shell("timeout 120 '" + venv +
                         "/bin/python' " DTRAIN_SOURCE_DIR "/tests/objstore/s3_peer.py " + args +
                         " < " + path + " 2>&1");
  unlink(path);
  if (r.code != 0) throw std::runtime_error("s3_peer.py " + args + " failed: " + r.output);
  return nlohmann::json::parse(r.output);
}

/// moto's S3/IAM server on a free loopback port, checking SigV4 against the
/// IAM user `s3_peer.py setup` makes (INITIAL_NO_AUTH_ACTION_COUNT=3: only
/// setup's three IAM calls pass unsigned). `failure` says why it is not up.
struct MotoServer {
  std::string venv, endpoint, key, secret, failure;
  int port = 0;
  std::unique_ptr<ChildProcess> process;

  /// `env`: more of the server's variables, e.g. MOTO_ENABLE_RECORDING=True
  /// with MOTO_RECORDER_FILEPATH=FILE (one JSON line per request).
  explicit MotoServer(std::string venv_path, std::vector<std::string> env = {})
      : venv(std::move(venv_path)) {
    port = free_port();
    endpoint = "http://127.0.0.1:" + std::to_string(port);
    env.push_back("INITIAL_NO_AUTH_ACTION_COUNT=3");
    process = std::make_unique<ChildProcess>(
        std::vector<std::string>{venv + "/bin/moto_server", "-H", "127.0.0.1", "-p",
                                 std::to_string(port)},
        env);
    if (!wait_for_port(port, 60)) {
      failure = "moto_server did not listen on " + endpoint + " within 60 s";
      return;
    }
    try {
      nlohmann::json made = run_peer(venv, "setup " + endpoint);
      key = made["key"];
      secret = made["secret"];
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }

  /// s3_peer.py COMMAND ENDPOINT KEY SECRET BUCKET [REST...] (each of
  /// `rest` quoted) with `input` on stdin.
  nlohmann::json peer(const std::string& command, const std::string& bucket,
                      const std::vector<std::string>& rest = {},
                      const nlohmann::json& input = nullptr) const {
    std::string args = command + " " + endpoint + " " + key + " " + sh_quote(secret) + " " + bucket;
    for (const auto& r : rest) args += " " + sh_quote(r);
    return run_peer(venv, args, input);
  }
};

/// tests/objstore/fault_proxy.py in front of `moto`, injecting the faults
/// `rules` script (the proxy's header says how); killed on destruction.
class FaultProxy {
 public:
  FaultProxy(const MotoServer& moto, const nlohmann::json& rules) {
    char dir[] = "/tmp/dtrain-fault-proxy-XXXXXX";
    dir_ = mkdtemp(dir);
    const std::string port_file = dir_ + "/port";
    process_ = std::make_unique<ChildProcess>(std::vector<std::string>{
        moto.venv + "/bin/python", DTRAIN_SOURCE_DIR "/tests/objstore/fault_proxy.py",
        moto.endpoint, moto.key, moto.secret, port_file, rules.dump()});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline && port_ == 0) {
      std::ifstream in(port_file);
      if (!(in >> port_)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~FaultProxy() {
    process_.reset();
    std::remove((dir_ + "/port").c_str());
    std::remove(dir_.c_str());
  }

  /// 0 when the proxy did not start within 30 s.
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  /// The proxy's log: one entry per request, in arrival order.
  nlohmann::json log() const { return nlohmann::json::parse(http_get(port_, "/__proxy/log")); }
  /// The log's entries for `op` on `key`.
  std::vector<nlohmann::json> requests(const std::string& op, const std::string& key) const {
    std::vector<nlohmann::json> out;
    for (const auto& entry : log()) {
      if (entry["op"] == op && entry["key"] == key) out.push_back(entry);
    }
    return out;
  }

 private:
  std::string dir_;
  std::unique_ptr<ChildProcess> process_;
  int port_ = 0;
};

}  // namespace dtrain::testing
