#pragma once
// Signals as readable events for the launcher's poll() loop (the self-pipe
// trick). This is the launcher's one piece of process-global state: a signal
// handler can only reach the pipe through a global.

#include <vector>

#include "launch/process/line_relay.h"

namespace dtrain::detail {

/// While alive: SIGINT, SIGTERM and SIGCHLD write their number to a pipe whose
/// read end is fd(), and SIGPIPE is ignored (a closed stdout must not kill the
/// launcher and orphan its workers). The previous dispositions are restored on
/// destruction. At most one SignalWatch may exist at a time in a process; the
/// constructor throws Error otherwise. Use from one thread.
class SignalWatch {
 public:
  SignalWatch();
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  /// Readable when a signal has arrived since the last take().
  int fd() const { return read_.get(); }
  /// Drains the pipe and returns the signals received, oldest first (SIGCHLD
  /// included: it only means "look at the children").
  std::vector<int> take();

 private:
  Fd read_;
  Fd write_;
};

}  // namespace dtrain::detail
