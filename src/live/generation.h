#pragma once
// Forming a generation over the store (Note [Generations] in generation.cpp).

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dtrain/store.h"
#include "live/detector.h"
#include "live/keys.h"

namespace dtrain::live {

/// What one member brings to a formation.
struct Candidate {
  std::string member;
  int64_t order = 0;      // position key: previous rank, or initial rank
  bool has_state = true;  // false: a joiner that still needs the state
};

/// The leader's record of a generation.
struct Roster {
  int64_t generation = 0;
  std::vector<std::string> members;  // in rank order; those with state first
  int64_t joined_upto = 0;           // joiners counter value admitted so far
  int with_state = 0;                // members[0, with_state) have the state
  /// Some member needs the state (a joiner was admitted).
  bool transfer() const { return with_state < static_cast<int>(members.size()); }
};

/// Inputs of one formation attempt.
struct FormRequest {
  int64_t generation = 0;
  Candidate me;
  bool initial = false;  // the first generation: wait for initial_world members
  int initial_world = 0;
  std::vector<std::string> expected;   // members of the previous generation believed alive
  int64_t joined_upto = 0;             // joiners admitted before
  int max_members = 0;                 // W0
  std::chrono::milliseconds bound{0};  // how long to wait for announcements / the roster
  std::chrono::milliseconds poll{5};
  std::function<void()> check;  // called while waiting (may throw: fenced)
};

enum class FormOutcome {
  kFormed,      // roster written/read; see roster
  kLeaderLost,  // the leader was declared dead before writing: try generation + 1
};

/// Announces `req.me` for `req.generation`; the first member with state to
/// claim the leader key waits for the expected members (or their deaths, or
/// the bound) and writes the roster; the others read it. Throws
/// TimeoutError when no roster appears within the bound.
FormOutcome form_roster(c10d::Store& store, const Keys& keys, Detector& detector,
                        const FormRequest& req, Roster* roster);

/// Parses the leader's record. Throws DistError naming the key on junk.
Roster parse_roster(int64_t generation, const std::string& record);

/// The newest formed generation, or -1 before the first.
int64_t current_generation(c10d::Store& store, const Keys& keys);

}  // namespace dtrain::live
