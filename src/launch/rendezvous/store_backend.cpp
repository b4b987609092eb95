// RendezvousBackend over a c10d store (TCP store client, the hosting server's
// own client, or the in-memory HashStore).
//
// c10d's Store has no "absent" value and a compareSet that answers with the
// value now stored instead of a flag. So:
//  * get/set/compare_set values are stored with a one-character prefix ('='):
//    an empty value stays distinguishable from an absent key, whose expected
//    value c10d spells as an empty string.
//  * compare_set reports success when the store answers with `desired`. A
//    concurrent writer of the very same value looks like a success too, which
//    is harmless when both meant the same outcome; where exactly one writer
//    must win (rendezvous guards) the protocol writes a value unique to the
//    writer (its node id).
//  * get() checks the key first: c10d's get waits for a missing key, the
//    backend contract says it never waits. Keys the protocol reads are never
//    deleted, so check-then-get cannot block.
//  * Liveness is judged by the observer's own clock, not by timestamps in the
//    store: heartbeat() writes a value that changes on every beat, and
//    alive() is false once the value has not changed for `ttl` since this
//    backend first saw it. Clock skew between hosts cannot kill a node; the
//    price is that a node dead before we first looked is declared dead `ttl`
//    after that first look.

#include <chrono>
#include <map>
#include <mutex>
#include <random>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "launch/rendezvous/rendezvous.h"

namespace dtrain::detail {
namespace {

constexpr char kValueTag = '=';
constexpr const char* kForgotten = "=gone";

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

class StoreBackend : public RendezvousBackend {
 public:
  StoreBackend(StorePtr store, std::string description)
      : store_(std::move(store)), description_(std::move(description)) {
    std::random_device rd;
    nonce_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }

  std::string describe() const override { return description_; }

  std::optional<std::string> get(const std::string& key) override {
    auto raw = get_raw(key);
    if (!raw) return std::nullopt;
    return decode(*raw, key);
  }

  void set(const std::string& key, const std::string& value) override {
    guarded("set", key, [&] { store_->set(key, bytes(kValueTag + value)); });
  }

  bool compare_set(const std::string& key, const std::optional<std::string>& expected,
                   const std::string& desired, std::optional<std::string>* current) override {
    std::string want = kValueTag + desired;
    std::string have = expected ? kValueTag + *expected : std::string();
    std::string now;
    guarded("compare_set", key,
            [&] { now = text(store_->compareSet(key, bytes(have), bytes(want))); });
    if (now == want) return true;
    if (current != nullptr) {
      // c10d answers a CAS on an absent key with the expected value itself.
      if (expected && now == have) {
        *current = std::nullopt;
      } else {
        *current = decode(now, key);
      }
    }
    return false;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t value = 0;
    guarded("add", key, [&] { value = store_->add(key, delta); });
    return value;
  }

  void heartbeat(const std::string& node_key, std::chrono::milliseconds ttl) override {
    uint64_t seq;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      seq = ++beats_;
    }
    set(node_key, cat(seq, " ", nonce_, " ", ttl.count()));
  }

  bool alive(const std::string& node_key, std::chrono::milliseconds ttl) override {
    auto value = get_raw(node_key);
    if (!value || *value == kForgotten) return false;
    auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    Observation& seen = observed_[node_key];
    if (seen.value != *value) {
      seen.value = *value;
      seen.since = now;
      return true;
    }
    return now - seen.since < ttl;
  }

  void forget(const std::string& node_key) override {
    guarded("set", node_key, [&] { store_->set(node_key, bytes(kForgotten)); });
  }

 private:
  struct Observation {
    std::string value;
    std::chrono::steady_clock::time_point since;
  };

  std::optional<std::string> get_raw(const std::string& key) {
    std::optional<std::string> out;
    guarded("get", key, [&] {
      if (store_->check({key})) out = text(store_->get(key));
    });
    return out;
  }

  std::string decode(const std::string& raw, const std::string& key) const {
    if (raw.empty() || raw[0] != kValueTag) {
      throw StoreError(cat("key '", key, "' in the ", description_,
                           " holds a value the rendezvous did not write; use a fresh "
                           "LaunchOptions::run_id"));
    }
    return raw.substr(1);
  }

  template <typename F>
  void guarded(const char* op, const std::string& key, F&& f) {
    try {
      f();
    } catch (const dtrain::Error&) {
      throw;
    } catch (const std::exception& e) {
      throw StoreError(cat(op, "('", key, "') on the ", description_,
                           " failed: ", first_line(e.what()),
                           "; check that the store's host is up and reachable"));
    }
  }

  StorePtr store_;
  std::string description_;
  uint64_t nonce_ = 0;
  std::mutex mutex_;  // guards beats_ and observed_
  uint64_t beats_ = 0;
  std::map<std::string, Observation> observed_;
};

}  // namespace

std::shared_ptr<RendezvousBackend> make_store_backend(StorePtr store, std::string description) {
  if (!store) throw InvalidArgument("make_store_backend: store is null");
  return std::make_shared<StoreBackend>(std::move(store), std::move(description));
}

}  // namespace dtrain::detail
