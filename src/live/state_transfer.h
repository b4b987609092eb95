#pragma once
// The state a joiner receives from a live member (Note [State transfer]).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dtrain/comm.h"

namespace torch {
namespace nn {
class Module;
}
namespace optim {
class Optimizer;
}
}  // namespace torch

namespace dtrain::live {

/// What a LiveGroup sends to joiners (registered by the user).
struct Registered {
  torch::nn::Module* module = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  struct Extra {
    std::string name;
    std::function<std::string()> save;
    std::function<void(const std::string&)> load;
  };
  std::vector<Extra> extras;
};

/// torch::serialize bytes of the module, the optimizer, `step` and extras.
std::string save_state(const Registered& state, int64_t step);
/// Loads what save_state wrote into the registered objects; returns the
/// step. Throws DistError naming the entry when it does not fit.
int64_t load_state(const Registered& state, const std::string& bytes);
/// `bytes` of rank `root` on every rank of `pg` (length, then a uint8
/// tensor), over the collective backend. Collective.
std::string broadcast_bytes(const ProcessGroup& pg, const std::string& bytes, int root = 0);

}  // namespace dtrain::live
