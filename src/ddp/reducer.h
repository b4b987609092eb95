#pragma once
// The gradient reducer behind DataParallel: buckets, autograd hooks, launch
// order, completion and statistics. See Note [Reducer] in reducer.cpp.

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dtrain/ddp.h"

namespace torch::autograd {
struct Node;
}

namespace dtrain::detail {

using Clock = std::chrono::steady_clock;

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  /// `params` in registration order; bucket views are created here.
  Reducer(std::vector<std::string> names, std::vector<at::Tensor> params, ProcessGroup pg,
          DdpOptions options);
  ~Reducer();

  /// Installs the gradient-accumulator hooks (needs shared_from_this).
  void install_hooks();

  void prepare_forward();
  void finish_forward();
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }

  DdpStats stats() const;
  std::vector<std::vector<std::string>> bucket_names() const;

 private:
  struct Bucket {
    GradBucket grad_bucket;                  // buffer, index, names
    std::vector<size_t> params;              // parameter indices, bucket order
    std::vector<at::Tensor> views;           // views of buffer, one per param
    size_t pending = 0;                      // params not yet ready this pass
    std::unique_ptr<PendingReduction> work;  // in flight
    Clock::time_point launched;
    Clock::time_point completed;
  };

  void on_grad_ready(size_t param);
  void mark_ready_locked(size_t param, bool used);
  void launch_ready_locked();
  void finalize_backward();
  void write_back(const std::vector<bool>& globally_used);
  std::vector<bool> all_reduce_used();
  void reset_pass();
  void record_stats(Clock::time_point backward_end);
  std::vector<std::string> unready_names() const;

  std::vector<std::string> names_;
  std::vector<at::Tensor> params_;
  ProcessGroup pg_;
  DdpOptions options_;
  std::shared_ptr<CommHook> hook_;
  at::Tensor scale_;  // 1 / world size, a CPU scalar usable with any device
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // param -> bucket
  std::vector<size_t> slot_of_;    // param -> position in its bucket

  mutable std::mutex mu_;
  bool sync_ = true;
  // Per backward pass (guarded by mu_).
  std::vector<bool> ready_;
  std::vector<bool> used_;
  size_t next_launch_ = 0;
  bool backward_started_ = false;
  std::string last_error_;

  // Hooks: the accumulators are held so they outlive the hooks' keys.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;

  // Timing.
  Clock::time_point forward_start_, forward_end_;
  double last_forward_seconds_ = 0;
  DdpStats totals_;
};

}  // namespace dtrain::detail
