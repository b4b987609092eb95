#include <ATen/ATen.h>

#include "comm/state.h"
#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain {
namespace {

bool contains(const std::string& text, const char* needle) {
  return text.find(needle) != std::string::npos;
}

// Note [CPU tensors on an NCCL group]
// NCCL reduces CUDA tensors only, but the library's small exchanges (DDP's
// parameter check and buffer broadcast of CPU models, checkpoint and weight
// broadcasts, metric sums, evaluation logits) use CPU tensors. On an NCCL
// group the blocking collectives therefore stage a CPU tensor through this
// rank's current GPU (pick_device made it cuda:<local rank>) and copy the
// result back, as Gloo stages CUDA tensors through the host. The *_async
// collectives (DDP's buckets) take tensors on the GPU as they are.
bool staged(const std::string& backend_name, const at::Tensor& t) {
  return backend_name == "nccl" && !t.is_cuda();
}

}  // namespace

void rethrow_dist_error(const std::exception& e, int rank, const std::string& what,
                        std::chrono::milliseconds timeout) {
  const std::string msg = first_line(e.what());
  if (contains(msg, "imed out") || contains(msg, "imeout")) {
    throw TimeoutError(cat("rank ", rank, ": ", what, " did not complete within ",
                           timeout.count() / 1000.0, " s (", msg,
                           "); another rank may have stopped, diverged or skipped this step"));
  }
  if (contains(msg, "losed") || contains(msg, "reset") || contains(msg, "refused") ||
      contains(msg, "roken pipe") || contains(msg, "EOF")) {
    throw PeerLostError(cat("rank ", rank, ": ", what, " failed because a peer went away (", msg,
                            "); see the other ranks' output for the first failure"));
  }
  throw DistError(cat("rank ", rank, ": ", what, " failed: ", msg));
}

void wait_work(const c10::intrusive_ptr<c10d::Work>& work, const ProcessGroup& pg,
               const std::string& what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    rethrow_dist_error(e, pg.rank(), what, pg.timeout());
  }
}

void ProcessGroup::all_reduce_sum(std::vector<at::Tensor>& tensors) const {
  if (!state_->backend || tensors.empty()) return;
  for (auto& t : tensors) {
    const bool stage = staged(state_->backend_name, t);
    std::vector<at::Tensor> one{stage ? t.to(at::kCUDA) : t};
    try {
      state_->backend->allreduce(one)->wait();
    } catch (const std::exception& e) {
      rethrow_dist_error(e, rank(), "all_reduce", timeout());
    }
    if (stage) t.copy_(one[0]);
  }
}

void ProcessGroup::broadcast(std::vector<at::Tensor>& tensors, int root) const {
  if (!state_->backend || tensors.empty()) return;
  c10d::BroadcastOptions bo;
  bo.rootRank = root;
  for (auto& t : tensors) {
    const bool stage = staged(state_->backend_name, t);
    std::vector<at::Tensor> one{stage ? t.to(at::kCUDA) : t};
    try {
      state_->backend->broadcast(one, bo)->wait();
    } catch (const std::exception& e) {
      rethrow_dist_error(e, rank(), cat("broadcast from rank ", root), timeout());
    }
    if (stage) t.copy_(one[0]);
  }
}

std::vector<at::Tensor> ProcessGroup::all_gather(const at::Tensor& tensor) const {
  if (!state_->backend) return {tensor.clone()};
  const bool stage = staged(state_->backend_name, tensor);
  std::vector<at::Tensor> in{stage ? tensor.to(at::kCUDA).contiguous() : tensor.contiguous()};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < size(); ++r) out[0].push_back(at::empty_like(in[0]));
  try {
    state_->backend->allgather(out, in)->wait();
  } catch (const std::exception& e) {
    rethrow_dist_error(e, rank(), "all_gather", timeout());
  }
  if (stage) {
    for (at::Tensor& t : out[0]) t = t.to(at::kCPU);
  }
  return out[0];
}

void ProcessGroup::barrier() const {
  if (!state_->backend) return;
  try {
    state_->backend->barrier()->wait();
  } catch (const std::exception& e) {
    rethrow_dist_error(e, rank(), "barrier", timeout());
  }
}

std::vector<double> all_reduce_sum(const ProcessGroup& pg, std::vector<double> values) {
  if (pg.size() == 1 || values.empty()) return values;
  std::vector<at::Tensor> t{at::tensor(values, at::kDouble)};
  pg.all_reduce_sum(t);
  const double* p = t[0].data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

double all_reduce_sum(const ProcessGroup& pg, double value) {
  return all_reduce_sum(pg, std::vector<double>{value})[0];
}

std::vector<double> all_reduce_mean(const ProcessGroup& pg, std::vector<double> values) {
  values = all_reduce_sum(pg, std::move(values));
  for (double& v : values) v /= pg.size();
  return values;
}

double all_reduce_mean(const ProcessGroup& pg, double value) {
  return all_reduce_mean(pg, std::vector<double>{value})[0];
}

}  // namespace dtrain
