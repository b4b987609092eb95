// Note [Reducer]
// One synchronised iteration, as the reducer sees it (PyTorch's reducer.cpp
// does the same; the differences are listed in docs/architecture.md):
//   1. prepare_forward(): refuse after a failure or an unfinished pass;
//      after the first synchronised iteration, rebuild the buckets once
//      (Note [Rebuilt buckets]).
//   2. finish_forward(outputs): arm the reduction for the backward of this
//      forward (Note [Armed by forward]) and, with find_unused_parameters,
//      walk the autograd graph from the outputs to find the parameters that
//      will get no gradient (Note [Unused parameters]).
//   3. autograd accumulates a parameter's gradient and runs our post-hook on
//      its AccumulateGrad node; the hook copies grad / world_size into the
//      parameter's slot of its bucket (or, with gradient_as_bucket_view,
//      scales the slot in place because grad already is that slot). The
//      first hook of the pass also marks the unused parameters ready.
//   4. a bucket whose last parameter became ready is launched, but only after
//      every bucket before it: launches happen strictly in bucket order, so
//      every rank issues the same sequence of collectives whatever order its
//      autograd happens to run in. The hook runs outside the reducer's lock
//      (Note [Launching without the lock]).
//   5. the first hook of the pass queues a final callback with the autograd
//      engine; it runs once backward's computation is done, waits for every
//      bucket and for the used-parameter map, and writes the averaged
//      gradients back.
// Hooks hold a weak_ptr to the reducer, so a DataParallel destroyed before its
// module leaves harmless hooks behind (they are also removed by key).
//
// Note [Armed by forward]
// As in PyTorch, a backward reduces gradients only when it is the backward of
// a forward through the DDP wrapper that ran with gradients enabled and
// outside no_sync(): finish_forward() arms the reducer, the final callback
// disarms it. Hooks that fire while the reducer is not armed (a backward
// through the bare module, a second backward after the reduction, a forward
// inside no_sync()) only accumulate locally, so no rank can issue a
// collective the others never issue. A tensor hook on each output records
// the forward's generation: reaching the output of a forward whose reduction
// already finished is a second backward of one DDP forward, which is an
// error naming the fix instead of gradients that silently diverge.
//
// Note [Unused parameters]
// With find_unused_parameters, finish_forward() walks the graph from the
// outputs (next_edges of every Node) and collects the AccumulateGrad nodes it
// reaches; the parameters whose accumulator is not among them get no
// gradient in this backward. Like PyTorch, they are marked ready (zero, or
// the gradient accumulated under no_sync) by the first hook of the backward,
// not at the end of forward, so a forward that is never followed by a
// backward launches nothing. Every bucket can then launch during backward. A
// parameter used but left without a gradient (an output that the loss
// ignores) is caught by the final callback and marked there. The per-rank
// "used" bitmap is allreduced asynchronously right after the last bucket's
// launch and waited in the final callback; parameters no rank used keep
// their gradient untouched. When DDP cannot see the outputs (the forward
// returned a type collect_tensors does not know), the final callback marks
// every unready parameter, as before this search existed.
//
// Note [Launching without the lock]
// mu_ is never held across a comm hook or a wait. Buckets that became ready
// are queued in launch order under mu_; the thread that finds nobody
// launching becomes the launcher and drains the queue, releasing mu_ around
// each hook->start(). So launches keep their order even with several autograd
// threads, and a user's hook may block or call back into DDP.
//
// Note [Staged reductions]
// A hook may reduce a bucket in several stages, each needing the previous
// one's result (PowerSGD: allreduce P, then orthogonalize P, compute Q and
// allreduce Q). Gloo pairs collectives by the order they are issued in, so
// the stages of different buckets must be issued in the same order on every
// rank, whatever finishes first on each. The reducer uses a fixed
// wavefront: stage k of bucket b is launched right after stage 0 of bucket
// b + k (at the first such slot; in the order j = b+k-1, b+k-2, ... for
// the buckets due at that
// slot), and when backward ends the slots N, N+1, ... (N buckets) are
// walked the same way until no bucket has a stage left. The used-parameter
// map's allreduce goes after the slot of the last bucket. So the P
// allreduce of bucket b has the time backward spends on bucket b + 1 to
// complete before its Q stage is issued; launching a stage may block the
// launching thread (the autograd thread) until the previous stage's
// collective finished, bounded by the group's timeout: a fixed order can
// wait, it cannot skip ahead. Stages run outside mu_ like start().
//
// Note [Rebuilt buckets]
// Bucket order decides how early communication starts. Registration order is
// a guess; after the first synchronised iteration the reducer knows the
// order in which gradients became ready. As PyTorch does, the next forward
// (with gradients enabled) rebuilds the buckets once in that order: rank 0's
// order is broadcast so that every rank builds the same buckets. Not done
// with find_unused_parameters unless static_graph is set (the order could
// change from one iteration to the next).
//
// Note [After a failure]
// A collective that failed (or timed out) leaves the ranks' collective
// sequences out of step; anything issued afterwards would pair with the
// wrong peer operation. The first failure is recorded and every later
// forward throws it, naming the fix.
#include "ddp/reducer.h"

