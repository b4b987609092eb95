// Work handles and the asynchronous collectives that return them.

#include <atomic>

#include <ATen/ATen.h>

#include "comm/state.h"
#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain {

// Note [Work handles]
// A Work wraps the backend's c10d::Work together with what its error
// messages need (rank, operation) and the tensors it reads and writes, which
// it keeps alive until the last copy of the handle is gone. c10d's
// Work::wait(timeout) throws a plain "Operation timed out!" when the wait
// (not the collective) runs out of time; that is reported as a TimeoutError
// naming the wait's timeout, and the collective stays in flight. The
// completion time is stamped from the backend's thread through the work's
// future, for the DDP statistics; backends without futures leave it unset.
struct Work::State {
  c10::intrusive_ptr<c10d::Work> work;  // null: complete from the start
  int rank = 0;
  std::string what;
  std::chrono::milliseconds group_timeout{0};
  std::function<void()> interrupt;  // the group's wait_interrupt
  std::chrono::milliseconds slice{20};
  bool polled = false;  // Note [Polled waits on NCCL]
  std::vector<at::Tensor> keep_alive;
  std::shared_ptr<std::atomic<int64_t>> done = std::make_shared<std::atomic<int64_t>>(0);
};

Work make_work(std::shared_ptr<Work::State> state) { return Work(std::move(state)); }

Work::Work() : state_(std::make_shared<State>()) {}
Work::Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
Work::~Work() = default;
Work::Work(const Work&) = default;
Work& Work::operator=(const Work&) = default;

void Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_->work) return;
  wait_c10d_work(*state_->work, timeout, state_->interrupt, state_->slice, state_->rank,
                 state_->what, timeout, state_->polled);
}

void Work::wait() const { wait(state_->group_timeout); }

bool Work::is_completed() const { return !state_->work || state_->work->isCompleted(); }

std::optional<std::chrono::steady_clock::time_point> Work::completed_at() const {
  const int64_t ticks = state_->done->load();
  if (ticks == 0) return std::nullopt;
  return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(ticks));
}

namespace {

// Starts `start` on the group's backend and wraps its c10d::Work; a failure
// to start is classified as a failure of the collective.
template <typename Start>
Work start_work(const ProcessGroup& pg, const std::string& what, std::vector<at::Tensor> keep_alive,
                Start start) {
  auto state = std::make_shared<Work::State>();
  state->rank = pg.rank();
  state->what = what;
  state->group_timeout = pg.timeout();
  state->interrupt = state_of(pg).wait_interrupt;
  state->slice = state_of(pg).wait_slice;
  state->polled = polled_waits(state_of(pg).backend_name);
  state->keep_alive = std::move(keep_alive);
  try {
    state->work = start(*pg.backend());
  } catch (const std::exception& e) {
    rethrow_dist_error(e, pg.rank(), what, pg.timeout());
  }
  try {
    auto stamp = state->done;
    state->work->getFuture()->addCallback([stamp](c10::ivalue::Future&) {
      stamp->store(std::chrono::steady_clock::now().time_since_epoch().count());
    });
  } catch (const std::exception&) {
    // A backend without futures: completed_at() stays unknown.
  }
  return make_work(std::move(state));
}

}  // namespace

Work ProcessGroup::all_reduce_sum_async(at::Tensor tensor, const std::string& what) const {
  if (!state_->backend) return Work();
  return start_work(*this, what.empty() ? "all_reduce" : what, {tensor},
                    [&](compat::CollectiveBackend& b) {
                      std::vector<at::Tensor> one{tensor};
                      return b.allreduce(one);
                    });
}

Work ProcessGroup::broadcast_async(at::Tensor tensor, int root, const std::string& what) const {
  if (!state_->backend) return Work();
  return start_work(*this, what.empty() ? cat("broadcast from rank ", root) : what, {tensor},
                    [&](compat::CollectiveBackend& b) {
                      c10d::BroadcastOptions bo;
                      bo.rootRank = root;
                      std::vector<at::Tensor> one{tensor};
                      return b.broadcast(one, bo);
                    });
}

Work ProcessGroup::all_gather_async(at::Tensor tensor, std::vector<at::Tensor> out,
                                    const std::string& what) const {
  const std::string name = what.empty() ? "all_gather" : what;
  if (static_cast<int>(out.size()) != size()) {
    throw InvalidArgument(cat("rank ", rank(), ": ", name, " needs ", size(),
                              " output tensors (one per rank), got ", out.size()));
  }
  if (!state_->backend) {
    out[0].copy_(tensor);
    return Work();
  }
  std::vector<at::Tensor> keep = out;
  keep.push_back(tensor);
  return start_work(*this, name, std::move(keep), [&](compat::CollectiveBackend& b) {
    std::vector<std::vector<at::Tensor>> outs{out};
    std::vector<at::Tensor> in{tensor};
    return b.allgather(outs, in);
  });
}

}  // namespace dtrain
