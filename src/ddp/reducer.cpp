// Note [Reducer]
// One backward pass, as the reducer sees it:
//   1. autograd accumulates a parameter's gradient and runs our post-hook on
//      its AccumulateGrad node; the hook copies grad / world_size into the
//      parameter's slot of its bucket (or, with gradient_as_bucket_view,
//      scales the slot in place because grad already is that slot);
//   2. a bucket whose last parameter became ready is launched, but only after
//      every bucket before it: launches happen strictly in bucket order, so
//      every rank issues the same sequence of collectives whatever order its
//      autograd happens to run in;
//   3. the first hook of the pass queues a final callback with the autograd
//      engine; it runs once backward's computation is done, treats parameters
//      that got no gradient (find_unused_parameters) or reports them, waits
//      for every bucket and writes the averaged gradients back.
// Hooks hold a weak_ptr to the reducer, so a DataParallel destroyed before its
// module leaves harmless hooks behind (they are also removed by key).
#include "ddp/reducer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include "common/strings.h"
#include "ddp/bucketing.h"
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

}  // namespace

Reducer::Reducer(std::vector<std::string> names, std::vector<at::Tensor> params, ProcessGroup pg,
                 DdpOptions options)
    : names_(std::move(names)),
      params_(std::move(params)),
      pg_(std::move(pg)),
      options_(std::move(options)),
      hook_(options_.comm_hook ? options_.comm_hook : allreduce_hook()) {
  if (options_.bucket_cap_mb <= 0 || options_.first_bucket_cap_mb <= 0) {
    throw InvalidArgument(cat("DDP: bucket sizes must be positive (bucket_cap_mb=",
                              options_.bucket_cap_mb, ", first_bucket_cap_mb=",
                              options_.first_bucket_cap_mb, ")"));
  }
  // Reverse registration order: the last layers' gradients are ready first.
  std::vector<size_t> order(params_.size());
  std::vector<ddp::TensorInfo> infos;
  for (size_t i = 0; i < params_.size(); ++i) {
    order[i] = params_.size() - 1 - i;
    const at::Tensor& p = params_[order[i]];
    infos.push_back({static_cast<int64_t>(p.numel() * p.element_size()), tensor_key(p)});
  }
  const int64_t mib = 1 << 20;
  auto groups = ddp::assign_buckets(
      infos, {static_cast<int64_t>(options_.first_bucket_cap_mb * mib),
              static_cast<int64_t>(options_.bucket_cap_mb * mib)});

  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  buckets_.resize(groups.size());
  for (size_t b = 0; b < groups.size(); ++b) {
    Bucket& bucket = buckets_[b];
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
  }
  totals_.comm_hook = hook_->name();
  for (const Bucket& b : buckets_) {
    totals_.bucket_bytes.push_back(b.grad_bucket.buffer.numel() *
                                   b.grad_bucket.buffer.element_size());
    totals_.bucket_parameters.push_back(static_cast<int64_t>(b.params.size()));
  }
  scale_ = at::scalar_tensor(1.0 / pg_.size(), at::kDouble);
  reset_pass();
}

Reducer::~Reducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) {
    accumulators_[i]->del_post_hook(hook_keys_[i]);
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

void Reducer::reset_pass() {
  ready_.assign(params_.size(), false);
  used_.assign(params_.size(), false);
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
  }
  next_launch_ = 0;
  backward_started_ = false;
}

std::vector<std::string> Reducer::unready_names() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!ready_[i]) out.push_back(names_[i]);
  }
  return out;
}

void Reducer::prepare_forward() {
  std::lock_guard<std::mutex> lock(mu_);
  if (backward_started_) {
    // The last backward pass began reducing but never finished: autograd
    // raised, or parameters never got a gradient.
    std::string missing = short_list(unready_names());
    reset_pass();
    throw DistError(cat("rank ", pg_.rank(),
                        ": DDP's previous iteration did not finish its gradient reduction "
                        "before this forward; parameters without a gradient: ",
                        missing.empty() ? "none" : missing,
                        ". If some parameters take no part in the loss, construct DDP with "
                        "find_unused_parameters = true"));
  }
  forward_start_ = Clock::now();
}

void Reducer::finish_forward() { forward_end_ = Clock::now(); }

void Reducer::on_grad_ready(size_t param) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sync_) return;  // no_sync(): gradients accumulate locally
  if (!backward_started_) {
    backward_started_ = true;
    std::weak_ptr<Reducer> self = weak_from_this();
    torch::autograd::Engine::get_default_engine().queue_callback([self] {
      if (auto r = self.lock()) r->finalize_backward();
    });
  }
  if (ready_[param]) {
    throw DistError(cat("rank ", pg_.rank(), ": DDP: parameter '", names_[param],
                        "' got its gradient twice in one backward pass (the module's "
                        "forward ran twice for one loss, or a parameter is shared "
                        "through an unsupported path); this is not supported"));
  }
  mark_ready_locked(param, /*used=*/true);
}

void Reducer::mark_ready_locked(size_t param, bool used) {
  at::NoGradGuard no_grad;
  Bucket& bucket = buckets_[bucket_of_[param]];
  at::Tensor& view = bucket.views[slot_of_[param]];
  at::Tensor& grad = params_[param].mutable_grad();
  if (!used || !grad.defined()) {
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
  if (--bucket.pending == 0) launch_ready_locked();
}

void Reducer::launch_ready_locked() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    b.launched = Clock::now();
    b.work = hook_->start(pg_, b.grad_bucket);
  }
}

std::vector<bool> Reducer::all_reduce_used() {
  // A parameter counts as used when any rank used it.
  at::Tensor used = at::zeros({static_cast<int64_t>(params_.size())}, at::kInt);
  int* p = used.data_ptr<int>();
  for (size_t i = 0; i < params_.size(); ++i) p[i] = used_[i] ? 1 : 0;
  std::vector<at::Tensor> t{used};
  pg_.all_reduce_sum(t);
  std::vector<bool> out(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) out[i] = p[i] > 0;
  return out;
}

void Reducer::finalize_backward() {
  std::unique_lock<std::mutex> lock(mu_);
  const Clock::time_point backward_end = Clock::now();
  std::vector<std::string> missing = unready_names();
  if (!missing.empty()) {
    if (!options_.find_unused_parameters) {
      std::string list = short_list(missing);
      reset_pass();
      throw DistError(cat("rank ", pg_.rank(), ": DDP: backward finished but ", missing.size(),
                          " parameter(s) got no gradient: ", list,
                          ". They took no part in computing the loss; construct DDP with "
                          "find_unused_parameters = true, or remove them from the module"));
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) mark_ready_locked(i, /*used=*/false);
    }
  }
  try {
    for (Bucket& b : buckets_) {
      b.work->wait();
      b.completed = b.work->completed_at().value_or(Clock::now());
    }
  } catch (...) {
    reset_pass();
    throw;
  }
  std::vector<bool> globally_used(params_.size(), true);
  if (options_.find_unused_parameters) globally_used = all_reduce_used();
  write_back(globally_used);
  record_stats(backward_end);
  // Observability hook (dtrain/timeline.h): the same launch/completion times.
  if (options_.bucket_observer) {
    for (size_t i = 0; i < buckets_.size(); ++i) {
      options_.bucket_observer({static_cast<int>(i), totals_.bucket_bytes[i], buckets_[i].launched,
                                buckets_[i].completed});
    }
  }
  reset_pass();
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
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) out.push_back(b.grad_bucket.parameter_names);
  return out;
}

}  // namespace dtrain::detail
