// RendezvousBackend over etcd v3 (see launch/rendezvous/etcd_client.h for the wire
// protocol). Keys live under "<key_prefix>/"; liveness records under
// "<key_prefix>/alive/<node_key>", attached to one lease per backend that
// heartbeat() keeps alive: when the agent dies, the lease expires and etcd
// deletes the records itself, so alive() is a plain existence check.

#include <algorithm>
#include <mutex>
#include <set>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "launch/rendezvous/etcd_client.h"
#include "launch/rendezvous/rendezvous.h"

namespace dtrain::detail {
namespace {

class EtcdBackend final : public RendezvousBackend {
 public:
  EtcdBackend(const std::string& host, int port, std::string key_prefix,
              std::chrono::milliseconds timeout)
      : client_(host, port, timeout), prefix_(std::move(key_prefix)), timeout_(timeout) {
    while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
  }

  std::string describe() const override { return client_.describe(); }

  std::optional<std::string> get(const std::string& key) override {
    return client_.get(full_key(key));
  }

  void set(const std::string& key, const std::string& value) override {
    client_.put(full_key(key), value);
  }

  bool compare_set(const std::string& key, const std::optional<std::string>& expected,
                   const std::string& desired, std::optional<std::string>* current) override {
    return client_.compare_and_put(full_key(key), expected, desired, current);
  }

  int64_t add(const std::string& key, int64_t delta) override;
  void heartbeat(const std::string& node_key, std::chrono::milliseconds ttl) override;

  bool alive(const std::string& node_key, std::chrono::milliseconds /*ttl*/) override {
    // The lease carries the ttl: etcd removes the record once it lapses.
    return client_.get(alive_key(node_key)).has_value();
  }

  void forget(const std::string& node_key) override;

 private:
  std::string full_key(const std::string& key) const { return prefix_ + "/" + key; }
  std::string alive_key(const std::string& node_key) const {
    return prefix_ + "/alive/" + node_key;
  }

  EtcdClient client_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;

  // The liveness lease; guarded by lease_mutex_. Network calls are made with
  // it held: they are bounded, and heartbeat/forget are rare.
  std::mutex lease_mutex_;
  int64_t lease_id_ = 0;           // 0: none granted (or it lapsed)
  int64_t lease_ttl_seconds_ = 0;  // the TTL asked for (etcd may grant more)
  std::set<std::string> leased_nodes_;
};

int64_t EtcdBackend::add(const std::string& key, int64_t delta) {
  // etcd has no atomic increment: compare-and-set on the decimal text. A lost
  // race returns the winner's value, so each retry is a single round trip.
  // Bounded by the backend timeout as a whole, not per attempt.
  const std::string k = full_key(key);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::optional<std::string> current = client_.get(k);
  if (delta == 0) {
    // A read: the protocol polls counters this way, and a write (a raft
    // round and a new revision) per poll would grow etcd's history fast.
    long long value = 0;
    if (current && !parse_int(*current, &value)) {
      throw StoreError(cat(describe(), ": key '", k, "' holds '", *current, "', not an integer"));
    }
    return value;
  }
  for (;;) {
    long long base = 0;
    if (current && !parse_int(*current, &base)) {
      throw StoreError(cat(describe(), ": cannot add to key '", k, "': its value '", *current,
                           "' is not an integer"));
    }
    int64_t next = 0;
    if (__builtin_add_overflow(static_cast<int64_t>(base), delta, &next)) {
      throw StoreError(
          cat(describe(), ": adding ", delta, " to key '", k, "' (", base, ") overflows"));
    }
    if (client_.compare_and_put(k, current, std::to_string(next), &current)) return next;
    if (std::chrono::steady_clock::now() > deadline) {
      throw TimeoutError(cat(describe(), ": add to key '", k,
                             "' kept losing compare-and-set races for ", timeout_.count(), " ms"));
    }
  }
}

void EtcdBackend::heartbeat(const std::string& node_key, std::chrono::milliseconds ttl) {
  // Whole seconds, rounded up: etcd's TTL unit. etcd raises a TTL below its
  // minimum (1.5 election timeouts, 2 s by default) to that minimum.
  const int64_t want = std::max<int64_t>(1, (ttl.count() + 999) / 1000);
  std::lock_guard<std::mutex> lock(lease_mutex_);

  if (lease_id_ != 0 && want != lease_ttl_seconds_) {
    // A different ttl: move every record to a lease of the new length.
    EtcdLease fresh = client_.grant_lease(want);
    for (const std::string& node : leased_nodes_) {
      client_.put_leased(alive_key(node), node, fresh.id);
    }
    client_.revoke_lease(lease_id_);
    lease_id_ = fresh.id;
    lease_ttl_seconds_ = want;
  } else if (lease_id_ != 0 && client_.keep_alive(lease_id_) == 0) {
    // The lease lapsed (a heartbeat came too late, or etcd lost it): its
    // records are gone with it.
    lease_id_ = 0;
    leased_nodes_.clear();
  }

  // The lease may lapse between the keep-alive and the put: retry once on a
  // fresh one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (lease_id_ == 0) {
      lease_id_ = client_.grant_lease(want).id;
      lease_ttl_seconds_ = want;
      leased_nodes_.clear();
    }
    if (leased_nodes_.count(node_key) != 0) return;
    if (client_.put_leased(alive_key(node_key), node_key, lease_id_)) {
      leased_nodes_.insert(node_key);
      return;
    }
    lease_id_ = 0;
  }
  throw StoreError(cat(describe(), ": heartbeat of node '", node_key,
                       "': each lease granted expired before the record was written"));
}

void EtcdBackend::forget(const std::string& node_key) {
  std::lock_guard<std::mutex> lock(lease_mutex_);
  client_.erase(alive_key(node_key));
  leased_nodes_.erase(node_key);
  if (lease_id_ != 0 && leased_nodes_.empty()) {
    client_.revoke_lease(lease_id_);  // false: it had lapsed already
    lease_id_ = 0;
  }
}

}  // namespace

std::shared_ptr<RendezvousBackend> make_etcd_backend(const std::string& host, int port,
                                                     std::string key_prefix,
                                                     std::chrono::milliseconds timeout) {
  if (host.empty() || port <= 0 || port > 65535) {
    throw InvalidArgument(cat("etcd endpoint '", host, ":", port,
                              "' is not a valid host:port "
                              "(LaunchOptions::rdzv_endpoint)"));
  }
  if (timeout.count() <= 0) {
    throw InvalidArgument(cat("etcd at ", host, ":", port, ": the timeout must be positive, not ",
                              timeout.count(), " ms"));
  }
  auto backend = std::make_shared<EtcdBackend>(host, port, std::move(key_prefix), timeout);
  // Fail here, naming the endpoint, rather than in the middle of a round.
  backend->get("");
  return backend;
}

}  // namespace dtrain::detail