#include <unordered_set>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "common/strings.h"
#include "ddp/bucketing.h"
#include "dtrain/comm.h"
#include "dtrain/errors.h"

namespace dtrain::detail {
namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string tensor_key(const at::Tensor& t) {
  return cat(c10::toString(t.scalar_type()), "@", t.device().str());
}

std::string short_list(const std::vector<std::string>& names, size_t most = 8) {
  if (names.size() <= most) return join(names, ", ");
  std::vector<std::string> head(names.begin(), names.begin() + most);
  return cat(join(head, ", "), ", ... (", names.size() - most, " more)");
}

// A tensor over buffer[offset, offset + numel) that autograd does not treat
// as a view: with gradient_as_bucket_view it becomes param.grad(), and
// LibTorch 1.13's Optimizer::zero_grad() calls detach_(), which views refuse.
// The deleter holds the buffer so the memory outlives every alias.
at::Tensor alias(const at::Tensor& buffer, int64_t offset, at::IntArrayRef sizes) {
  auto* base = static_cast<char*>(buffer.data_ptr()) + offset * buffer.element_size();
  return at::from_blob(
      base, sizes, [keep = buffer](void*) {}, buffer.options());
}

bool aliases(const at::Tensor& grad, const at::Tensor& view) {
  return grad.defined() && grad.data_ptr() == view.data_ptr() && grad.sizes() == view.sizes();
}

constexpr const char* kUsedMapWhat = "allreduce of DDP's used-parameter map";

// The asynchronous allreduce of the used-parameter map (Note [Unused parameters]).
class UsedMapReduction : public PendingReduction {
 public:
  UsedMapReduction(const ProcessGroup& pg, at::Tensor map) : pg_(pg), map_(std::move(map)) {
    std::vector<at::Tensor> t{map_};
    try {
      work_ = pg_.backend()->allreduce(t);
    } catch (const std::exception& e) {
      rethrow_dist_error(e, pg_.rank(), kUsedMapWhat, pg_.timeout());
    }
  }
  void wait() override { wait_work(work_, pg_, kUsedMapWhat); }

 private:
  const ProcessGroup& pg_;
  at::Tensor map_;
  c10::intrusive_ptr<c10d::Work> work_;
};

// Every autograd node reachable from the outputs' grad_fn.
std::unordered_set<const torch::autograd::Node*> reachable_nodes(
    const std::vector<at::Tensor>& outputs) {
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  for (const at::Tensor& t : outputs) {
    if (!t.defined() || !t.requires_grad()) continue;
    std::shared_ptr<torch::autograd::Node> fn = t.grad_fn();
    if (!fn) fn = torch::autograd::impl::try_get_grad_accumulator(t);
    if (fn && seen.insert(fn.get()).second) stack.push_back(fn.get());
  }
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    for (const auto& edge : node->next_edges()) {
      torch::autograd::Node* next = edge.function.get();
      if (next && seen.insert(next).second) stack.push_back(next);
    }
  }
  return seen;
}

}  // namespace

