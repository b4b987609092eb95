#include "launch/process/line_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::detail {
Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(cat("cannot create a pipe: ", std::strerror(errno)));
  }
  return Pipe{Fd(fds[0]), Fd(fds[1])};
}

Fd open_log_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(cat("cannot write the log file '", path, "': ", std::strerror(errno)));
  return Fd(fd);
}

LineRelay::LineRelay(std::string prefix, int dest_fd, Fd log)
    : prefix_(std::move(prefix)), dest_fd_(dest_fd), log_(std::move(log)) {}

void LineRelay::feed(std::string_view data) {
  std::string out, raw;
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      pending_.append(data);
      data = {};
    } else {
      pending_.append(data.substr(0, nl));
      data.remove_prefix(nl + 1);
      emit(pending_, out, raw);
      pending_.clear();
    }
    while (pending_.size() >= kMaxLine) {
      emit(std::string_view(pending_).substr(0, kMaxLine), out, raw);
      pending_.erase(0, kMaxLine);
    }
  }
  flush(out, raw);
}

void LineRelay::finish() {
  if (pending_.empty()) return;
  std::string out, raw;
  emit(pending_, out, raw);
  pending_.clear();
  flush(out, raw);
}

void LineRelay::emit(std::string_view line, std::string& out, std::string& raw) {
  if (dest_fd_ >= 0) {
    out.append(prefix_);
    out.append(line);
    out.push_back('\n');
  }
  if (log_.valid()) {
    raw.append(line);
    raw.push_back('\n');
  }
}

void LineRelay::flush(const std::string& out, const std::string& raw) {
  if (!out.empty() && !write_all(dest_fd_, out)) dest_fd_ = -1;
  if (!raw.empty() && !write_all(log_.get(), raw)) log_.reset();
}

}  // namespace dtrain::detail
