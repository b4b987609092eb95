#include <functional>

#include <ATen/ATen.h>

#include "common/strings.h"
#include "common/torch_compat.h"
#include "dtrain/ddp.h"
#include "dtrain/errors.h"
#include "dtrain/powersgd.h"

namespace dtrain {
namespace {

std::string bucket_what(const GradBucket& b) {
  return cat(
      "allreduce of gradient bucket ", b.index, " (", b.parameter_names.size(), " parameters: ",
      join(b.parameter_names.size() > 4
               ? std::vector<std::string>(b.parameter_names.begin(), b.parameter_names.begin() + 4)
               : b.parameter_names,
           ", "),
      b.parameter_names.size() > 4 ? ", ..." : "", ")");
}

// Waits for a Work and runs what turns its result into the bucket's.
class WorkReduction : public PendingReduction {
 public:
  WorkReduction(Work work, std::function<void()> finish)
      : work_(std::move(work)), finish_(std::move(finish)) {}
  void wait() override {
    work_.wait();
    if (finish_) finish_();
  }
  std::optional<std::chrono::steady_clock::time_point> completed_at() const override {
    return work_.completed_at();
  }

 private:
  Work work_;
  std::function<void()> finish_;
};

// Stages run one after the other: each waits for the previous stage's Work.
class StagedReduction : public PendingReduction {
 public:
  StagedReduction(Work first, std::vector<std::function<Work()>> stages,
                  std::function<void()> finish)
      : work_(std::move(first)), stages_(std::move(stages)), finish_(std::move(finish)) {}
  bool has_next_stage() const override { return next_ < stages_.size(); }
  void launch_next_stage() override {
    work_.wait();
    work_ = stages_[next_++]();
  }
  void wait() override {
    while (has_next_stage()) launch_next_stage();  // a caller that never launched them
    work_.wait();
    if (finish_) finish_();
  }
  std::optional<std::chrono::steady_clock::time_point> completed_at() const override {
    return work_.completed_at();
  }

 private:
  Work work_;
  std::vector<std::function<Work()>> stages_;
  size_t next_ = 0;
  std::function<void()> finish_;
};

// bf16 where Gloo cannot sum it (LibTorch 1.13): gather every rank's bf16
// bits and sum them locally in fp32. For two ranks this moves as many
// bytes as an allreduce would; beyond that it trades bandwidth for the format.
std::unique_ptr<PendingReduction> gather_sum(const ProcessGroup& pg, GradBucket& bucket,
                                             const at::Tensor& wire) {
  // Gloo copies half tensors bit for bit (it has no int16); same width.
  at::Tensor in = wire.view(at::kHalf);
  std::vector<at::Tensor> out;
  for (int r = 0; r < pg.size(); ++r) out.push_back(at::empty_like(in));
  Work work = pg.all_gather_async(in, out, bucket_what(bucket));
  return make_pending_reduction(std::move(work), [&bucket, out] {
    at::Tensor sum = at::zeros_like(bucket.buffer, bucket.buffer.options().dtype(at::kFloat));
    for (const auto& part : out) sum.add_(part.view(at::kBFloat16).to(at::kFloat));
    bucket.buffer.copy_(sum);
  });
}

class CastHook : public CommHook {
 public:
  CastHook(std::string name, c10::optional<at::ScalarType> wire_type)
      : name_(std::move(name)), wire_type_(wire_type) {}
  std::unique_ptr<PendingReduction> start(const ProcessGroup& pg, GradBucket& bucket) override {
    if (pg.size() == 1) return make_pending_reduction(Work());
    at::Tensor wire = wire_type_ && bucket.buffer.scalar_type() != *wire_type_
                          ? bucket.buffer.to(*wire_type_)
                          : bucket.buffer;
    if (wire.scalar_type() == at::kBFloat16 && !compat::kGlooAllreducesBFloat16 &&
        pg.backend_name() == "gloo") {
      return gather_sum(pg, bucket, wire);
    }
    Work work = pg.all_reduce_sum_async(wire, bucket_what(bucket));
    if (wire.is_same(bucket.buffer)) return make_pending_reduction(std::move(work));
    return make_pending_reduction(std::move(work), [&bucket, wire] { bucket.buffer.copy_(wire); });
  }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  c10::optional<at::ScalarType> wire_type_;
};

// Note [The noop hook]
// PyTorch's debugging_hooks.noop_hook: the bucket is handed back as it came,
// with no collective, so a DDP step with it costs what the step costs without
// any communication (headroom analysis: how fast could the step be). dtrain's
// reducer has already divided the bucket by the world size while copying the
// gradients in (one pass, Reducer::mark_ready_locked), so each rank keeps its
// own gradient divided by the world size; PyTorch leaves hooked buckets
// undivided (its hooks divide), so there each rank keeps its own gradient.
// Undoing the division here would cost a pass over every gradient that
// PyTorch's noop step does not pay, so the scale is left as it is: the
// replicas diverge either way, and the hook is for measuring only.
class NoopHook : public CommHook {
 public:
  std::unique_ptr<PendingReduction> start(const ProcessGroup& /*pg*/,
                                          GradBucket& /*bucket*/) override {
    return make_pending_reduction(Work());
  }
  std::string name() const override { return "noop"; }
};

}  // namespace

std::unique_ptr<PendingReduction> make_pending_reduction(Work work, std::function<void()> finish) {
  return std::make_unique<WorkReduction>(std::move(work), std::move(finish));
}

std::unique_ptr<PendingReduction> make_staged_reduction(Work first,
                                                        std::vector<std::function<Work()>> stages,
                                                        std::function<void()> finish) {
  return std::make_unique<StagedReduction>(std::move(first), std::move(stages), std::move(finish));
}

std::shared_ptr<CommHook> allreduce_hook() {
  return std::make_shared<CastHook>("allreduce", c10::nullopt);
}
std::shared_ptr<CommHook> fp16_compress_hook() {
  return std::make_shared<CastHook>("fp16", at::kHalf);
}
std::shared_ptr<CommHook> bf16_compress_hook() {
  return std::make_shared<CastHook>("bf16", at::kBFloat16);
}

std::shared_ptr<CommHook> noop_hook() { return std::make_shared<NoopHook>(); }

std::shared_ptr<CommHook> comm_hook_by_name(const std::string& name) {
  if (name == "none" || name == "allreduce") return allreduce_hook();
  if (name == "fp16") return fp16_compress_hook();
  if (name == "bf16") return bf16_compress_hook();
  if (name == "powersgd") return powersgd_hook();
  if (name == "noop") return noop_hook();
  throw InvalidArgument(
      cat("unknown comm hook '", name, "'; valid hooks: ", join(comm_hook_names(), ", ")));
}

std::vector<std::string> comm_hook_names() { return {"none", "fp16", "bf16", "powersgd", "noop"}; }

}  // namespace dtrain
