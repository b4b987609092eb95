// Note [Generations]
// Generation g is formed under <prefix>/gen/<g>:
//   1. every member taking part adds itself to gen/<g>/n and writes its
//      record "<member> <order> <has_state>" at gen/<g>/a/<k>;
//   2. members with state race for gen/<g>/leader with compareSet("", me);
//      the winner is the leader (joiners never lead: they know nobody);
//   3. the leader waits until each member it expects (the previous
//      generation's members its detector believes alive, plus the joiners
//      registered since joined_upto) has announced itself or been declared
//      dead, at most `bound`; then it writes gen/<g>/members:
//      "<joined_upto> <with_state> <m0,m1,...>": the with_state members
//      that have the state first, in their previous order (so rank 0 has it
//      and, for the first generation, RANK r is rank r; the state transfer
//      goes from rank 0 to ranks with_state and up), then joiners in
//      announcement order, at most W0 in all (more workers than logical
//      ranks would idle). Expected members that did not announce are
//      declared dead ("left generation"): when they come back they find
//      their dead key and fence themselves. Then gen/current = g;
//   4. the others poll for gen/<g>/members; when the leader is declared
//      dead first, everyone moves to g + 1 (each survivor sees the same
//      death through the dead key).
// Fresh keys per generation mean that nothing of an abandoned generation
// (its Gloo addresses, its step decisions) is ever read again.
#include "live/generation.h"

#include <algorithm>
#include <map>
#include <thread>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::live {
namespace {

using Clock = std::chrono::steady_clock;

std::string get_string(c10d::Store& store, const std::string& key) {
  const std::vector<uint8_t> v = store.get(key);
  return std::string(v.begin(), v.end());
}

bool parse_candidate(const std::string& record, Candidate* c) {
  auto parts = split(record, ' ');
  long long order = 0, state = 0;
  if (parts.size() != 3 || !parse_int(parts[1], &order) || !parse_int(parts[2], &state)) {
    return false;
  }
  c->member = parts[0];
  c->order = order;
  c->has_state = state != 0;
  return true;
}

// Announcements so far (records written; a member that added but has not
// written yet is skipped until it has).
std::vector<Candidate> read_announcements(c10d::Store& store, const Keys& keys, int64_t g) {
  const int64_t n = store.add(keys.announce_count(g), 0);
  std::vector<Candidate> out;
  for (int64_t k = 0; k < n; ++k) {
    if (!store.check({keys.announce(g, k)})) continue;
    Candidate c;
    if (parse_candidate(get_string(store, keys.announce(g, k)), &c)) out.push_back(c);
  }
  return out;
}

std::vector<std::string> read_joiners(c10d::Store& store, const Keys& keys, int64_t from,
                                      int64_t to) {
  std::vector<std::string> out;
  for (int64_t k = from; k < to; ++k) {
    if (store.check({keys.joiner(k)})) out.push_back(get_string(store, keys.joiner(k)));
  }
  return out;
}

void write_roster(c10d::Store& store, const Keys& keys, Detector& detector,
                  const FormRequest& req) {
  const auto deadline = Clock::now() + req.bound;
  const int64_t joiners_total = store.add(keys.joiner_count(), 0);
  std::vector<std::string> joiners = read_joiners(store, keys, req.joined_upto, joiners_total);
  std::vector<std::string> expected = req.expected;
  for (const std::string& j : joiners) {
    if (std::find(expected.begin(), expected.end(), j) == expected.end()) expected.push_back(j);
  }
  {
    std::vector<std::string> watch = expected;
    detector.watch(watch);
  }
  std::vector<Candidate> got;
  for (;;) {
    if (req.check) req.check();
    got = read_announcements(store, keys, req.generation);
    auto announced = [&](const std::string& m) {
      return std::any_of(got.begin(), got.end(), [&](const Candidate& c) { return c.member == m; });
    };
    bool complete;
    if (req.initial) {
      complete = std::count_if(got.begin(), got.end(),
                               [](const Candidate& c) { return c.has_state; }) >= req.initial_world;
    } else {
      complete = true;
      for (const std::string& m : expected) {
        if (m == req.me.member) continue;
        if (!announced(m) && !detector.any_dead({m})) complete = false;
      }
    }
    if (complete || Clock::now() >= deadline) {
      break;
    }
    std::this_thread::sleep_for(req.poll);
  }
  // Dead members are out, whatever they announced.
  got.erase(std::remove_if(got.begin(), got.end(),
                           [&](const Candidate& c) { return detector.any_dead({c.member}); }),
            got.end());
  std::stable_sort(got.begin(), got.end(), [](const Candidate& a, const Candidate& b) {
    if (a.has_state != b.has_state) return a.has_state;
    return a.has_state ? a.order < b.order : false;  // joiners keep announcement order
  });
  if (req.max_members > 0 && static_cast<int>(got.size()) > req.max_members) {
    got.resize(req.max_members);
  }
  std::vector<std::string> ids;
  int with_state = 0;
  for (const Candidate& c : got) {
    ids.push_back(c.member);
    if (c.has_state) ++with_state;
  }
  for (const std::string& m : req.expected) {
    if (std::find(ids.begin(), ids.end(), m) == ids.end() && !detector.any_dead({m})) {
      detector.declare_dead(m, DetectionCause::kLeftGeneration);
    }
  }
  store.set(keys.members(req.generation),
            bytes_of(cat(joiners_total, " ", with_state, " ", join(ids, ","))));
  store.set(keys.current(), bytes_of(std::to_string(req.generation)));
}

}  // namespace

