// Note [State transfer]
// A joiner gets the state from the new generation's rank 0 (a member that
// has it: the leader orders those first) over the collective backend, never
// from disk: the sender writes the module (parameters and buffers), the
// optimizer (LibTorch matches its state to parameters by position, so the
// joiner's identically built optimizer takes it), the committed step counter
// and the user's extra states into one torch::serialize archive, and
// broadcasts its length and then its bytes as a uint8 tensor, to each joiner
// in a group of two (rank 0 and that joiner, formed over the generation's
// keys like the generation's own group; LiveGroup's try_form_group).
// Members that already have the state take no part: they go on to the next
// step's allreduce and wait there for rank 0 and the joiners. (A broadcast
// over the whole generation, as this was at first, also sent the state to
// the members that had it: with two nodes joined by a 1 Gbit/s link and the
// joiner on rank 0's node, ResNet-18's 90 MB of weights and momentum went
// across the link to the other node's two members, 1.8 s, where the copy to
// the joiner crosses no link at all. Point-to-point send and recv are not
// used: c10d's Gloo SendWork and RecvWork end with an error when a wait
// times out, so they cannot be waited on in slices, and live waits must be
// sliced to notice a lost member.) The RNG needs no transfer: dropout
// generators are seeded from (seed, logical rank, step) (Note [Logical
// ranks] in live_group.cpp), and the sampler position follows from the step.
#include "live/state_transfer.h"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <sstream>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::live {
namespace {

at::Tensor bytes_tensor(const std::string& s) {
  at::Tensor t = at::empty({static_cast<int64_t>(s.size())}, at::kByte);
  if (!s.empty()) std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

std::string tensor_bytes(const at::Tensor& t) {
  at::Tensor c = t.contiguous().to(at::kCPU);
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()));
}

}  // namespace

std::string save_state(const Registered& state, int64_t step) {
  torch::serialize::OutputArchive archive;
  if (state.module) {
    torch::serialize::OutputArchive sub;
    state.module->save(sub);
    archive.write("module", sub);
  }
  if (state.optimizer) {
    torch::serialize::OutputArchive sub;
    state.optimizer->save(sub);
    archive.write("optimizer", sub);
  }
  archive.write("step", at::scalar_tensor(static_cast<double>(step), at::kLong));
  for (const auto& e : state.extras) archive.write(cat("extra.", e.name), bytes_tensor(e.save()));
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

int64_t load_state(const Registered& state, const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  std::string entry = "the archive";
  try {
    archive.load_from(in);
    if (state.module) {
      entry = "module";
      torch::serialize::InputArchive sub;
      archive.read("module", sub);
      state.module->load(sub);
    }
    if (state.optimizer) {
      entry = "optimizer";
      torch::serialize::InputArchive sub;
      archive.read("optimizer", sub);
      state.optimizer->load(sub);
    }
    entry = "step";
    at::Tensor step;
    archive.read("step", step);
    for (const auto& e : state.extras) {
      entry = cat("extra state '", e.name, "'");
      at::Tensor t;
      archive.read(cat("extra.", e.name), t);
      e.load(tensor_bytes(t));
    }
    return step.item<int64_t>();
  } catch (const std::exception& e) {
    throw DistError(cat("live: loading the state received from a live member failed at ", entry,
                        ": ", first_line(e.what()),
                        " (every member must register the same module, optimizer and states)"));
  }
}

std::string broadcast_bytes(const ProcessGroup& pg, const std::string& bytes, int root) {
  std::vector<at::Tensor> size{
      at::scalar_tensor(static_cast<double>(pg.rank() == root ? bytes.size() : 0), at::kLong)
          .reshape({1})};
  pg.broadcast(size, root);
  const int64_t n = size[0].item<int64_t>();
  std::vector<at::Tensor> data{pg.rank() == root ? bytes_tensor(bytes) : at::empty({n}, at::kByte)};
  pg.broadcast(data, root);
  return tensor_bytes(data[0]);
}

}  // namespace dtrain::live