Reducer::Reducer(std::vector<std::string> names, std::vector<at::Tensor> params, ProcessGroup pg,
                 DdpOptions options)
    : names_(std::move(names)),
      params_(std::move(params)),
      pg_(std::move(pg)),
      options_(std::move(options)),
      hook_(options_.comm_hook ? options_.comm_hook : allreduce_hook()) {
  if (options_.bucket_cap_mb <= 0 || options_.first_bucket_cap_mb <= 0) {
    throw InvalidArgument(
        cat("DDP: bucket sizes must be positive (bucket_cap_mb=", options_.bucket_cap_mb,
            ", first_bucket_cap_mb=", options_.first_bucket_cap_mb, ")"));
  }
  // Reverse registration order: the last layers' gradients are ready first.
  std::vector<size_t> order(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) order[i] = params_.size() - 1 - i;
  totals_.comm_hook = hook_->name();
  if (options_.gradient_divisor < 0) {
    throw InvalidArgument(cat("DDP: gradient_divisor must be 0 (the world size) or positive, got ",
                              options_.gradient_divisor));
  }
  const int divisor = options_.gradient_divisor > 0 ? options_.gradient_divisor : pg_.size();
  scale_ = at::scalar_tensor(1.0 / divisor, at::kDouble);
  build_buckets(order);
  reset_pass_locked();
}

Reducer::~Reducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) {
    accumulators_[i]->del_post_hook(hook_keys_[i]);
  }
}

void Reducer::build_buckets(const std::vector<size_t>& order) {
  std::vector<ddp::TensorInfo> infos;
  for (size_t p : order) {
    infos.push_back({static_cast<int64_t>(params_[p].numel() * params_[p].element_size()),
                     tensor_key(params_[p])});
  }
  const int64_t mib = 1 << 20;
  auto groups =
      ddp::assign_buckets(infos, {static_cast<int64_t>(options_.first_bucket_cap_mb * mib),
                                  static_cast<int64_t>(options_.bucket_cap_mb * mib)});

  std::vector<Bucket> buckets(groups.size());
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  for (size_t b = 0; b < groups.size(); ++b) {
    Bucket& bucket = buckets[b];
    int64_t numel = 0;
    for (size_t pos : groups[b]) numel += params_[order[pos]].numel();
    const at::Tensor& first = params_[order[groups[b].front()]];
    bucket.grad_bucket.index = static_cast<int>(b);
    bucket.grad_bucket.buffer = at::zeros({numel}, first.options().requires_grad(false));
    int64_t offset = 0;
    for (size_t pos : groups[b]) {
      const size_t p = order[pos];
      bucket_of_[p] = b;
      slot_of_[p] = bucket.params.size();
      bucket.params.push_back(p);
      bucket.grad_bucket.parameter_names.push_back(names_[p]);
      bucket.views.push_back(alias(bucket.grad_bucket.buffer, offset, params_[p].sizes()));
      offset += params_[p].numel();
    }
    bucket.pending = bucket.params.size();
    bucket.grad_bucket.gradients = bucket.views;
    bucket.grad_bucket.bucket_count = static_cast<int>(groups.size());
  }
  buckets_ = std::move(buckets);
  totals_.bucket_bytes.clear();
  totals_.bucket_parameters.clear();
  for (const Bucket& b : buckets_) {
    totals_.bucket_bytes.push_back(b.grad_bucket.buffer.numel() *
                                   b.grad_bucket.buffer.element_size());
    totals_.bucket_parameters.push_back(static_cast<int64_t>(b.params.size()));
  }
}

void Reducer::install_hooks() {
  std::weak_ptr<Reducer> self = weak_from_this();
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    if (!acc) {
      throw InvalidArgument(cat("DDP: parameter '", names_[i], "' does not require a gradient"));
    }
    auto hook = std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [self, i](const torch::autograd::variable_list& outputs,
                  const torch::autograd::variable_list& /*inputs*/) {
          if (auto r = self.lock()) r->on_grad_ready(i);
          return outputs;
        });
    hook_keys_.push_back(acc->add_post_hook(std::move(hook)));
    accumulators_.push_back(std::move(acc));
  }
}

