#include <atomic>

#include <ATen/ATen.h>

#include "comm/state.h"
#include "dtrain/compat.h"
#include "common/strings.h"
#include "dtrain/ddp.h"
#include "dtrain/errors.h"

namespace dtrain {
namespace {

std::string bucket_what(const GradBucket& b) {
  return cat("allreduce of gradient bucket ", b.index, " (", b.parameter_names.size(),
             " parameters: ", join(b.parameter_names.size() > 4
                                       ? std::vector<std::string>(b.parameter_names.begin(),
                                                                  b.parameter_names.begin() + 4)
                                       : b.parameter_names,
                                   ", "),
             b.parameter_names.size() > 4 ? ", ..." : "", ")");
}

// Allreduce of `wire` (the bucket itself, or a compressed copy); `finish`
// writes a compressed result back into the bucket.
class WorkReduction : public PendingReduction {
 public:
  WorkReduction(const ProcessGroup& pg, GradBucket& bucket, at::Tensor wire)
      : pg_(pg), bucket_(bucket), wire_(std::move(wire)) {
    std::vector<at::Tensor> t{wire_};
    try {
      work_ = pg_.backend()->allreduce(t);
    } catch (const std::exception& e) {
      rethrow_dist_error(e, pg_.rank(), bucket_what(bucket_), pg_.timeout());
    }
    // Stamp the completion time from the backend's thread, for statistics.
    try {
      auto stamp = done_;
      work_->getFuture()->addCallback([stamp](c10::ivalue::Future&) {
        stamp->store(std::chrono::steady_clock::now().time_since_epoch().count());
      });
    } catch (const std::exception&) {
      // Backend without futures: the reducer falls back to wait()'s return.
    }
  }
  std::optional<std::chrono::steady_clock::time_point> completed_at() const override {
    int64_t ticks = done_->load();
    if (ticks == 0) return std::nullopt;
    return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(ticks));
  }
  void wait() override {
    try {
      work_->wait();
    } catch (const std::exception& e) {
      rethrow_dist_error(e, pg_.rank(), bucket_what(bucket_), pg_.timeout());
    }
    if (!wire_.is_same(bucket_.buffer)) bucket_.buffer.copy_(wire_);
  }

 private:
  const ProcessGroup& pg_;
  GradBucket& bucket_;
  at::Tensor wire_;
  c10::intrusive_ptr<c10d::Work> work_;
  std::shared_ptr<std::atomic<int64_t>> done_ = std::make_shared<std::atomic<int64_t>>(0);
};

// bf16 where Gloo cannot sum it (LibTorch 1.13): gather every rank's bf16
// bits and sum them locally in fp32. For two ranks this moves as many
// bytes as an allreduce would; beyond that it trades bandwidth for the format.
class GatherSumReduction : public PendingReduction {
 public:
  GatherSumReduction(const ProcessGroup& pg, GradBucket& bucket, at::Tensor wire)
      : pg_(pg), bucket_(bucket) {
    // Gloo copies half tensors bit for bit (it has no int16); same width.
    std::vector<at::Tensor> in{wire.view(at::kHalf)};
    for (int r = 0; r < pg.size(); ++r) out_[0].push_back(at::empty_like(in[0]));
    try {
      work_ = pg_.backend()->allgather(out_, in);
    } catch (const std::exception& e) {
      rethrow_dist_error(e, pg_.rank(), bucket_what(bucket_), pg_.timeout());
    }
  }
  void wait() override {
    try {
      work_->wait();
    } catch (const std::exception& e) {
      rethrow_dist_error(e, pg_.rank(), bucket_what(bucket_), pg_.timeout());
    }
    at::Tensor sum = at::zeros_like(bucket_.buffer, bucket_.buffer.options().dtype(at::kFloat));
    for (const auto& part : out_[0]) sum.add_(part.view(at::kBFloat16).to(at::kFloat));
    bucket_.buffer.copy_(sum);
  }

 private:
  const ProcessGroup& pg_;
  GradBucket& bucket_;
  std::vector<std::vector<at::Tensor>> out_{1};
  c10::intrusive_ptr<c10d::Work> work_;
};

class NoReduction : public PendingReduction {
 public:
  void wait() override {}
};

class CastHook : public CommHook {
 public:
  CastHook(std::string name, c10::optional<at::ScalarType> wire_type)
      : name_(std::move(name)), wire_type_(wire_type) {}
  std::unique_ptr<PendingReduction> start(const ProcessGroup& pg, GradBucket& bucket) override {
    if (!pg.backend()) return std::make_unique<NoReduction>();
    at::Tensor wire = wire_type_ && bucket.buffer.scalar_type() != *wire_type_
                          ? bucket.buffer.to(*wire_type_)
                          : bucket.buffer;
    if (wire.scalar_type() == at::kBFloat16 && !compat::kGlooAllreducesBFloat16 &&
        pg.backend_name() == "gloo") {
      return std::make_unique<GatherSumReduction>(pg, bucket, std::move(wire));
    }
    return std::make_unique<WorkReduction>(pg, bucket, std::move(wire));
  }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  c10::optional<at::ScalarType> wire_type_;
};

}  // namespace

std::shared_ptr<CommHook> allreduce_hook() {
  return std::make_shared<CastHook>("allreduce", c10::nullopt);
}
std::shared_ptr<CommHook> fp16_compress_hook() {
  return std::make_shared<CastHook>("fp16", at::kHalf);
}
std::shared_ptr<CommHook> bf16_compress_hook() {
  return std::make_shared<CastHook>("bf16", at::kBFloat16);
}

std::shared_ptr<CommHook> comm_hook_by_name(const std::string& name) {
  if (name == "none" || name == "allreduce") return allreduce_hook();
  if (name == "fp16") return fp16_compress_hook();
  if (name == "bf16") return bf16_compress_hook();
  throw InvalidArgument(cat("unknown comm hook '", name, "'; valid hooks: none, fp16, bf16"));
}

}  // namespace dtrain
