#pragma once
// The gradient reducer behind DataParallel: buckets, autograd hooks, launch
// order, unused-parameter search, bucket rebuilding, completion and
// statistics. See Note [Reducer] in reducer.cpp.

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
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
  /// `params` in registration order; buckets are built here.
  Reducer(std::vector<std::string> names, std::vector<at::Tensor> params, ProcessGroup pg,
          DdpOptions options);
  ~Reducer();

  /// Installs the gradient-accumulator hooks (needs shared_from_this).
  void install_hooks();

  /// Before the module's forward: refuses to run after a communication
  /// failure or an unfinished reduction, rebuilds the buckets once after the
  /// first synchronised iteration (collective: a broadcast from rank 0).
  void prepare_forward();
  /// After the module's forward, with the tensors it returned: arms the
  /// reduction of the backward of this forward (when gradients are enabled
  /// and no no_sync() scope is open) and finds the unused parameters.
  void finish_forward(const std::vector<at::Tensor>& outputs);
  void set_sync(bool sync);
  bool sync() const;

  DdpStats stats() const;
  std::vector<std::vector<std::string>> bucket_names() const;

 private:
  struct Bucket {
    GradBucket grad_bucket;                  // buffer, index, names
    std::vector<size_t> params;              // parameter indices, bucket order
    std::vector<at::Tensor> views;           // aliases of buffer, one per param
    size_t pending = 0;                      // params not yet ready this pass
    std::unique_ptr<PendingReduction> work;  // in flight
    size_t stage = 0;                        // stages launched after start()
    Clock::time_point launched;
    Clock::time_point completed;
  };

  void build_buckets(const std::vector<size_t>& order);
  void maybe_rebuild_buckets();
  void on_grad_ready(size_t param);
  void on_output_grad(uint64_t generation);
  void mark_ready_locked(size_t param, bool used);
  void launch_queued(std::unique_lock<std::mutex>& lock);
  /// Note [Staged reductions]: the later stages due once stage 0 of bucket
  /// `slot` was launched (slot >= bucket count: after backward's end).
  std::vector<size_t> stages_due_locked(size_t slot) const;
  void launch_stages(std::unique_lock<std::mutex>& lock, const std::vector<size_t>& due);
  void launch_remaining_stages(std::unique_lock<std::mutex>& lock);
  void finalize_backward();
  void write_back(const std::vector<bool>& globally_used);
  void reset_pass_locked();
  /// Records the first failure (Note [After a failure]), ends the pass and
  /// rethrows `error`.
  [[noreturn]] void fail_locked(std::exception_ptr error, const std::string& message);
  void record_stats(Clock::time_point backward_end);
  std::vector<std::string> unready_names() const;
  bool search_unused_this_pass() const;

  std::vector<std::string> names_;
  std::vector<at::Tensor> params_;
  ProcessGroup pg_;
  DdpOptions options_;
  std::shared_ptr<CommHook> hook_;
  at::Tensor scale_;  // 1 / (gradient_divisor or world size), a CPU scalar for any device
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // param -> bucket
  std::vector<size_t> slot_of_;    // param -> position in its bucket

  mutable std::mutex mu_;  // guards everything below; never held across a wait
  bool sync_ = true;
  bool grad_enabled_at_forward_ = false;
  // The first communication failure; once set, every use throws it.
  std::string failure_;
  // Arming (Note [Armed by forward]).
  bool armed_ = false;
  uint64_t generation_ = 0;          // of the last arming forward
  uint64_t reduced_generation_ = 0;  // of the last finished reduction
  int64_t synced_passes_ = 0;        // finished reductions
  // Per backward pass.
  std::vector<bool> ready_;
  std::vector<bool> used_;
  std::vector<size_t> unused_;  // found at the end of forward
  bool unused_known_ = false;   // the forward's outputs were searched
  bool unused_marked_ = false;
  size_t next_launch_ = 0;
  bool backward_started_ = false;
  std::deque<size_t> launch_queue_;              // buckets ready to launch, in order
  bool launching_ = false;                       // a thread is draining launch_queue_
  at::Tensor used_map_;                          // 1 where this rank used the parameter
  std::unique_ptr<PendingReduction> used_work_;  // its allreduce, in flight
  // Bucket rebuilding (Note [Rebuilt buckets]).
  std::vector<size_t> ready_order_;
  bool rebuilt_ = false;
  // static_graph: parameters unused in the first iteration, and whether any
  // rank used them (their gradients are left alone when none did).
  std::vector<size_t> static_unused_;
  std::vector<bool> static_globally_used_;

  // Hooks: the accumulators are held so they outlive the hooks' keys.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;

  // Timing.
  Clock::time_point forward_start_, forward_end_;
  DdpStats totals_;
};

}  // namespace dtrain::detail
