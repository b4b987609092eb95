#pragma once
// KVHandle's shared state: completed by the node's threads, waited on by
// the caller; and the bookkeeping of pending requests that both workers
// (worker/dist_store.cpp, pslite/pslite_worker.cpp) share.

#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "dtrain/errors.h"
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

/// Registers request `ts` in `pending` under `mu` before its messages leave,
/// so no answer can miss it; throws PeerLostError when `node` (a Node) has
/// already failed, which fail_pending would otherwise never see it for.
template <typename Request, typename NodeT>
void add_pending(std::mutex& mu, std::map<int, Request>& pending, int ts, Request req,
                 const NodeT& node) {
  std::lock_guard<std::mutex> lock(mu);
  const std::string lost = node.failure();
  if (!lost.empty()) throw PeerLostError(lost);
  pending[ts] = std::move(req);
}

/// A worker's destructor (Note [Leaving on an exception] in
/// worker/dist_store.cpp): while an exception unwinds and the worker is not
/// closed, it only says so on `node`'s log and returns, without close()'s
/// barriers; otherwise it calls `close` and logs a failure of it as "<what>
/// close failed: ...". Never throws.
template <typename NodeT>
void close_in_destructor(bool closed, const std::function<void()>& close, const NodeT& node,
                         const char* what) noexcept {
  try {
    if (std::uncaught_exceptions() > 0 && !closed) {
      node.log("leaving the job without close(): an exception is unwinding");
      return;
    }
    close();
  } catch (const std::exception& e) {
    node.log(std::string(what) + " close failed: " + e.what());
  }
}

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
