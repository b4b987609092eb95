// State_dicts in torch.save's format, both ways (dtrain/weights.h).
//
// Note [Readable state_dicts]
// torch.save writes a zip holding data.pkl (a pickle, protocol 2) and one entry per tensor
// storage; torch::pickle_load reads that layout back, as far as LibTorch's unpickler knows the
// pickle's globals. model.state_dict() is a collections.OrderedDict carrying a `_metadata`
// attribute. LibTorch 1.13's unpickler turns the OrderedDict global into None and then fails
// on the items being set into it (2.x builds a dict), so a file written by
// torch.save(model.state_dict(), PATH) cannot be read in 1.13; torch.save(dict(...)) writes a
// plain dict (EMPTY_DICT + SETITEMS), which it reads. Before PyTorch 1.6, and with
// _use_new_zipfile_serialization=False, torch.save wrote a bare pickle stream, which
// pickle_load does not read at all; torch.save(model) pickles the module's class. Rather than
// surface the unpickler's message, decode_state_dict names the form it sees and the one-line
// Python fix. Checkpoint-style dicts ({"state_dict": ...} or {"model": ...}, dtrain's own
// checkpoints included) are accepted by taking that entry, and DDP's "module." prefix is
// dropped, the two forms users most often have next to a plain state_dict.

#include "dtrain/weights.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/nn/module.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "models/torch_save_check.h"

namespace dtrain {
namespace {

using c10::IValue;

at::Tensor cpu_copy(const at::Tensor& t) {
  return t.device().is_cpu() ? t.detach().clone() : t.detach().cpu();
}

std::string shape(const at::Tensor& t) { return cat(t.sizes()); }

// The module's own tensors by name, as they live in it (no copies).
NamedTensors live_state(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& m : module.named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
    const std::string prefix = m.key().empty() ? "" : m.key() + ".";
    for (const auto& p : m.value()->named_parameters(/*recurse=*/false)) {
      out.emplace_back(prefix + p.key(), p.value());
    }
    for (const auto& b : m.value()->named_buffers(/*recurse=*/false)) {
      if (b.value().defined()) out.emplace_back(prefix + b.key(), b.value());
    }
  }
  return out;
}

// "a, b, c and 4 more"
std::string some_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 3;
  std::vector<std::string> shown;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) shown.push_back("'" + keys[i] + "'");
  std::string out = join(shown, ", ");
  if (keys.size() > kShown) out += cat(" and ", keys.size() - kShown, " more");
  return out;
}

bool contains(const std::vector<char>& bytes, const std::string& needle) {
  return std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end()) != bytes.end();
}

// The form of a file torch::pickle_load refused (Note [Readable state_dicts]), with the fix.
std::string unreadable_form(const std::vector<char>& bytes, const std::string& origin,
                            const std::string& reason) {
  const bool zip = bytes.size() >= 4 && bytes[0] == 'P' && bytes[1] == 'K';
  if (bytes.empty()) return cat(origin, ": the file is empty");
  if (!zip && !bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80) {
    return cat(origin,
               ": torch.save's legacy (non-zip) format, which LibTorch cannot read; re-save "
               "it in Python with torch.save(dict(torch.load(PATH)), PATH)");
  }
  if (!zip) {
    return cat(origin, ": not a file written by torch.save (", reason,
               "); save the weights in Python with torch.save(dict(model.state_dict()), PATH)");
  }
  if (contains(bytes, "torch.nn.modules")) {
    return cat(origin,
               ": a pickled nn.Module (torch.save(model, PATH)), which LibTorch cannot read; "
               "save the weights with torch.save(dict(model.state_dict()), PATH)");
  }
  if (contains(bytes, "collections\nOrderedDict")) {
    return cat(origin,
               ": an OrderedDict (torch.save(model.state_dict(), PATH)), which LibTorch 1.13 "
               "cannot read; re-save it in Python with torch.save(dict(model.state_dict()), "
               "PATH)");
  }
  return cat(origin, ": LibTorch cannot read this torch.save file (", reason,
             "); save a plain dict with torch.save(dict(model.state_dict()), PATH)");
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw DataError(
        cat(path, ": cannot open the weights file (", std::strerror(errno), "); check the path"));
  }
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  std::vector<char> bytes(size > 0 ? static_cast<size_t>(size) : 0);
  if (size < 0 || !in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    throw DataError(cat(path, ": cannot read the weights file"));
  }
  return bytes;
}

}  // namespace

NamedTensors state_dict(const torch::nn::Module& module) {
  NamedTensors out = live_state(module);
  for (auto& [name, t] : out) t = cpu_copy(t);
  return out;
}

std::string state_mismatch(const torch::nn::Module& module, const NamedTensors& state,
                           const std::string& source) {
  const NamedTensors live = live_state(module);
  std::map<std::string, const at::Tensor*> given;
  for (const auto& [name, t] : state) given[name] = &t;
  std::map<std::string, bool> known;
  std::vector<std::string> missing, unexpected;
  for (const auto& [name, t] : live) {
    known[name] = true;
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
    } else if (!it->second->defined() || it->second->sizes() != t.sizes()) {
      return cat("'", name, "' is ", it->second->defined() ? shape(*it->second) : "undefined",
                 " in ", source, " but ", shape(t), " in the model");
    }
  }
  for (const auto& [name, t] : state) {
    if (!known.count(name)) unexpected.push_back(name);
  }
  std::vector<std::string> parts;
  if (!missing.empty()) {
    parts.push_back(cat("the model has ", some_keys(missing), " but ", source, " does not"));
  }
  if (!unexpected.empty()) {
    parts.push_back(cat(source, " has ", some_keys(unexpected), " which the model does not"));
  }
  return join(parts, "; ");
}