void Reducer::reset_pass_locked() {
  ready_.assign(params_.size(), false);
  used_.assign(params_.size(), false);
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
    b.stage = 0;
  }
  next_launch_ = 0;
  backward_started_ = false;
  unused_marked_ = false;
  launch_queue_.clear();
  used_work_.reset();
}

std::vector<std::string> Reducer::unready_names() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!ready_[i]) out.push_back(names_[i]);
  }
  return out;
}

bool Reducer::search_unused_this_pass() const {
  if (options_.static_graph) return synced_passes_ == 0;
  return options_.find_unused_parameters;
}

void Reducer::set_sync(bool sync) {
  std::lock_guard<std::mutex> lock(mu_);
  sync_ = sync;
}

bool Reducer::sync() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sync_;
}

void Reducer::prepare_forward() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) {
      throw DistError(cat("rank ", pg_.rank(),
                          ": DDP cannot be used after a communication failure in an earlier "
                          "iteration (the ranks' collectives are now out of step); first "
                          "failure: ",
                          failure_,
                          ". Fix the cause, then create the process group and the DDP wrapper "
                          "again (under dtrain run: let the worker exit so that the group is "
                          "restarted)"));
    }
    if (backward_started_) {
      // The last backward pass began reducing but never finished: autograd
      // raised, or parameters never got a gradient.
      std::string missing = short_list(unready_names());
      reset_pass_locked();
      armed_ = false;
      throw DistError(cat("rank ", pg_.rank(),
                          ": DDP's previous iteration did not finish its gradient reduction "
                          "before this forward; parameters without a gradient: ",
                          missing.empty() ? "none" : missing,
                          ". If some parameters take no part in the loss, construct DDP with "
                          "find_unused_parameters = true"));
    }
    grad_enabled_at_forward_ = at::GradMode::is_enabled();
    forward_start_ = Clock::now();
  }
  if (grad_enabled_at_forward_) maybe_rebuild_buckets();
}

void Reducer::maybe_rebuild_buckets() {
  std::vector<size_t> order;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (rebuilt_ || synced_passes_ == 0) return;
    rebuilt_ = true;
    if (options_.find_unused_parameters && !options_.static_graph) return;
    order = ready_order_;
  }
  // Parameters that never fired a hook (unused under static_graph) go last,
  // in the original (reverse registration) order.
  std::vector<bool> seen(params_.size(), false);
  for (size_t p : order) seen[p] = true;
  for (size_t i = params_.size(); i-- > 0;) {
    if (!seen[i]) order.push_back(i);
  }
  if (pg_.size() > 1) {
    // Rank 0's order for everyone: all ranks must build the same buckets.
    at::Tensor t = at::empty({static_cast<int64_t>(order.size())}, at::kLong);
    for (size_t i = 0; i < order.size(); ++i)
      t.data_ptr<int64_t>()[i] = static_cast<int64_t>(order[i]);
    if (params_[0].device().is_cuda()) t = t.to(params_[0].device());
    std::vector<at::Tensor> ts{t};
    pg_.broadcast(ts, 0);
    at::Tensor got = ts[0].cpu();
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = static_cast<size_t>(got.data_ptr<int64_t>()[i]);
  }
  at::NoGradGuard no_grad;
  std::lock_guard<std::mutex> lock(mu_);
  build_buckets(order);
  reset_pass_locked();
}

void Reducer::finish_forward(const std::vector<at::Tensor>& outputs) {
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    forward_end_ = Clock::now();
    armed_ = sync_ && grad_enabled_at_forward_;
    if (!armed_) return;
    generation = ++generation_;
    unused_.clear();
    unused_known_ = false;
    if (search_unused_this_pass()) {
      if (!outputs.empty()) {
        auto seen = reachable_nodes(outputs);
        for (size_t i = 0; i < params_.size(); ++i) {
          if (!seen.count(accumulators_[i].get())) unused_.push_back(i);
        }
        unused_known_ = true;
      }
    } else if (options_.static_graph) {
      unused_ = static_unused_;
      unused_known_ = true;
    }
  }
  std::weak_ptr<Reducer> self = weak_from_this();
  for (const at::Tensor& t : outputs) {
    // Not on leaves: a parameter returned as is would keep the hook forever.
    if (!t.defined() || !t.requires_grad() || !t.grad_fn()) continue;
    t.register_hook([self, generation](const at::Tensor&) {
      if (auto r = self.lock()) r->on_output_grad(generation);
    });
  }
}

