#include <exception>
#include <stdexcept>
#include <thread>

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
  // NCCL's ncclRemoteError reads "remote process exited or there was a
  // network error" (seen on the H200 when a peer was killed).
  if (contains(msg, "losed") || contains(msg, "reset") || contains(msg, "refused") ||
      contains(msg, "roken pipe") || contains(msg, "EOF") ||
      contains(msg, "remote process exited")) {
    throw PeerLostError(cat("rank ", rank, ": ", what, " failed because a peer went away (", msg,
                            "); see the other ranks' output for the first failure"));
  }
  throw DistError(cat("rank ", rank, ": ", what, " failed: ", msg));
}

// Note [Sliced waits]
// Gloo has no abort: a collective stuck on a stopped peer can only be left
// behind. With a wait_interrupt (live recovery) a wait is cut into slices of
// wait_slice; c10d's Work::wait(timeout) may be called again after it timed
// out (the collective stays in flight), and isCompleted() tells a slice's
// timeout from the collective's end; a completed collective's outcome is
// then read with one more wait (it may have finished just after the slice
// timed out). Between slices the interrupt
// runs and may throw to give the wait up. Without an interrupt the wait is
// one call, as before. A timeout of 0 would mean "forever" to c10d: the
// group's timeout is always positive.
//
// Note [Polled waits on NCCL]
// c10d's WorkNCCL::wait(timeout) is no slice: when the timeout runs out it
// aborts the group's communicators and rethrows as a teardown (LibTorch
// 2.x), so the first 20 ms slice of any longer allreduce would end the
// group. With an interrupt an NCCL work is therefore polled: isCompleted()
// (a cudaEventQuery, which never blocks, and true also when the work
// failed) every kPollInterval, the interrupt every slice; once it is
// complete a failure is rethrown from exception(), else wait() with no
// timeout makes the current stream wait for the NCCL stream and returns at
// once. A hung collective is left on the GPU for the live group to abort
// (Note [Abandoned groups]). Without an interrupt the wait stays c10d's.
void wait_c10d_work(c10d::Work& work, std::optional<std::chrono::milliseconds> timeout,
                    const std::function<void()>& interrupt, std::chrono::milliseconds slice,
                    int rank, const std::string& what, std::chrono::milliseconds report_timeout,
                    bool polled) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  if (polled && interrupt) {
    constexpr auto kPollInterval = std::chrono::microseconds(100);
    const auto deadline = start + (timeout ? *timeout : report_timeout);
    auto next_interrupt = start + slice;
    while (!work.isCompleted()) {
      const auto now = Clock::now();
      if (now >= deadline) {
        rethrow_dist_error(std::runtime_error("Operation timed out!"), rank, what, report_timeout);
      }
      if (now >= next_interrupt) {
        interrupt();
        next_interrupt = Clock::now() + slice;
      }
      std::this_thread::sleep_for(kPollInterval);
    }
    if (auto failed = work.exception()) {
      try {
        std::rethrow_exception(failed);
      } catch (const std::exception& e) {
        rethrow_dist_error(e, rank, what, report_timeout);
      }
    }
    try {
      work.wait();
    } catch (const std::exception& e) {
      rethrow_dist_error(e, rank, what, report_timeout);
    }
    return;
  }
  for (;;) {
    std::chrono::milliseconds wait_for = slice;
    bool last = !interrupt;
    if (timeout) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*timeout - (Clock::now() - start));
      if (left < std::chrono::milliseconds(1)) left = std::chrono::milliseconds(1);
      if (last || left <= slice) {
        wait_for = left;
        last = true;
      }
    }
    try {
      if (last && !timeout) {
        work.wait();  // the backend enforces the group's timeout
      } else {
        work.wait(wait_for);
      }
      return;
    } catch (const std::exception& e) {
      if (last) rethrow_dist_error(e, rank, what, report_timeout);
      if (work.isCompleted()) {
        // The slice timed out and then the collective finished, or it had
        // failed: its own outcome decides, not the slice's "Operation timed
        // out!" (taken for a failure before, a redone live step with nobody
        // lost, found by RecoveryEvent::redo_reason in bench/recovery.sh).
        try {
          work.wait(std::chrono::milliseconds(1));
        } catch (const std::exception& failed) {
          rethrow_dist_error(failed, rank, what, report_timeout);
        }
        return;
      }
    }
    interrupt();
  }
}

void wait_work(const c10::intrusive_ptr<c10d::Work>& work, const ProcessGroup& pg,
               const std::string& what) {
  const ProcessGroup::State& st = state_of(pg);
  wait_c10d_work(*work, std::nullopt, st.wait_interrupt, st.wait_slice, pg.rank(), what,
                 pg.timeout(), polled_waits(st.backend_name));
}

namespace {

// Starts a collective with `start` (a failure to start is classified like a
// failure of the collective) and waits for it, sliced by the group's
// wait_interrupt (Note [Sliced waits]), whose exception propagates as is.
template <typename Start>
void wait_started(const ProcessGroup& pg, Start start, const std::string& what) {
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = start();
  } catch (const std::exception& e) {
    rethrow_dist_error(e, pg.rank(), what, pg.timeout());
  }
  wait_work(work, pg, what);
}

}  // namespace

void ProcessGroup::all_reduce_sum(std::vector<at::Tensor>& tensors) const {
  if (!state_->backend || tensors.empty()) return;
  for (auto& t : tensors) {
    const bool stage = staged(state_->backend_name, t);
    std::vector<at::Tensor> one{stage ? t.to(at::kCUDA) : t};
    wait_started(
        *this, [&] { return state_->backend->allreduce(one); }, "all_reduce");
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
    wait_started(
        *this, [&] { return state_->backend->broadcast(one, bo); },
        cat("broadcast from rank ", root));
    if (stage) t.copy_(one[0]);
  }
}

std::vector<at::Tensor> ProcessGroup::all_gather(const at::Tensor& tensor) const {
  if (!state_->backend) return {tensor.clone()};
  const bool stage = staged(state_->backend_name, tensor);
  std::vector<at::Tensor> in{stage ? tensor.to(at::kCUDA).contiguous() : tensor.contiguous()};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < size(); ++r) out[0].push_back(at::empty_like(in[0]));
  wait_started(
      *this, [&] { return state_->backend->allgather(out, in); }, "all_gather");
  if (stage) {
    for (at::Tensor& t : out[0]) t = t.to(at::kCPU);
  }
  return out[0];
}

void ProcessGroup::barrier() const {
  if (!state_->backend) return;
  wait_started(
      *this, [&] { return state_->backend->barrier(); }, "barrier");
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