void copy_state(torch::nn::Module& module, const NamedTensors& state) {
  const std::string why = state_mismatch(module, state, "the state");
  if (!why.empty()) throw InvalidArgument(cat("copy_state: ", why));
  std::map<std::string, const at::Tensor*> given;
  for (const auto& [name, t] : state) given[name] = &t;
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : live_state(module)) t.copy_(*given.at(name));
}

namespace {

// torch::pickle_save into `writer`, except that containers are not wrapped in
// torch.jit._pickle.restore_type_tag calls: Python's torch.load with weights_only=True (the
// default from PyTorch 2.6) refuses that global.
void write_torch_save(const IValue& value, caffe2::serialize::PyTorchStreamWriter& writer) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* data, size_t n) { pickle.insert(pickle.end(), data, data + n); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                     writer);
  writer.writeEndOfFile();
}

// name -> tensor, CPU tensors as they are (no copy), others copied to the CPU.
c10::Dict<std::string, at::Tensor> cpu_dict(const NamedTensors& state) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, t] : state) {
    dict.insert(name, t.device().is_cpu() ? t.detach() : t.detach().cpu());
  }
  return dict;
}

}  // namespace

std::vector<char> encode_torch_save(const IValue& value) {
  std::vector<char> out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    out.insert(out.end(), p, p + n);
    return n;
  });
  write_torch_save(value, writer);
  return out;
}

std::vector<char> encode_state_dict(const NamedTensors& state) {
  return encode_torch_save(cpu_dict(state));
}

std::optional<std::string> torch_save_problem(const std::vector<char>& bytes) {
  if (!detail::looks_like_zip(bytes.data(), bytes.size())) return "no zip archive";
  return detail::torch_save_problem(bytes.data(), bytes.size());
}

NamedTensors decode_state_dict(const std::vector<char>& bytes, const std::string& origin) {
  // LibTorch's reader only sees files that pass dtrain's own check
  // (Note [What the torch.save check covers]).
  if (!detail::looks_like_zip(bytes.data(), bytes.size())) {
    throw DataError(unreadable_form(bytes, origin, "no zip archive"));
  }
  detail::check_torch_save(bytes.data(), bytes.size(), origin);
  IValue v;
  try {
    v = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw DataError(unreadable_form(bytes, origin, first_line(e.what())));
  }
  if (!v.isGenericDict()) {
    throw DataError(cat(origin, ": holds a ", v.tagKind(),
                        ", not a state_dict; save one with torch.save(dict(model.state_dict()), "
                        "PATH)"));
  }
  c10::impl::GenericDict dict = v.toGenericDict();
  for (const char* inner : {"state_dict", "model"}) {
    auto it = dict.find(std::string(inner));
    if (it != dict.end() && it->value().isGenericDict()) {
      dict = it->value().toGenericDict();
      break;
    }
    if (it != dict.end() && it->value().isNone()) {
      throw DataError(cat(origin, ": '", inner,
                          "' is an OrderedDict, which LibTorch 1.13 cannot read; save a plain "
                          "dict (dict(model.state_dict())) under it"));
    }
  }
  NamedTensors out;
  bool all_module = !dict.empty();
  for (const auto& item : dict) {
    if (!item.key().isString() || !item.value().isTensor()) {
      throw DataError(cat(origin, ": entry ", item.key(),
                          " is not a name -> tensor pair; save a state_dict with "
                          "torch.save(dict(model.state_dict()), PATH)"));
    }
    out.emplace_back(item.key().toStringRef(), item.value().toTensor());
    all_module = all_module && out.back().first.rfind("module.", 0) == 0;
  }
  if (all_module) {
    for (auto& [name, t] : out) name.erase(0, 7);  // DistributedDataParallel's prefix
  }
  return out;
}

void load_weights(torch::nn::Module& module, const std::string& path) {
  const NamedTensors state = decode_state_dict(read_file(path), path);
  const std::string why = state_mismatch(module, state, "the file");
  if (!why.empty()) {
    throw InvalidArgument(cat(path, ": the weights do not fit the model: ", why,
                              " (weights of another model or class count?)"));
  }
  copy_state(module, state);
}

void save_weights(const torch::nn::Module& module, const std::string& path) {
  // Streamed to the file: no copy of the weights (VGG's are 550 MB) is made on the way.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      throw Error(cat(path, ": cannot create '", tmp, "' (", std::strerror(errno), ")"));
    }
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
      out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
      return out ? n : 0;
    });
    try {
      write_torch_save(cpu_dict(live_state(module)), writer);
    } catch (const c10::Error& e) {
      out.close();
      std::remove(tmp.c_str());
      throw Error(cat(path, ": cannot write '", tmp, "' (", first_line(e.what_without_backtrace()),
                      "; disk full?)"));
    }
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      throw Error(cat(path, ": cannot write '", tmp, "' (disk full?)"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw Error(cat(path, ": cannot rename '", tmp, "' to it (", std::strerror(err), ")"));
  }
}

}  // namespace dtrain