void Reducer::on_output_grad(uint64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  if (generation > reduced_generation_) return;
  throw InvalidArgument(
      cat("rank ", pg_.rank(),
          ": DDP: backward reached the output of a DDP forward whose gradients were already "
          "reduced (backward called twice on one DDP forward, e.g. with retain_graph); DDP "
          "synchronises one backward per forward, so this one would leave the ranks' gradients "
          "different. Run ddp.forward() again before each backward, or add the losses and call "
          "backward() once"));
}

void Reducer::on_grad_ready(size_t param) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!armed_) return;  // Note [Armed by forward]: accumulate locally
  if (!backward_started_) {
    backward_started_ = true;
    std::weak_ptr<Reducer> self = weak_from_this();
    torch::autograd::Engine::get_default_engine().queue_callback([self] {
      if (auto r = self.lock()) r->finalize_backward();
    });
  }
  if (ready_[param]) {
    const bool found_unused =
        unused_known_ && std::find(unused_.begin(), unused_.end(), param) != unused_.end();
    if (found_unused) {
      throw DistError(cat(
          "rank ", pg_.rank(), ": DDP: parameter '", names_[param], "' got a gradient although ",
          options_.static_graph ? "it was unused in the first iteration and static_graph is set"
                                : "the forward's outputs do not depend on it",
          "; the graph changed after the forward (or between iterations). Set static_graph = "
          "false, or make the forward's outputs depend on every parameter that gets a "
          "gradient"));
    }
    throw DistError(cat("rank ", pg_.rank(), ": DDP: parameter '", names_[param],
                        "' got its gradient twice in one backward pass (the module's "
                        "forward ran twice for one loss, or a parameter is shared "
                        "through an unsupported path); this is not supported"));
  }
  if (unused_known_ && !unused_marked_) {
    unused_marked_ = true;
    for (size_t u : unused_) {
      if (u != param && !ready_[u]) mark_ready_locked(u, /*used=*/false);
    }
  }
  if (!rebuilt_ && synced_passes_ == 0) ready_order_.push_back(param);
  mark_ready_locked(param, /*used=*/true);
  launch_queued(lock);
}

void Reducer::mark_ready_locked(size_t param, bool used) {
  at::NoGradGuard no_grad;
  Bucket& bucket = buckets_[bucket_of_[param]];
  at::Tensor& view = bucket.views[slot_of_[param]];
  at::Tensor& grad = params_[param].mutable_grad();
  // An unused parameter still contributes a gradient accumulated under
  // no_sync(), as in PyTorch; otherwise zero.
  if (!grad.defined()) {
    view.zero_();
  } else if (options_.gradient_as_bucket_view && aliases(grad, view)) {
    view.mul_(scale_);
  } else {
    // Scale while copying: one pass over the gradient instead of two.
    at::mul_out(view, grad, scale_);
    if (options_.gradient_as_bucket_view) grad = view;
  }
  ready_[param] = true;
  used_[param] = used;
  if (--bucket.pending != 0) return;
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    launch_queue_.push_back(next_launch_++);
  }
  if (next_launch_ == buckets_.size() && search_unused_this_pass() && pg_.backend()) {
    // Every parameter is ready: the used map is final. Its allreduce goes
    // after the last bucket's, the same position on every rank.
    used_map_ = at::zeros({static_cast<int64_t>(params_.size())}, at::kInt);
    int* p = used_map_.data_ptr<int>();
    for (size_t i = 0; i < params_.size(); ++i) p[i] = used_[i] ? 1 : 0;
    if (params_[0].device().is_cuda()) used_map_ = used_map_.to(params_[0].device());
    launch_queue_.push_back(buckets_.size());
  }
}