Roster parse_roster(int64_t generation, const std::string& record) {
  Roster r;
  r.generation = generation;
  auto parts = split(record, ' ');
  long long upto = 0, with_state = 0;
  if (parts.size() != 3 || !parse_int(parts[0], &upto) || !parse_int(parts[1], &with_state) ||
      with_state < 0) {
    throw DistError(cat("live: generation ", generation, "'s member record '", record,
                        "' is malformed (another program uses the same store keys?)"));
  }
  r.joined_upto = upto;
  if (!parts[2].empty()) r.members = split(parts[2], ',');
  if (with_state > static_cast<long long>(r.members.size())) {
    throw DistError(cat("live: generation ", generation, "'s member record '", record, "' says ",
                        with_state, " members have the state but names ", r.members.size(),
                        " (another program uses the same store keys?)"));
  }
  r.with_state = static_cast<int>(with_state);
  return r;
}

int64_t current_generation(c10d::Store& store, const Keys& keys) {
  if (!store.check({keys.current()})) return -1;
  long long g = -1;
  if (!parse_int(get_string(store, keys.current()), &g)) return -1;
  return g;
}

FormOutcome form_roster(c10d::Store& store, const Keys& keys, Detector& detector,
                        const FormRequest& req, Roster* roster) {
  const int64_t g = req.generation;
  const int64_t k = store.add(keys.announce_count(g), 1) - 1;
  store.set(keys.announce(g, k),
            bytes_of(cat(req.me.member, " ", req.me.order, " ", req.me.has_state ? 1 : 0)));
  if (req.me.has_state && !store.check({keys.members(g)})) {
    const std::vector<uint8_t> mine(req.me.member.begin(), req.me.member.end());
    const std::vector<uint8_t> won = store.compareSet(keys.leader(g), {}, mine);
    if (won == mine) write_roster(store, keys, detector, req);
  }
  const auto deadline = Clock::now() + req.bound + req.bound;
  for (;;) {
    if (store.check({keys.members(g)})) {
      *roster = parse_roster(g, get_string(store, keys.members(g)));
      return FormOutcome::kFormed;
    }
    if (req.check) req.check();
    if (store.check({keys.leader(g)})) {
      const std::string leader = get_string(store, keys.leader(g));
      if (detector.any_dead({leader})) return FormOutcome::kLeaderLost;
      detector.watch_also(leader);
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError(cat("live: member ", req.me.member, ": generation ", g,
                             " did not form within ",
                             std::chrono::duration<double>(req.bound + req.bound).count(),
                             " s (no member list at ", keys.members(g), ")"));
    }
    std::this_thread::sleep_for(req.poll);
  }
}

}  // namespace dtrain::live
