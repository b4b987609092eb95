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

namespace {

// How much of a line being redrawn can go to the terminal now: all of it,
// unless it ends inside an escape sequence (a lone ESC, or ESC [ and
// parameters without the final byte) that the next read completes. Half a
// sequence followed by our "\r[rank0]: " would read as another command.
size_t drawable_size(std::string_view text) {
  const size_t esc = text.rfind('\x1b');
  if (esc == std::string_view::npos) return text.size();
  if (esc + 1 == text.size()) return esc;
  if (text[esc + 1] != '[') return text.size();
  for (size_t i = esc + 2; i < text.size(); ++i) {
    if (text[i] >= 0x40 && text[i] <= 0x7e) return text.size();
  }
  return esc;
}

}  // namespace

LineRelay::LineRelay(std::string prefix, int dest_fd, Fd log,
                     std::shared_ptr<TerminalLine> terminal)
    : prefix_(std::move(prefix)),
      dest_fd_(dest_fd),
      log_(std::move(log)),
      terminal_(std::move(terminal)) {}

LineRelay::~LineRelay() {
  if (terminal_ && terminal_->drawn_by == this) terminal_->drawn_by = nullptr;
}

void LineRelay::feed(std::string_view data) {
  std::string out, raw;
  const char* ends = terminal_ ? "\n\r" : "\n";
  while (!data.empty()) {
    size_t end = data.find_first_of(ends);
    if (end == std::string_view::npos) {
      pending_.append(data);
      data = {};
    } else {
      pending_.append(data.substr(0, end));
      const char c = data[end];
      data.remove_prefix(end + 1);
      if (c == '\n') {
        emit(pending_, out, raw);
      } else {
        // "text\r" shows the text before the next redraw replaces it.
        draw(out);
        after_cr_ = true;
        drawn_size_ = 0;
      }
      pending_.clear();
    }
    while (pending_.size() >= kMaxLine) {
      emit(std::string_view(pending_).substr(0, kMaxLine), out, raw);
      pending_.erase(0, kMaxLine);
    }
  }
  if (after_cr_) draw(out);
  flush(out, raw);
}

void LineRelay::finish() {
  if (pending_.empty() && !drawn_) return;
  std::string out, raw;
  emit(pending_, out, raw);
  pending_.clear();
  flush(out, raw);
}

void LineRelay::draw(std::string& out) {
  const size_t size = drawable_size(pending_);
  if (dest_fd_ < 0 || size <= drawn_size_) return;  // nothing new to show
  take_terminal(out);
  terminal_->drawn_by = this;
  out.push_back('\r');
  out.append(prefix_);
  out.append(pending_, 0, size);
  drawn_ = true;
  drawn_size_ = size;
}

void LineRelay::emit(std::string_view line, std::string& out, std::string& raw) {
  if (dest_fd_ >= 0) {
    take_terminal(out);
    if (drawn_) out.push_back('\r');  // over the line drawn in place
    out.append(prefix_);
    out.append(line);
    out.push_back('\n');
  }
  if (log_.valid()) {
    raw.append(line);
    raw.push_back('\n');
  }
  after_cr_ = drawn_ = false;
  drawn_size_ = 0;
  if (terminal_ && terminal_->drawn_by == this) terminal_->drawn_by = nullptr;
}

void LineRelay::take_terminal(std::string& out) {
  if (!terminal_ || !terminal_->drawn_by || terminal_->drawn_by == this) return;
  LineRelay* other = terminal_->drawn_by;
  out.push_back('\n');
  // Its line stays as it was; what it draws next (more of that text, or the
  // next redraw) starts on a line of its own.
  other->drawn_ = false;
  other->drawn_size_ = drawable_size(other->pending_);
  terminal_->drawn_by = nullptr;
}

void LineRelay::flush(const std::string& out, const std::string& raw) {
  if (!out.empty() && !write_all(dest_fd_, out)) dest_fd_ = -1;
  if (!raw.empty() && !write_all(log_.get(), raw)) log_.reset();
}

}  // namespace dtrain::detail
