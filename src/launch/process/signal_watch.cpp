#include "launch/process/signal_watch.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::detail {
namespace {

constexpr int kWatched[] = {SIGINT, SIGTERM, SIGCHLD};
constexpr int kIgnored[] = {SIGPIPE};

/// The write end of the active SignalWatch's pipe, -1 when none is active.
std::atomic<int> g_signal_pipe{-1};
struct sigaction g_saved[NSIG];

extern "C" void on_signal(int sig) {
  int saved_errno = errno;
  int fd = g_signal_pipe.load(std::memory_order_relaxed);
  if (fd >= 0) {
    unsigned char byte = static_cast<unsigned char>(sig);
    ssize_t unused = ::write(fd, &byte, 1);  // non-blocking: a full pipe already wakes the loop
    (void)unused;
  }
  errno = saved_errno;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

SignalWatch::SignalWatch() {
  Pipe pipe = make_pipe();
  set_nonblocking(pipe.read.get());
  set_nonblocking(pipe.write.get());
  int expected = -1;
  if (!g_signal_pipe.compare_exchange_strong(expected, pipe.write.get())) {
    throw Error("another launcher is already watching signals in this process");
  }
  read_ = std::move(pipe.read);
  write_ = std::move(pipe.write);
  struct sigaction action {};
  action.sa_handler = on_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int sig : kWatched) {
    struct sigaction a = action;
    if (sig == SIGCHLD) a.sa_flags |= SA_NOCLDSTOP;
    ::sigaction(sig, &a, &g_saved[sig]);
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int sig : kIgnored) ::sigaction(sig, &ignore, &g_saved[sig]);
}

SignalWatch::~SignalWatch() {
  for (int sig : kWatched) ::sigaction(sig, &g_saved[sig], nullptr);
  for (int sig : kIgnored) ::sigaction(sig, &g_saved[sig], nullptr);
  g_signal_pipe.store(-1);
}

std::vector<int> SignalWatch::take() {
  std::vector<int> signals;
  unsigned char buf[64];
  while (true) {
    ssize_t n = ::read(read_.get(), buf, sizeof(buf));
    if (n > 0) {
      signals.insert(signals.end(), buf, buf + n);
    } else if (!(n < 0 && errno == EINTR)) {
      break;
    }
  }
  return signals;
}

}  // namespace dtrain::detail
