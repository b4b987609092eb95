#pragma once
// Model weights exchanged with Python: state_dicts in torch.save's file format.
//
//   Python -> dtrain:  torch.save(dict(model.state_dict()), "w.pt")
//                      dtrain::load_weights(*model, "w.pt");        // or --init-weights w.pt
//   dtrain -> Python:  dtrain::save_weights(*model, "w.pt");
//                      model.load_state_dict(torch.load("w.pt"), strict=True)
//
// What LibTorch 1.13 reads (Note [Readable state_dicts] in src/models/weights.cpp): a zip
// file (torch.save's default since PyTorch 1.6) holding a dict of name -> tensor, or a dict
// with such a dict under "state_dict" or "model" (a training checkpoint, dtrain's included).
// Keys that all start with "module." (a DistributedDataParallel's state_dict) lose that
// prefix. model.state_dict() itself is an OrderedDict, which 1.13's unpickler cannot build
// (2.x can): such a file is refused with one line naming the form and the fix,
// torch.save(dict(model.state_dict()), PATH); so are the legacy (non-zip) format and a
// pickled nn.Module.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace c10 {
struct IValue;
}  // namespace c10
namespace torch {
namespace nn {
class Module;
}  // namespace nn
}  // namespace torch

namespace dtrain {

/// Tensors by name, in the order they were listed (for a module: state_dict()'s order).
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// CPU copies of the module's parameters and buffers, keyed and ordered as PyTorch's
/// model.state_dict(): module by module in registration order (pre-order), each module's own
/// parameters, then its own buffers. Undefined buffers are left out.
NamedTensors state_dict(const torch::nn::Module& module);

/// Why `state` does not fit `module`, or "" when every key of the module is in `state` with
/// the same shape and `state` has no other key. Names the first mismatching key with both
/// shapes ("'fc.weight' is [10, 512] in <source> but [1000, 512] in the model"), else the
/// missing and then the unexpected keys (the first few, and how many).
std::string state_mismatch(const torch::nn::Module& module, const NamedTensors& state,
                           const std::string& source);

/// Copies `state` into the module's parameters and buffers (on their devices, in their
/// dtypes). Requires state_mismatch(module, state, ...) == "" (checked: InvalidArgument).
void copy_state(torch::nn::Module& module, const NamedTensors& state);

/// Loads a state_dict file written by Python's torch.save (forms above) or save_weights()
/// into `module`. Checks everything before changing anything. Throws DataError naming `path`
/// when the file is missing, unreadable or in a form LibTorch cannot read (with the one-line
/// Python fix), InvalidArgument naming `path` and the first mismatching key with both shapes
/// (or the missing/unexpected keys) when it does not fit the module.
void load_weights(torch::nn::Module& module, const std::string& path);

/// Writes state_dict(module) as a plain dict of name -> tensor in torch.save's zip format;
/// torchvision's model loads it with load_state_dict(torch.load(path), strict=True). Written
/// to a temporary file and renamed. Throws Error naming `path` when it cannot be written.
void save_weights(const torch::nn::Module& module, const std::string& path);

/// torch.save's zip layout for `value` (data.pkl plus one entry per storage), without
/// TorchScript's type tags, so Python's torch.load (also with weights_only=True) reads it.
/// The value may hold dicts, lists, tuples, numbers, strings, None and tensors.
std::vector<char> encode_torch_save(const c10::IValue& value);

/// What keeps LibTorch's reader from being handed `bytes`: "no zip archive", or the
/// problem dtrain's own check of a torch.save file found ("<what> at byte <offset>": the
/// zip's directory, an entry's bounds or CRC-32, the pickle's opcodes, stack and memo, a
/// tensor's storage); nullopt when the bytes may be read (Note [What the torch.save check
/// covers], src/models/torch_save_check.cpp). For readers of torch.save files of their own
/// form (checkpoints); decode_state_dict checks its input itself.
std::optional<std::string> torch_save_problem(const std::vector<char>& bytes);

/// The bytes of a state_dict file (a plain dict of name -> CPU tensor, in order).
std::vector<char> encode_state_dict(const NamedTensors& state);

/// Parses the bytes of a state_dict file (forms at the top). Throws DataError naming
/// `origin` when it is not one, naming the form and the Python fix where one exists.
NamedTensors decode_state_dict(const std::vector<char>& bytes, const std::string& origin);

}  // namespace dtrain
