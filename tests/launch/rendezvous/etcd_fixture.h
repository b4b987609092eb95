#pragma once
// A throwaway single-member etcd on loopback for tests:
//
//   EtcdServer etcd;
//   if (!EtcdServer::available()) GTEST_SKIP() << EtcdServer::kSkipReason;
//   etcd.start();                      // throws with etcd's log when it fails
//   auto backend = make_etcd_backend(etcd.host(), etcd.port(), "/t", 5s);
//
// Client and peer ports are picked free, the data lives in a fresh temporary
// directory; the destructor stops etcd (SIGTERM, then SIGKILL after 5 s) and
// removes the directory. etcd runs with short raft timers (heartbeat 50 ms,
// election 500 ms) so that it elects itself quickly; its minimum lease TTL is
// then 1 s (2 s with etcd's defaults).

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "launch/rendezvous/etcd_client.h"

namespace dtrain::testing {

class EtcdServer {
 public:
  static constexpr const char* kBinary = "/usr/bin/etcd";
  static constexpr const char* kSkipReason = "etcd is not installed (/usr/bin/etcd)";
  /// How long start() waits for etcd to answer.
  static constexpr std::chrono::seconds kStartTimeout{10};

  /// True when etcd can be run here.
  static bool available() { return ::access(kBinary, X_OK) == 0; }

  EtcdServer() = default;
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;
  ~EtcdServer() { stop(); }

  /// Starts etcd and waits until it serves a range request. Retries twice
  /// with other ports (a picked port may be taken meanwhile). Throws
  /// std::runtime_error with the tail of etcd's log on failure.
  void start() {
    std::string log;
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (try_start(&log)) return;
      stop();
    }
    throw std::runtime_error("etcd did not start; its log ends with:\n" + log);
  }

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  std::string endpoint() const { return host_ + ":" + std::to_string(port_); }
  /// The data directory (contains etcd.log).
  const std::string& dir() const { return dir_; }

  /// Stops etcd and removes its directory; start() may be called again.
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      if (!reaped_within(std::chrono::seconds(5))) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
      }
      pid_ = -1;
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      dir_.clear();
    }
  }

 private:
  /// A port nothing listens on right now (bound to port 0, then released).
  static int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
    ::close(fd);
    if (port == 0) throw std::runtime_error("cannot pick a free port for etcd");
    return port;
  }

  bool reaped_within(std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  bool try_start(std::string* log) {
    std::string pattern = (std::filesystem::temp_directory_path() / "dtrain-etcd-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    port_ = free_port();
    int peer_port = free_port();
    const std::string client_url = "http://127.0.0.1:" + std::to_string(port_);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer_port);
    const std::string log_path = dir_ + "/etcd.log";
    std::vector<std::string> args = {kBinary,
                                     "--name=default",
                                     "--data-dir=" + dir_ + "/data",
                                     "--listen-client-urls=" + client_url,
                                     "--advertise-client-urls=" + client_url,
                                     "--listen-peer-urls=" + peer_url,
                                     "--initial-advertise-peer-urls=" + peer_url,
                                     "--initial-cluster=default=" + peer_url,
                                     "--initial-cluster-state=new",
                                     "--heartbeat-interval=50",
                                     "--election-timeout=500"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      // Dies with the test (even one killed by ctest's timeout).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      // Async-signal-safe calls only: the test may have threads.
      int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (log_fd >= 0) {
        ::dup2(log_fd, 1);
        ::dup2(log_fd, 2);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }

    auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    detail::EtcdClient probe(host_, port_, std::chrono::milliseconds(500));
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {  // exited: port taken?
        pid_ = -1;
        break;
      }
      try {
        probe.get("readiness probe");  // throws until etcd answers 200 (a leader elected)
        return true;
      } catch (const std::exception&) {
        // Not listening yet, or no leader yet.
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::ifstream in(log_path);
    std::stringstream text;
    text << in.rdbuf();
    std::string all = text.str();
    *log = all.size() > 4000 ? all.substr(all.size() - 4000) : all;
    return false;
  }

  std::string host_ = "127.0.0.1";
  int port_ = 0;
  pid_t pid_ = -1;
  std::string dir_;
};

}  // namespace dtrain::testing