void Reducer::launch_queued(std::unique_lock<std::mutex>& lock) {
  if (launching_) return;  // the launching thread drains what we queued
  launching_ = true;
  while (!launch_queue_.empty()) {
    const size_t b = launch_queue_.front();
    launch_queue_.pop_front();
    const bool is_bucket = b < buckets_.size();
    at::Tensor used_map = used_map_;
    lock.unlock();
    std::unique_ptr<PendingReduction> work;
    std::exception_ptr error;
    std::string message;
    try {
      if (is_bucket) {
        buckets_[b].launched = Clock::now();
        work = hook_->start(pg_, buckets_[b].grad_bucket);
      } else {
        work = std::make_unique<UsedMapReduction>(pg_, used_map);
      }
    } catch (const std::exception& e) {
      error = std::current_exception();
      message = e.what();
    }
    lock.lock();
    if (error) {
      launching_ = false;
      fail_locked(error, cat(is_bucket ? cat("launching gradient bucket ", b) : kUsedMapWhat,
                             " with comm hook '", hook_->name(), "': ", message));
    }
    if (is_bucket) {
      buckets_[b].work = std::move(work);
      launch_stages(lock, stages_due_locked(b));
    } else {
      used_work_ = std::move(work);
    }
  }
  launching_ = false;
}

std::vector<size_t> Reducer::stages_due_locked(size_t slot) const {
  std::vector<size_t> due;
  for (size_t j = std::min(slot, buckets_.size()); j-- > 0;) {
    const Bucket& b = buckets_[j];
    if (b.work && b.work->has_next_stage() && b.stage + 1 <= slot - j) due.push_back(j);
  }
  return due;
}

// Called with launching_ set (or from the final callback, when no hook can
// fire any more): stages run outside mu_.
void Reducer::launch_stages(std::unique_lock<std::mutex>& lock, const std::vector<size_t>& due) {
  for (size_t j : due) {
    PendingReduction* work = buckets_[j].work.get();
    lock.unlock();
    std::exception_ptr error;
    std::string message;
    try {
      work->launch_next_stage();
    } catch (const std::exception& e) {
      error = std::current_exception();
      message = e.what();
    }
    lock.lock();
    if (error) {
      launching_ = false;
      fail_locked(error, cat("launching stage ", buckets_[j].stage + 1, " of gradient bucket ", j,
                             " with comm hook '", hook_->name(), "': ", message));
    }
    ++buckets_[j].stage;
  }
}

void Reducer::launch_remaining_stages(std::unique_lock<std::mutex>& lock) {
  auto remaining = [this] {
    for (const Bucket& b : buckets_) {
      if (b.work && b.work->has_next_stage()) return true;
    }
    return false;
  };
  launching_ = true;
  for (size_t slot = buckets_.size(); remaining(); ++slot) {
    launch_stages(lock, stages_due_locked(slot));
  }
  launching_ = false;
}

void Reducer::fail_locked(std::exception_ptr error, const std::string& message) {
  if (failure_.empty()) failure_ = message;
  reset_pass_locked();
  armed_ = false;
  std::rethrow_exception(error);
}

