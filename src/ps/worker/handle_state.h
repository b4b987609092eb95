#pragma once
// KVHandle's shared state: completed by the node's threads, waited on by
// the caller.

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "dtrain/kvstore.h"

namespace dtrain {

struct KVHandle::State {
  std::mutex mu;
  std::condition_variable cv;
  std::string what;   // "push of key 3", for messages
  int remaining = 0;  // responses still expected
  bool done = false;
  bool lost = false;       // error is a dead node (PeerLostError)
  bool abandoned = false;  // the caller gave up waiting: write nothing more
  std::string error;

  /// Records a failure (first one wins) and wakes the waiter.
  void fail(const std::string& why, bool peer_lost) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (done) return;
      done = true;
      error = why;
      lost = peer_lost;
    }
    cv.notify_all();
  }
};

/// Fails every request in `pending` (timestamp -> a request with a
/// `std::shared_ptr<KVHandle::State> state`) with `why`, taking them out
/// under `mu` and failing them after it is released: the workers' response to
/// a dead node (Node's failure callback).
template <typename Request>
void fail_pending(std::mutex& mu, std::map<int, Request>& pending, const std::string& why) {
  std::map<int, Request> failed;
  {
    std::lock_guard<std::mutex> lock(mu);
    failed.swap(pending);
  }
  for (auto& [ts, req] : failed) req.state->fail(req.state->what + ": " + why, true);
}

}  // namespace dtrain
