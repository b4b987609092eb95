#pragma once
// Store wrappers for the waits of a forming process group (Note
// [Interruptible formation] in interruptible_store.cpp).

#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "dtrain/compat.h"
#include "dtrain/store.h"

namespace dtrain::detail {

/// A c10d::Store that forwards every call to `inner`; a base for wrappers
/// that change a few calls. Its timeout is inner's at construction.
class ForwardingStore : public c10d::Store {
 public:
  explicit ForwardingStore(StorePtr inner);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
#if DTRAIN_TORCH_VERSION >= 200
  c10::intrusive_ptr<c10d::Store> clone() override;
#endif

 protected:
  /// A new wrapper of the same kind over `inner` (for clone()).
  virtual StorePtr rewrap(StorePtr inner) const;
  StorePtr inner_;
};

/// Waits (get of a missing key, wait) poll inner.check() instead of blocking
/// inside the store, calling `interrupt` between polls (at most `slice`
/// apart); what interrupt throws propagates. A wait that outlasts its
/// timeout (the store's, or wait's argument) throws TimeoutError naming the
/// keys, where a blocking store would throw its own timeout error.
class InterruptibleStore : public ForwardingStore {
 public:
  InterruptibleStore(StorePtr inner, std::function<void()> interrupt,
                     std::chrono::milliseconds slice, std::chrono::milliseconds timeout);

  std::vector<uint8_t> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  /// What the interrupt threw (the first time), or null: a backend that
  /// catches the store's exception and throws its own (Gloo's connect does)
  /// loses its type; the caller rethrows this one instead.
  std::exception_ptr interruption() const;

 protected:
  StorePtr rewrap(StorePtr inner) const override;

 private:
  void poll_until_present(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  std::function<void()> interrupt_;
  std::chrono::milliseconds slice_;
  mutable std::mutex mu_;
  std::exception_ptr interruption_;  // guarded by mu_
};

}  // namespace dtrain::detail
