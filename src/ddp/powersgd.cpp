// Note [PowerSGD as PyTorch does it]
// This is torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py's
// powerSGD_hook, step for step, so that results equal PyTorch's (tested
// against both 1.13 and 2.11 in tests/ddp/test_powersgd_vs_pytorch.cpp):
//   * matrices are grouped by shape in order of first appearance and P and
//     Q laid out in that order (also without batching), because the random
//     Qs are drawn in that order;
//   * a Q is random when warm start is off or the bucket had none yet:
//     numpy's RandomState(random_seed).randint(1_000_000_000) seeds a fresh
//     CPU generator (torch.manual_seed in a forked RNG), one draw per such
//     bucket, and torch.randn fills the Qs one after the other;
//   * Gram-Schmidt orthogonalizes for rank <= 2, QR (LAPACK's Householder,
//     whose column signs differ from Gram-Schmidt's) above;
//   * the iteration count rises when the last bucket (is_last) finishes.
// Differences, none visible in the results: the uncompressed tensors and
// the Ps are allreduced at once (PyTorch chains the P allreduce behind the
// uncompressed one); empty collectives are skipped; the Q stage is launched
// by the reducer on its fixed schedule instead of a future's callback; and
// the state is kept per parameter instead of per bucket index, so that it
// survives DDP's bucket rebuild and a resume whose first iteration still
// has the unrebuilt buckets (PyTorch's per-index state would mismatch
// there). A bucket needs random Qs when any of its compressed matrices has
// none, which is PyTorch's rule whenever the bucket layout is stable.
//
// Note [Scaled input]
// PyTorch's hook gets the local gradient sum G and divides by the world
// size W itself; dtrain's reducer hands over G / W (docs/architecture.md).
// With input M' = M / W (error included, see below): P' = P / W, and since
// Gram-Schmidt normalises each column, orthogonalizing P' with epsilon / W
// gives PyTorch's orthogonal P exactly; Q' = Σ M'ᵀP = PyTorch's Q after its
// division by W, so the Q allreduce needs no division; the uncompressed sum
// is already the mean. The output P·Q'ᵀ is PyTorch's. PyTorch's error is
// (its input) − (the output); ours is (our input) − (the output) / W, which
// is PyTorch's divided by W, so the next step's input is again PyTorch's
// divided by W. QR's Q does not depend on a positive scale.
#include "dtrain/powersgd.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <ostream>
#include <random>
#include <set>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain {
namespace {

// numpy's legacy RandomState(seed).randint(high) for high <= 2^32: MT19937
// seeded with init_genrand (std::mt19937's seeding), a 32-bit draw masked to
// the next power of two minus one, rejected while above high - 1.
class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : seed_(seed), engine_(seed) {}
  uint32_t randint(uint32_t high) {
    const uint32_t max = high - 1;
    uint32_t mask = max;
    for (int s = 1; s < 32; s <<= 1) mask |= mask >> s;
    uint32_t v;
    do {
      v = static_cast<uint32_t>(engine_()) & mask;
    } while (v > max);
    ++draws_;
    return v;
  }
  int64_t draws() const { return draws_; }
  // The state after `draws` draws from the seed (for checkpoints).
  void replay(int64_t draws) {
    engine_.seed(seed_);
    draws_ = 0;
    while (draws_ < draws) randint(1000000000u);
  }

 private:
  uint32_t seed_;
  std::mt19937 engine_;
  int64_t draws_ = 0;
};

void gram_schmidt(const at::Tensor& m, double epsilon) {
  const int64_t cols = m.size(2);
  for (int64_t i = 0; i < cols; ++i) {
    at::Tensor col = m.narrow(2, i, 1);
    at::Tensor norm = at::linalg_vector_norm(col, 2, at::IntArrayRef{1}, /*keepdim=*/true);
    if (epsilon == 0) {
      col.div_(norm);
    } else {
      col.div_(norm + epsilon);
    }
    if (i + 1 < cols) {
      at::Tensor rest = m.narrow(2, i + 1, cols - i - 1);
      rest.sub_(at::sum(col * rest, at::IntArrayRef{1}, /*keepdim=*/true) * col);
    }
  }
}

