#include "dtrain/horovod.h"

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "common/strings.h"
#include "ddp/bucketing.h"
#include "dtrain/errors.h"

namespace dtrain {

DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer, ProcessGroup pg,
                                           FusionOptions options)
    : optimizer_(optimizer),
      pg_(std::move(pg)),
      options_(std::move(options)),
      hook_(options_.compression ? options_.compression : allreduce_hook()) {
  if (options_.threshold_bytes <= 0) {
    throw InvalidArgument(cat("DistributedOptimizer: fusion threshold must be positive, got ",
                              options_.threshold_bytes));
  }
}

void DistributedOptimizer::step() {
  synchronize();
  optimizer_.step();
}

void DistributedOptimizer::synchronize() {
  if (pg_.size() == 1) return;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> params;
  for (const auto& group : optimizer_.param_groups()) {
    for (const auto& p : group.params()) {
      if (p.requires_grad()) params.push_back(p);
    }
  }
  // Tensor fusion: pack gradients into as few buffers as the threshold allows
  // (same assignment rule as DDP's buckets, one limit), reduce them all
  // asynchronously, then unpack.
  std::vector<ddp::TensorInfo> infos;
  for (const auto& p : params) {
    infos.push_back({static_cast<int64_t>(p.numel() * p.element_size()),
                     cat(c10::toString(p.scalar_type()), "@", p.device().str())});
  }
  auto groups = ddp::assign_buckets(infos, {options_.threshold_bytes});
  std::vector<GradBucket> buckets(groups.size());
  std::vector<std::unique_ptr<PendingReduction>> pending;
  const double scale = 1.0 / pg_.size();
  for (size_t b = 0; b < groups.size(); ++b) {
    std::vector<at::Tensor> flat;
    for (size_t i : groups[b]) {
      at::Tensor& grad = params[i].mutable_grad();
      if (!grad.defined()) grad = at::zeros_like(params[i]);
      flat.push_back(grad.reshape({-1}));
      buckets[b].parameter_names.push_back(cat("param#", i));
    }
    buckets[b].index = static_cast<int>(b);
    buckets[b].buffer = at::cat(flat).mul_(scale);
    pending.push_back(hook_->start(pg_, buckets[b]));
  }
  for (size_t b = 0; b < groups.size(); ++b) {
    pending[b]->wait();
    int64_t offset = 0;
    for (size_t i : groups[b]) {
      at::Tensor& grad = params[i].mutable_grad();
      grad.copy_(buckets[b].buffer.narrow(0, offset, grad.numel()).view(grad.sizes()));
      offset += grad.numel();
    }
  }
}

void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, const ProcessGroup& pg,
                               int root) {
  if (pg.size() == 1) return;
  std::string bytes;
  if (pg.rank() == root) {
    torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    archive.save_to([&bytes](const void* data, size_t n) {
      bytes.append(static_cast<const char*>(data), n);
      return n;
    });
  }
  std::vector<at::Tensor> size{at::tensor({static_cast<int64_t>(bytes.size())}, at::kLong)};
  pg.broadcast(size, root);
  const int64_t n = size[0].item<int64_t>();
  std::vector<at::Tensor> payload{at::empty({n}, at::kByte)};
  if (pg.rank() == root) std::memcpy(payload[0].data_ptr<uint8_t>(), bytes.data(), n);
  pg.broadcast(payload, root);
  if (pg.rank() != root) {
    torch::serialize::InputArchive archive;
    archive.load_from(reinterpret_cast<const char*>(payload[0].data_ptr<uint8_t>()),
                      static_cast<size_t>(n));
    optimizer.load(archive);
  }
}

}  // namespace dtrain
