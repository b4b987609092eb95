#include "launch/rendezvous/state.h"

#include <algorithm>
#include <limits>

#include "common/printable.h"
#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::detail {
namespace {

[[noreturn]] void corrupt(const std::string& what, const std::string& text,
                          const std::string& where) {
  throw StoreError(cat("rendezvous ", what, " '", printable(text), "' at ", where,
                       " is malformed; another program (or an incompatible dtrain) wrote the "
                       "rendezvous keys — use a fresh LaunchOptions::run_id"));
}

bool to_int(const std::string& text, int64_t* out) {
  long long v = 0;
  if (!parse_int(text, &v)) return false;
  *out = v;
  return true;
}

// An int field: also false outside [lo, INT_MAX], so no value is narrowed.
bool to_int(const std::string& text, int64_t lo, int* out) {
  int64_t v = 0;
  if (!to_int(text, &v) || v < lo || v > std::numeric_limits<int>::max()) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

std::string RoundState::encode() const {
  switch (status) {
    case Status::kOpen:
      return cat(round, " open");
    case Status::kComplete:
      return cat(round, " complete ", participants, " ", table_slot);
    case Status::kClosed:
      return cat(round, " closed");
  }
  return {};
}

RoundState RoundState::decode(const std::string& text, const std::string& where) {
  std::vector<std::string> f = split(text, ' ');
  RoundState s;
  if (f.size() < 2 || !to_int(f[0], 0, &s.round)) corrupt("state", text, where);
  if (f[1] == "open" && f.size() == 2) {
    s.status = Status::kOpen;
  } else if (f[1] == "closed" && f.size() == 2) {
    s.status = Status::kClosed;
  } else if (f[1] == "complete" && f.size() == 4) {
    s.status = Status::kComplete;
    if (!to_int(f[2], 1, &s.participants) || !to_int(f[3], &s.table_slot)) {
      corrupt("state", text, where);
    }
  } else {
    corrupt("state", text, where);
  }
  return s;
}

std::string NodeRecord::encode() const {
  return cat(node_id, '\t', addr, '\t', local_world_size, '\t', fixed_rank, '\t', settings);
}

NodeRecord NodeRecord::decode(const std::string& text, const std::string& where) {
  std::vector<std::string> f = split(text, '\t');
  NodeRecord r;
  if ((f.size() != 4 && f.size() != 5) || f[0].empty() || !to_int(f[2], 1, &r.local_world_size) ||
      !to_int(f[3], -1, &r.fixed_rank)) {
    corrupt("node record", text, where);
  }
  r.node_id = f[0];
  r.addr = f[1];
  if (f.size() == 5) r.settings = f[4];
  return r;
}

std::string encode_table(const std::vector<NodeRecord>& nodes) {
  std::vector<std::string> lines;
  lines.reserve(nodes.size());
  for (const NodeRecord& n : nodes) lines.push_back(cat(n.slot, '\t', n.encode()));
  return join(lines, "\n");
}

std::vector<NodeRecord> decode_table(const std::string& text, const std::string& where) {
  std::vector<NodeRecord> nodes;
  for (const std::string& line : split(text, '\n')) {
    size_t tab = line.find('\t');
    int64_t slot = 0;
    if (tab == std::string::npos || !to_int(line.substr(0, tab), &slot)) {
      corrupt("participant table line", line, where);
    }
    NodeRecord r = NodeRecord::decode(line.substr(tab + 1), where);
    r.slot = slot;
    nodes.push_back(std::move(r));
  }
  return nodes;
}

std::string encode_slots(const std::vector<int64_t>& slots) {
  std::vector<std::string> parts;
  for (int64_t s : slots) parts.push_back(std::to_string(s));
  return join(parts, ",");
}

std::vector<int64_t> decode_slots(const std::string& text, const std::string& where) {
  std::vector<int64_t> slots;
  if (text.empty()) return slots;
  for (const std::string& part : split(text, ',')) {
    int64_t s = 0;
    if (!to_int(part, &s)) corrupt("slot list", text, where);
    slots.push_back(s);
  }
  return slots;
}

void PollBackoff::sleep(RdzvClock::time_point deadline) {
  auto now = RdzvClock::now();
  if (now >= deadline) return;
  auto wait = std::min<RdzvClock::duration>(next_, deadline - now);
  std::this_thread::sleep_for(wait);
  next_ = std::min(max_, next_ + next_ / 2);
}

HeartbeatThread::HeartbeatThread(std::chrono::milliseconds interval, std::function<void()> beat)
    : interval_(interval), beat_(std::move(beat)) {
  thread_ = std::thread([this] { run(); });
}

void HeartbeatThread::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string HeartbeatThread::last_error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_error_;
}

void HeartbeatThread::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    std::string error;
    try {
      beat_();
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    if (!error.empty()) last_error_ = std::move(error);
    wake_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

}  // namespace dtrain::detail