// PyTorch's _orthogonalize: a batch [B, n, r] in place.
void orthogonalize(const at::Tensor& m, double epsilon) {
  const auto dtype = m.scalar_type();
  if (m.size(2) <= 2 || dtype == at::kHalf || dtype == at::kBFloat16) {
    gram_schmidt(m, epsilon);
  } else {
    m.copy_(std::get<0>(at::linalg_qr(m)));
  }
}

// torch.bmm(a, b, out=out): `out` is a view into P, Q or the bucket.
void bmm_into(at::Tensor out, const at::Tensor& a, const at::Tensor& b) { at::bmm_out(out, a, b); }

// Note [Skinny products]
// Compression computes P = M·Q and Q = Mᵀ·P, M [B, n, m] the gradients
// (row-major) and P, Q of r columns, r = 1..4 in practice. PyTorch's hook
// writes them as torch.bmm(M, Q) and torch.bmm(Mᵀ, P), and on the CPU
// LibTorch's BLAS (MKL in PyTorch's wheel; measured on this project's AMD
// EPYC, one thread) runs those two shapes far off its speed for r >= 2:
// VGG-16's 25088 x 4096 classifier weight took 860 ms for Mᵀ·P against 39
// ms for the same product as (Pᵀ)·M with Pᵀ contiguous, and 121 ms for M·Q
// against 39 ms with Q's columns contiguous (rank 2; docs/benchmarks.md).
// So Q is computed as the transpose of bmm(contiguous(Pᵀ), M), and P as
// bmm(M, Q laid out column by column): the same products, summed in
// another order, so equal to PyTorch's within fp32 rounding (the reference
// tests' tolerance). The extra copies are of P or Q only (r·n values).
void m_times_q(at::Tensor p, const at::Tensor& m, const at::Tensor& q) {
  at::bmm_out(p, m, q.transpose(1, 2).contiguous().transpose(1, 2));
}
void mt_times_p(at::Tensor q, const at::Tensor& m, const at::Tensor& p) {
  q.copy_(at::bmm(p.transpose(1, 2).contiguous(), m).transpose(1, 2));
}

// What one gradient of n x m elements sends, and whether it is compressed:
// PyTorch's _should_compress, (n + m)·r·min_compression_rate < n·m.
int64_t numel_sent(int64_t n, int64_t m, const PowerSGDOptions& o, bool* compressed) {
  const int64_t r = std::min({n, m, o.matrix_approximation_rank});
  const int64_t before = n * m, after = (n + m) * r;
  *compressed = static_cast<double>(after) * o.min_compression_rate < static_cast<double>(before);
  return *compressed ? after : before;
}

// A gradient as PyTorch views it: [first dimension, the rest].
at::Tensor as_matrix(const at::Tensor& t) {
  if (t.dim() == 0) return t.view({1, 1});
  return t.view({t.size(0), -1});
}

struct Matrix {
  at::Tensor m;  // [n, m] view of the bucket
  std::string name;
};

// One batch: matrices of one shape ([B, n, m]; a view when B is 1 or
// batching is off, a stacked copy otherwise), and their P and Q views.
struct Batch {
  at::Tensor m, p, q;
  std::vector<Matrix> members;
  bool stacked = false;
};

class PowerSGDHookImpl : public PowerSGDHook {
 public:
  explicit PowerSGDHookImpl(PowerSGDOptions o)
      : o_(std::move(o)), rng_(static_cast<uint32_t>(o_.random_seed)) {
    o_.compression_stats_logging_frequency =
        std::max<int64_t>(1, o_.compression_stats_logging_frequency);
    if (o_.log) {
      *o_.log << "PowerSGD config: matrix_approximation_rank = " << o_.matrix_approximation_rank
              << "; start_powerSGD_iter = " << o_.start_powersgd_iter
              << "; min_compression_rate = " << o_.min_compression_rate
              << "; orthogonalization_epsilon = " << o_.orthogonalization_epsilon
              << "; use_error_feedback = " << o_.use_error_feedback
              << "; warm_start = " << o_.warm_start << "; random_seed = " << o_.random_seed
              << "; compression_stats_logging_frequency = "
              << o_.compression_stats_logging_frequency
              << "; batch_tensors_with_same_shape = " << o_.batch_tensors_with_same_shape
              << std::endl;
    }
  }

  std::string name() const override { return "powersgd"; }
  const PowerSGDOptions& options() const override { return o_; }

  PowerSGDStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  std::unique_ptr<PendingReduction> start(const ProcessGroup& pg, GradBucket& bucket) override {
    std::unique_lock<std::mutex> lock(mu_);
    at::Tensor input = bucket.buffer;
    if (stats_.iterations < o_.start_powersgd_iter) {
      maybe_increase_iter_locked(bucket);
      lock.unlock();
      return make_pending_reduction(pg.all_reduce_sum_async(input, what(bucket, "allreduce")));
    }
    at::NoGradGuard no_grad;
    const double world = pg.size();
    const auto& grads = bucket.gradients;
    const auto& names = bucket.parameter_names;
    if (grads.size() != names.size()) {
      throw InvalidArgument(cat("powersgd: bucket ", bucket.index, " has ", grads.size(),
                                " gradients but ", names.size(), " names"));
    }

    // Error feedback (PyTorch: input += error, then keep a copy).
    at::Tensor input_copy;
    if (o_.use_error_feedback) {
      for (size_t i = 0; i < grads.size(); ++i) {
        auto e = errors_.find(names[i]);
        if (e == errors_.end()) continue;
        check_shape(e->second, grads[i], "error", names[i]);
        grads[i].add_(e->second.to(grads[i].device()));
      }
      input_copy = input.clone();
    }

    // Step I: which tensors are compressed.
    std::vector<Matrix> compress;
    std::vector<at::Tensor> uncompressed;
    for (size_t i = 0; i < grads.size(); ++i) {
      at::Tensor matrix = as_matrix(grads[i]);
      const int64_t n = matrix.size(0), m = matrix.size(1);
      bool compressed = false;
      stats_.numel_before_compression += n * m;
      stats_.numel_after_compression += numel_sent(n, m, o_, &compressed);
      if (compressed) {
        compress.push_back({matrix, names[i]});
      } else {
        uncompressed.push_back(grads[i]);
      }
    }
    report_stats_locked(bucket);

    // Step II: the uncompressed tensors in one collective.
    at::Tensor flat_uncompressed;
    Work uncompressed_work;
    const bool all_uncompressed = compress.empty();
    if (!uncompressed.empty()) {
      if (all_uncompressed) {
        flat_uncompressed = input;
      } else {
        std::vector<at::Tensor> flat;
        for (const auto& t : uncompressed) flat.push_back(t.reshape(-1));
        flat_uncompressed = at::cat(flat);
      }
    }

    // Step III: batches of same-shaped matrices, P and Q memory.
    std::vector<Batch> batches = make_batches(compress);
    int64_t p_size = 0, q_size = 0;
    for (const Batch& b : batches) {
      const int64_t r = rank_of(b.m);
      p_size += b.m.size(0) * b.m.size(1) * r;
      q_size += b.m.size(0) * b.m.size(2) * r;
    }
    const auto options = input.options();
    at::Tensor p_memory = at::empty({p_size}, options);
    at::Tensor q_memory = at::empty({q_size}, options);
    // Note [One draw per random bucket]: PyTorch draws a seed whenever a
    // bucket needs random Qs (warm start off, or the bucket's first
    // compressed step), also for a bucket with no matrix to compress; a
    // missed draw would shift every later bucket's Qs. A bucket with
    // matrices needs them when one has no Q yet; one without matrices is
    // remembered by its first parameter's name (a checkpoint from before
    // this was saved draws once more for such buckets after resuming).
    bool need_random = !o_.warm_start;
    if (o_.warm_start && batches.empty()) {
      const std::string key = names.empty() ? std::string() : names.front();
      need_random = seen_buckets_.insert(key).second;
    }
    int64_t p_at = 0, q_at = 0;
    for (Batch& b : batches) {
      const int64_t batch = b.m.size(0), n = b.m.size(1), m = b.m.size(2), r = rank_of(b.m);
      b.p = p_memory.narrow(0, p_at, batch * n * r).view({batch, n, r});
      b.q = q_memory.narrow(0, q_at, batch * m * r).view({batch, m, r});
      p_at += batch * n * r;
      q_at += batch * m * r;
      for (size_t k = 0; k < b.members.size(); ++k) {
        auto q = qs_.find(b.members[k].name);
        if (q == qs_.end() || !o_.warm_start) {
          need_random = true;
          continue;
        }
        check_shape(q->second, b.q[static_cast<int64_t>(k)], "q", b.members[k].name);
        b.q[static_cast<int64_t>(k)].copy_(q->second);
      }
    }
    if (need_random) {
      const uint32_t seed = rng_.randint(1000000000u);  // Note [One draw per random bucket]
      if (!batches.empty()) {
        at::Generator gen = at::detail::createCPUGenerator(seed);
        for (Batch& b : batches) {
          b.q.copy_(at::randn(b.q.sizes(), gen, at::TensorOptions().dtype(input.scalar_type())));
        }
      }
    }
    if (!batches.empty()) {
      for (Batch& b : batches) orthogonalize(b.q, o_.orthogonalization_epsilon);
      for (Batch& b : batches) m_times_q(b.p, b.m, b.q);  // Note [Skinny products]
    }
    lock.unlock();

    if (flat_uncompressed.defined()) {
      uncompressed_work = pg.all_reduce_sum_async(flat_uncompressed, what(bucket, "allreduce"));
    }
    auto self = std::static_pointer_cast<PowerSGDHookImpl>(shared_from_this_());
    auto finish = [self, &bucket, input, input_copy, flat_uncompressed, uncompressed,
                   uncompressed_work, batches, world]() {
      at::NoGradGuard no_grad;
      uncompressed_work.wait();
      if (flat_uncompressed.defined() && !flat_uncompressed.is_same(input)) {
        int64_t at = 0;
        for (const auto& t : uncompressed) {
          t.copy_(flat_uncompressed.narrow(0, at, t.numel()).view_as(t));
          at += t.numel();
        }
      }
      self->decompress(bucket, input, input_copy, batches, world);
    };
    if (batches.empty()) return make_pending_reduction(uncompressed_work, std::move(finish));

    Work p_work = pg.all_reduce_sum_async(p_memory, what(bucket, "PowerSGD P allreduce"));
    const double p_epsilon = o_.orthogonalization_epsilon / world;  // Note [Scaled input]
    const ProcessGroup* group = &pg;
    std::vector<std::function<Work()>> stages;
    stages.push_back([batches, q_memory, p_epsilon, group, &bucket]() {
      at::NoGradGuard no_grad;
      for (const Batch& b : batches) orthogonalize(b.p, p_epsilon);
      for (const Batch& b : batches) mt_times_p(b.q, b.m, b.p);  // Note [Skinny products]
      return group->all_reduce_sum_async(q_memory, what(bucket, "PowerSGD Q allreduce"));
    });
    return make_staged_reduction(std::move(p_work), std::move(stages), std::move(finish));
  }

