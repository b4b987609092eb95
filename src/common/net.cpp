#include "common/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "common/fd.h"

namespace dtrain::detail {
namespace {

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list != nullptr) ::freeaddrinfo(list);
  }
};

std::string numeric_host(const sockaddr* a, socklen_t len) {
  char buf[NI_MAXHOST] = {};
  if (::getnameinfo(a, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return buf;
}

bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  }
  if (a->sa_family == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
  }
  return false;
}

}  // namespace

bool is_local_host(const std::string& host) {
  AddrInfo ai;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &ai.list) != 0) return false;
  std::vector<std::string> mine;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr) continue;
      int fam = i->ifa_addr->sa_family;
      if (fam != AF_INET && fam != AF_INET6) continue;
      socklen_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      mine.push_back(numeric_host(i->ifa_addr, len));
    }
    ::freeifaddrs(ifs);
  }
  for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
    if (is_loopback(a->ai_addr)) return true;
    std::string text = numeric_host(a->ai_addr, a->ai_addrlen);
    if (!text.empty() && std::find(mine.begin(), mine.end(), text) != mine.end()) return true;
  }
  return false;
}

std::string route_local_addr(const std::string& host, int port) {
  AddrInfo ai;
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  std::string service = std::to_string(port > 0 ? port : 9);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &ai.list) == 0) {
    for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
      if (is_loopback(a->ai_addr)) return a->ai_family == AF_INET6 ? "::1" : "127.0.0.1";
      Fd fd(::socket(a->ai_family, SOCK_DGRAM, 0));
      if (!fd.valid() || ::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) continue;
      sockaddr_storage local{};
      socklen_t len = sizeof(local);
      if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) continue;
      std::string text = numeric_host(reinterpret_cast<sockaddr*>(&local), len);
      if (!text.empty()) return text;
    }
  }
  return "";
}

std::string first_interface_addr() {
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return "";
  std::string found;
  for (ifaddrs* i = ifs; i != nullptr && found.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
        (i->ifa_flags & IFF_LOOPBACK)) {
      continue;
    }
    found = numeric_host(i->ifa_addr, sizeof(sockaddr_in));
  }
  ::freeifaddrs(ifs);
  return found;
}

bool is_loopback_name(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

// Note [SIGPIPE]
// Gloo's TCP transport writes with writev(), which cannot pass MSG_NOSIGNAL:
// a write to a peer whose socket closed raises SIGPIPE in the writing
// thread (a pt_gloo_runloop thread, seen under gdb), and SIGPIPE's default
// action ends the whole process. Python ignores SIGPIPE at start-up, so
// PyTorch never sees this; a C++ program does, and `dtrain run` resets it
// to the default in its workers. Under live recovery that turned a peer
// that vanished into the death of a survivor (`test_live` ended with exit
// status 141 about once in 50 runs of the vanishing-member tests under
// load); without it, a rank whose peer crashed died by a signal instead of
// failing its collective with an error naming the peer, and the launcher
// could not tell the crash from its consequence. So the process groups
// (init_process_group) and LiveGroup set SIGPIPE to SIG_IGN, unless the
// program installed a disposition of its own: the write then fails with
// EPIPE and Gloo fails the collective. It stays ignored afterwards: a
// group's threads may outlive it. The cost is Python's: a write to a closed
// pipe elsewhere in the program returns EPIPE instead of ending it.
void ignore_sigpipe_unless_handled() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) != 0) return;
  const bool by_default = !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL;
  if (!by_default) return;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, nullptr);
}

}  // namespace dtrain::detail
