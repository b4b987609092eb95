#pragma once
// The store keys of a live group (all under LiveOptions::key_prefix), in one
// place. docs/live_recovery.md lists them with their writers and readers.

#include <cstdint>
#include <string>
#include <vector>

#include "common/strings.h"

namespace dtrain::live {

struct Keys {
  std::string prefix;  // "live"

  /// Heartbeat counter of `member` (add 1 per beat).
  std::string heartbeat(const std::string& member) const { return cat(prefix, "/hb/", member); }
  /// "<host> <pid>" of `member`: same-host watchers probe the process.
  std::string process(const std::string& member) const { return cat(prefix, "/pid/", member); }
  /// Set (to the cause) when `member` was declared dead; it fences itself on
  /// seeing it. A launcher's agent that reaps a worker may set it too.
  std::string dead(const std::string& member) const { return cat(prefix, "/dead/", member); }
  /// Set when `member` left normally (end of training).
  std::string left(const std::string& member) const { return cat(prefix, "/left/", member); }
  /// Joiners: a counter and the id of joiner k.
  std::string joiner_count() const { return cat(prefix, "/joiners"); }
  std::string joiner(int64_t k) const { return cat(prefix, "/joiner/", k); }
  /// The newest formed generation.
  std::string current() const { return cat(prefix, "/gen/current"); }
  std::string gen(int64_t g) const { return cat(prefix, "/gen/", g); }
  std::string leader(int64_t g) const { return cat(gen(g), "/leader"); }
  std::string announce_count(int64_t g) const { return cat(gen(g), "/n"); }
  std::string announce(int64_t g, int64_t k) const { return cat(gen(g), "/a/", k); }
  /// The leader's record: "<joined_upto> <with_state> <member,member,...>".
  std::string members(int64_t g) const { return cat(gen(g), "/members"); }
  std::string group_prefix(int64_t g) const { return cat(gen(g), "/pg"); }
  /// The two-rank group that carries the state from rank 0 to joiner rank j.
  std::string transfer_prefix(int64_t g, int64_t j) const { return cat(gen(g), "/transfer/", j); }
  /// Set (to the reason) by a member that gave up forming generation g's
  /// group: the others stop waiting in its formation at once.
  std::string abandoned(int64_t g) const { return cat(gen(g), "/abandoned"); }
  std::string done(int64_t g, int64_t step) const { return cat(gen(g), "/step/", step, "/done"); }
  std::string decision(int64_t g, int64_t step) const {
    return cat(gen(g), "/step/", step, "/decision");
  }
  /// "<member>: <why>" of the first member that failed the step itself.
  std::string failure(int64_t g, int64_t step) const {
    return cat(gen(g), "/step/", step, "/failure");
  }
};

/// A store value from text: c10d::Store::set(key, std::string) exists only
/// from PyTorch 2.x on.
inline std::vector<uint8_t> bytes_of(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

}  // namespace dtrain::live
