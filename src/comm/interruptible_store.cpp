// Note [Interruptible formation]
// A rank forming a group waits in the store: Gloo's connectFullMesh gets
// every peer's address, and init_process_group's closing barrier waits for
// the last rank (Note [Formed means every rank connected]). Inside a store
// those waits block for the store's whole timeout, so a live-recovery
// member whose generation was given up while it formed (a peer died, or a
// peer's formation failed) sat there for up to form_timeout while the
// survivors formed the next generation without it, and then found itself
// left out and fenced (LiveGroup tests under load, CI of 2026-11-26).
// With InitOptions::wait_interrupt, init_process_group therefore hands the
// backend an InterruptibleStore: a missing key is polled with check(), a
// non-blocking call (backing off from 1 ms to wait_slice), and the
// interrupt runs between polls, so the formation is given up as soon as
// the caller says so. Polling rather than wait(keys, slice): a 1.13
// TCPStore client whose timed wait expires leaves the server's late
// answer in the socket, where the next call would read it.
#include "comm/interruptible_store.h"

#include <algorithm>
#include <thread>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::detail {

ForwardingStore::ForwardingStore(StorePtr inner)
    : c10d::Store(inner->getTimeout()), inner_(std::move(inner)) {}

void ForwardingStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  inner_->set(key, value);
}
std::vector<uint8_t> ForwardingStore::compareSet(const std::string& key,
                                                 const std::vector<uint8_t>& expected,
                                                 const std::vector<uint8_t>& desired) {
  return inner_->compareSet(key, expected, desired);
}
std::vector<uint8_t> ForwardingStore::get(const std::string& key) { return inner_->get(key); }
int64_t ForwardingStore::add(const std::string& key, int64_t value) {
  return inner_->add(key, value);
}
bool ForwardingStore::deleteKey(const std::string& key) { return inner_->deleteKey(key); }
bool ForwardingStore::check(const std::vector<std::string>& keys) { return inner_->check(keys); }
int64_t ForwardingStore::getNumKeys() { return inner_->getNumKeys(); }
void ForwardingStore::wait(const std::vector<std::string>& keys) { inner_->wait(keys); }
void ForwardingStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
  inner_->wait(keys, timeout);
}
StorePtr ForwardingStore::rewrap(StorePtr inner) const {
  return c10::make_intrusive<ForwardingStore>(std::move(inner));
}
#if DTRAIN_TORCH_VERSION >= 200
c10::intrusive_ptr<c10d::Store> ForwardingStore::clone() { return rewrap(inner_->clone()); }
#endif

InterruptibleStore::InterruptibleStore(StorePtr inner, std::function<void()> interrupt,
                                       std::chrono::milliseconds slice,
                                       std::chrono::milliseconds timeout)
    : ForwardingStore(std::move(inner)), interrupt_(std::move(interrupt)), slice_(slice) {
  timeout_ = timeout;
}

std::vector<uint8_t> InterruptibleStore::get(const std::string& key) {
  poll_until_present({key}, timeout_);
  return inner_->get(key);
}

void InterruptibleStore::wait(const std::vector<std::string>& keys) {
  poll_until_present(keys, timeout_);
}

void InterruptibleStore::wait(const std::vector<std::string>& keys,
                              const std::chrono::milliseconds& timeout) {
  poll_until_present(keys, timeout);
}

std::exception_ptr InterruptibleStore::interruption() const {
  std::lock_guard<std::mutex> lock(mu_);
  return interruption_;
}

StorePtr InterruptibleStore::rewrap(StorePtr inner) const {
  return c10::make_intrusive<InterruptibleStore>(std::move(inner), interrupt_, slice_, timeout_);
}

void InterruptibleStore::poll_until_present(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) {
  // c10d's convention: a zero timeout (Store::kNoTimeout) never expires.
  const bool bounded = timeout.count() > 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (!inner_->check(keys)) {
    if (interrupt_) {
      try {
        interrupt_();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!interruption_) interruption_ = std::current_exception();
        throw;
      }
    }
    if (bounded && std::chrono::steady_clock::now() >= deadline) {
      throw TimeoutError(cat("store: key(s) ", join(keys, ", "), " did not appear within ",
                             timeout.count() / 1000.0, " s"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::max(slice_, std::chrono::milliseconds(1)));
  }
}

}  // namespace dtrain::detail