void Reducer::finalize_backward() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!armed_ || !backward_started_) return;  // the pass already ended in an error
  const Clock::time_point backward_end = Clock::now();
  std::vector<std::string> missing = unready_names();
  if (!missing.empty()) {
    if (!options_.find_unused_parameters && !options_.static_graph) {
      std::string list = short_list(missing);
      reset_pass_locked();
      armed_ = false;
      throw DistError(cat("rank ", pg_.rank(), ": DDP: backward finished but ", missing.size(),
                          " parameter(s) got no gradient: ", list,
                          ". They took no part in computing the loss; construct DDP with "
                          "find_unused_parameters = true, or remove them from the module"));
    }
    // Used by the outputs but not by the loss, or outputs DDP could not see.
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) mark_ready_locked(i, /*used=*/false);
    }
    launch_queued(lock);
  }
  launch_remaining_stages(lock);
  std::vector<std::unique_ptr<PendingReduction>> works;
  for (Bucket& b : buckets_) works.push_back(std::move(b.work));
  std::unique_ptr<PendingReduction> used_work = std::move(used_work_);
  lock.unlock();
  std::exception_ptr error;
  std::string message;
  try {
    for (size_t i = 0; i < works.size(); ++i) {
      if (!works[i]) continue;
      works[i]->wait();
      buckets_[i].completed = works[i]->completed_at().value_or(Clock::now());
    }
    if (used_work) used_work->wait();
  } catch (const std::exception& e) {
    error = std::current_exception();
    message = e.what();
  }
  lock.lock();
  if (error) fail_locked(error, message);

  std::vector<bool> globally_used(params_.size(), true);
  if (used_work) {
    at::Tensor map = used_map_.cpu();
    for (size_t i = 0; i < params_.size(); ++i) globally_used[i] = map.data_ptr<int>()[i] > 0;
  } else if (search_unused_this_pass()) {
    globally_used = used_;  // one process: used here is used anywhere
  } else if (options_.static_graph) {
    globally_used = static_globally_used_;
  }
  if (options_.static_graph && synced_passes_ == 0) {
    static_unused_.clear();
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!used_[i]) static_unused_.push_back(i);
    }
    static_globally_used_ = globally_used;
  }
  write_back(globally_used);
  record_stats(backward_end);
  ++synced_passes_;
  reduced_generation_ = generation_;
  armed_ = false;
  // Observability hook (dtrain/timeline.h): the same launch/completion times,
  // handed over after the lock is released (user code never runs under it).
  std::vector<BucketTiming> timings;
  if (options_.bucket_observer) {
    for (size_t i = 0; i < buckets_.size(); ++i) {
      timings.push_back({static_cast<int>(i), totals_.bucket_bytes[i], buckets_[i].launched,
                         buckets_[i].completed});
    }
  }
  reset_pass_locked();
  lock.unlock();
  for (const BucketTiming& t : timings) options_.bucket_observer(t);
}

void Reducer::write_back(const std::vector<bool>& globally_used) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!globally_used[i]) continue;  // unused everywhere: grad untouched
    const at::Tensor& view = buckets_[bucket_of_[i]].views[slot_of_[i]];
    at::Tensor& grad = params_[i].mutable_grad();
    if (options_.gradient_as_bucket_view) {
      if (!aliases(grad, view)) grad = view;
    } else if (grad.defined()) {
      grad.copy_(view);
    } else {
      grad = view.clone();
    }
  }
}

void Reducer::record_stats(Clock::time_point backward_end) {
  // The wire is taken as serial: bucket i occupies it from
  // max(launch_i, completion_{i-1}) to completion_i. Communication is hidden
  // while it runs before backward's end.
  double comm = 0, exposed = 0;
  Clock::time_point wire_free{};
  for (const Bucket& b : buckets_) {
    Clock::time_point start = std::max(b.launched, wire_free);
    Clock::time_point end = std::max(b.completed, start);
    comm += seconds(end - start);
    if (end > backward_end) exposed += seconds(end - std::max(start, backward_end));
    wire_free = end;
  }
  const double n = static_cast<double>(totals_.iterations);
  auto avg = [n](double old, double x) { return (old * n + x) / (n + 1); };
  totals_.forward_seconds = avg(totals_.forward_seconds, seconds(forward_end_ - forward_start_));
  totals_.backward_compute_seconds =
      avg(totals_.backward_compute_seconds, seconds(backward_end - forward_end_));
  totals_.comm_seconds = avg(totals_.comm_seconds, comm);
  totals_.exposed_comm_seconds = avg(totals_.exposed_comm_seconds, exposed);
  totals_.overlapped_comm_seconds = avg(totals_.overlapped_comm_seconds, comm - exposed);
  totals_.iterations += 1;
}

DdpStats Reducer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return totals_;
}

std::vector<std::vector<std::string>> Reducer::bucket_names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) out.push_back(b.grad_bucket.parameter_names);
  return out;
}

}  // namespace dtrain::detail