  std::vector<std::pair<std::string, at::Tensor>> state() const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<std::string, at::Tensor>> out;
    auto scalar = [&out](const char* key, int64_t v) {
      out.emplace_back(key, at::scalar_tensor(v, at::kLong));
    };
    scalar("iter", stats_.iterations);
    scalar("rng_draws", rng_.draws());
    scalar("total_numel_before_compression", stats_.numel_before_compression);
    scalar("total_numel_after_compression", stats_.numel_after_compression);
    scalar("next_stats_report", next_stats_report_);
    for (const auto& [name, t] : errors_) out.emplace_back("error." + name, t.cpu().clone());
    for (const auto& [name, t] : qs_) out.emplace_back("q." + name, t.cpu().clone());
    for (const auto& key : seen_buckets_)
      out.emplace_back("seen_bucket." + key, at::scalar_tensor(1, at::kLong));
    return out;
  }

  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state) override {
    std::map<std::string, at::Tensor> errors, qs;
    std::map<std::string, int64_t> scalars;
    std::set<std::string> seen;
    for (const auto& [key, t] : state) {
      if (key.rfind("seen_bucket.", 0) == 0) {
        seen.insert(key.substr(12));
      } else if (key.rfind("error.", 0) == 0) {
        errors[key.substr(6)] = t.clone();
      } else if (key.rfind("q.", 0) == 0) {
        qs[key.substr(2)] = t.clone();
      } else if (t.numel() == 1) {
        scalars[key] = t.item<int64_t>();
      } else {
        throw InvalidArgument(cat("powersgd: unexpected state entry '", key, "'"));
      }
    }
    for (const char* key : {"iter", "rng_draws", "total_numel_before_compression",
                            "total_numel_after_compression", "next_stats_report"}) {
      if (!scalars.count(key)) {
        throw InvalidArgument(cat("powersgd: the saved state has no '", key, "'"));
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    stats_.iterations = scalars["iter"];
    rng_.replay(scalars["rng_draws"]);
    stats_.numel_before_compression = scalars["total_numel_before_compression"];
    stats_.numel_after_compression = scalars["total_numel_after_compression"];
    next_stats_report_ = scalars["next_stats_report"];
    errors_ = std::move(errors);
    qs_ = std::move(qs);
    seen_buckets_ = std::move(seen);  // Note [One draw per random bucket]
  }

  // Set by powersgd_hook(): start() hands the reduction a reference.
  std::weak_ptr<PowerSGDHookImpl> weak_self;

 private:
  std::shared_ptr<PowerSGDHookImpl> shared_from_this_() const {
    auto self = weak_self.lock();
    if (!self) throw InvalidArgument("powersgd: the hook must be made by powersgd_hook()");
    return self;
  }

  static std::string what(const GradBucket& b, const char* op) {
    return cat(op, " of gradient bucket ", b.index, " (", b.parameter_names.size(),
               " parameters, first '", b.parameter_names.empty() ? "" : b.parameter_names[0], "')");
  }

  int64_t rank_of(const at::Tensor& batch) const {
    return std::min({batch.size(1), batch.size(2), o_.matrix_approximation_rank});
  }

  static void check_shape(const at::Tensor& saved, const at::Tensor& now, const char* kind,
                          const std::string& name) {
    if (saved.sizes() != now.sizes()) {
      throw InvalidArgument(cat("powersgd: the saved ", kind, " of parameter '", name,
                                "' is shaped ", saved.sizes(), ", the parameter needs ",
                                now.sizes(), " (state from another model or options)"));
    }
  }

  std::vector<Batch> make_batches(const std::vector<Matrix>& compress) const {
    // Shapes in order of first appearance (Python's dict order).
    std::vector<std::pair<std::vector<int64_t>, std::vector<Matrix>>> groups;
    for (const Matrix& x : compress) {
      std::vector<int64_t> shape = x.m.sizes().vec();
      auto g = std::find_if(groups.begin(), groups.end(),
                            [&shape](const auto& e) { return e.first == shape; });
      if (g == groups.end()) {
        groups.push_back({shape, {x}});
      } else {
        g->second.push_back(x);
      }
    }
    std::vector<Batch> batches;
    for (auto& [shape, members] : groups) {
      if (o_.batch_tensors_with_same_shape && members.size() > 1) {
        std::vector<at::Tensor> ms;
        for (const auto& x : members) ms.push_back(x.m);
        Batch b;
        b.m = at::stack(ms);
        b.members = members;
        b.stacked = true;
        batches.push_back(std::move(b));
      } else {
        for (const auto& x : members) {
          Batch b;
          b.m = x.m.unsqueeze(0);
          b.members = {x};
          batches.push_back(std::move(b));
        }
      }
    }
    return batches;
  }

  void decompress(const GradBucket& bucket, const at::Tensor& input, const at::Tensor& input_copy,
                  const std::vector<Batch>& batches, double world) {
    for (const Batch& b : batches) bmm_into(b.m, b.p, b.q.transpose(1, 2));
    for (const Batch& b : batches) {
      if (!b.stacked) continue;
      for (size_t k = 0; k < b.members.size(); ++k) {
        b.members[k].m.copy_(b.m[static_cast<int64_t>(k)]);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (o_.use_error_feedback) {
      // Note [Scaled input]: PyTorch's error divided by the world size.
      at::Tensor error = input_copy.sub_(input, 1.0 / world);
      int64_t at = 0;
      for (size_t i = 0; i < bucket.gradients.size(); ++i) {
        const at::Tensor& g = bucket.gradients[i];
        errors_[bucket.parameter_names[i]] = error.narrow(0, at, g.numel()).view(g.sizes());
        at += g.numel();
      }
    }
    if (o_.warm_start) {
      for (const Batch& b : batches) {
        for (size_t k = 0; k < b.members.size(); ++k) {
          qs_[b.members[k].name] = b.q[static_cast<int64_t>(k)].clone();
        }
      }
    } else {
      qs_.clear();
    }
    maybe_increase_iter_locked(bucket);
  }

  void maybe_increase_iter_locked(const GradBucket& bucket) {
    if (!bucket.is_last()) return;
    stats_.iterations += 1;
    if (stats_.iterations == o_.start_powersgd_iter && o_.log) {
      *o_.log << "Start to apply PowerSGD after " << stats_.iterations << " iterations."
              << std::endl;
    }
  }

  void report_stats_locked(const GradBucket& bucket) {
    if (!bucket.is_last() || stats_.iterations < next_stats_report_) return;
    if (o_.log) {
      *o_.log << "Compression stats: iter " << stats_.iterations << ", total before compression "
              << stats_.numel_before_compression << ", total after compression "
              << stats_.numel_after_compression << ", rate " << stats_.compression_rate()
              << std::endl;
    }
    next_stats_report_ = stats_.iterations + o_.compression_stats_logging_frequency;
  }

  PowerSGDOptions o_;
  mutable std::mutex mu_;  // guards everything below; never held across a wait
  NumpyRandomState rng_;
  PowerSGDStats stats_;
  int64_t next_stats_report_ = 0;
  std::map<std::string, at::Tensor> errors_;  // this rank's, by parameter name
  std::map<std::string, at::Tensor> qs_;      // [m, r] per compressed parameter
  std::set<std::string> seen_buckets_;        // warm start: matrix-less buckets past their draw
};

}  // namespace

std::shared_ptr<PowerSGDHook> powersgd_hook(PowerSGDOptions options) {
  if (options.matrix_approximation_rank < 1) {
    throw InvalidArgument(cat("powersgd: matrix_approximation_rank must be at least 1 (got ",
                              options.matrix_approximation_rank, ")"));
  }
  if ((options.use_error_feedback || options.warm_start) && options.start_powersgd_iter <= 1) {
    throw InvalidArgument(
        cat("powersgd: start_powersgd_iter must be > 1 with error feedback or warm start (got ",
            options.start_powersgd_iter,
            "): DDP rebuilds its buckets after the first iteration, as PyTorch requires"));
  }
  if (options.random_seed < 0 || options.random_seed > 0xFFFFFFFFll) {
    throw InvalidArgument(
        cat("powersgd: random_seed must be in 0 .. 2^32-1 (got ", options.random_seed, ")"));
  }
  if (!(options.min_compression_rate >= 0)) {
    throw InvalidArgument(cat("powersgd: min_compression_rate must be >= 0 (got ",
                              options.min_compression_rate, ")"));
  }
  auto hook = std::make_shared<PowerSGDHookImpl>(std::move(options));
  hook->weak_self = hook;
  return hook;
}

std::shared_ptr<CommHook> comm_hook_by_name(const std::string& name,
                                            const PowerSGDOptions& powersgd) {
  if (name == "powersgd") return powersgd_hook(powersgd);
  return comm_hook_by_name(name);
}

void check_powersgd_rank(const CommHook* hook, const torch::nn::Module& module,
                         const std::string& model, const std::string& option) {
  const auto* p = dynamic_cast<const PowerSGDHook*>(hook);
  if (!p) return;
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& t : module.parameters()) shapes.push_back(t.sizes().vec());
  const int64_t most = powersgd_max_rank(shapes);
  const int64_t rank = p->options().matrix_approximation_rank;
  if (rank > most) {
    throw InvalidArgument(cat(option, " ", rank, " is larger than any layer of model ", model,
                              " allows (its largest matrix allows rank ", most,
                              ": min(rows, cols)); use ", option, " ", most, " or less"));
  }
}

int64_t powersgd_numel_after_compression(const std::vector<std::vector<int64_t>>& shapes,
                                         const PowerSGDOptions& options) {
  int64_t sent = 0;
  for (const auto& s : shapes) {
    int64_t rest = 1;  // as_matrix: a scalar is 1 x 1, others shape[0] x the rest
    for (size_t i = 1; i < s.size(); ++i) rest *= s[i];
    bool compressed = false;
    sent += numel_sent(s.empty() ? 1 : s[0], rest, options, &compressed);
  }
  return sent;
}

int64_t powersgd_max_rank(const std::vector<std::vector<int64_t>>& shapes) {
  int64_t best = 0;
  for (const auto& s : shapes) {
    if (s.size() < 2) continue;
    int64_t rest = 1;
    for (size_t i = 1; i < s.size(); ++i) rest *= s[i];
    best = std::max(best, std::min(s[0], rest));
  }
  return best;
}

}  // namespace dtrain
