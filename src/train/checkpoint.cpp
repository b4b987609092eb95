// The checkpoint format: Checkpoint <-> one pickled dict in torch.save's zip
// layout, and the model/optimizer/generator state that goes into it. Files,
// checksums and directories are in checkpoint_dir.cpp.
//
// Note [Checkpoint format]
// The file is the zip torch.save writes (data.pkl plus one entry per tensor
// storage, as torch::pickle_save lays it out), so `torch.load(path)` in
// Python returns the dict with real tensors; the pickle holds only dicts,
// lists, numbers, strings and tensors, so weights_only=True accepts it too. The dict mirrors what a
// PyTorch user already has: "model" is a state_dict, "optimizer" is SGD's state_dict (state keyed
// by parameter index, one param group), so
//   model.load_state_dict(ckpt["model"]); sgd.load_state_dict(ckpt["optimizer"])
// works for a PyTorch model with the same parameter names and order.
// Not covered: SGD's "foreach"/"differentiable"/"fused" flags (Python fills
// in its defaults on load), optimizers other than SGD, several parameter
// groups, and CUDA generators (only the CPU generator's state is kept).
// The way back is limited by LibTorch's unpickler: 1.13's reads
// collections.OrderedDict as None and lacks SETITEM (Python's opcode for a
// one-entry dict), so a checkpoint re-saved by Python is refused with a
// DataError rather than misread; decode_checkpoint names a None container.

#include "dtrain/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include <map>
#include <mutex>

#include "common/strings.h"
#include "dtrain/compat.h"
#include "dtrain/errors.h"
#include "dtrain/weights.h"

namespace dtrain {
namespace {

constexpr char kFormat[] = "dtrain-checkpoint-1";

using c10::IValue;
using GenericDict = c10::impl::GenericDict;

at::Tensor cpu_copy(const at::Tensor& t) {
  return t.device().is_cpu() ? t.detach().clone() : t.detach().cpu();
}

GenericDict make_dict() { return GenericDict(c10::StringType::get(), c10::AnyType::get()); }

std::string shape(const at::Tensor& t) { return cat(t.sizes()); }

// ---- Decoding helpers: each names the origin and the key it failed on -------------

IValue field(const GenericDict& d, const std::string& key, const std::string& where) {
  auto it = d.find(key);
  if (it == d.end()) throw DataError(cat(where, ": missing key '", key, "'"));
  return it->value();
}

GenericDict dict_field(const GenericDict& d, const std::string& key, const std::string& where) {
  const IValue v = field(d, key, where);
  if (v.isNone()) {
    // LibTorch's unpickler reads collections.OrderedDict as None.
    throw DataError(cat(where, ": '", key,
                        "' is None or an OrderedDict, which LibTorch cannot "
                        "read; save a plain dict (dict(model.state_dict()))"));
  }
  if (!v.isGenericDict()) throw DataError(cat(where, ": '", key, "' is not a dict"));
  return v.toGenericDict();
}

int64_t int_field(const GenericDict& d, const std::string& key, const std::string& where) {
  const IValue v = field(d, key, where);
  if (!v.isInt()) throw DataError(cat(where, ": '", key, "' is not an integer"));
  return v.toInt();
}

double number_field(const GenericDict& d, const std::string& key, const std::string& where) {
  const IValue v = field(d, key, where);
  if (v.isDouble()) return v.toDouble();
  if (v.isInt()) return static_cast<double>(v.toInt());
  throw DataError(cat(where, ": '", key, "' is not a number"));
}

bool bool_field(const GenericDict& d, const std::string& key, const std::string& where) {
  auto it = d.find(key);
  if (it == d.end()) return false;  // PyTorch's default for nesterov and maximize
  if (!it->value().isBool()) throw DataError(cat(where, ": '", key, "' is not a bool"));
  return it->value().toBool();
}

at::Tensor tensor_value(const IValue& v, const std::string& what) {
  if (!v.isTensor()) throw DataError(cat(what, " is not a tensor"));
  return v.toTensor();
}

IValue encode_sgd(const SgdState& s) {
  c10::Dict<int64_t, c10::Dict<std::string, at::Tensor>> state;
  c10::List<int64_t> params;
  for (size_t i = 0; i < s.momentum_buffers.size(); ++i) {
    params.push_back(static_cast<int64_t>(i));
    if (!s.momentum_buffers[i].defined()) continue;
    c10::Dict<std::string, at::Tensor> one;
    one.insert("momentum_buffer", cpu_copy(s.momentum_buffers[i]));
    state.insert(static_cast<int64_t>(i), one);
  }
  GenericDict group = make_dict();
  group.insert("lr", s.lr);
  group.insert("momentum", s.momentum);
  group.insert("dampening", s.dampening);
  group.insert("weight_decay", s.weight_decay);
  group.insert("nesterov", s.nesterov);
  group.insert("maximize", false);
  group.insert("params", params);
  c10::impl::GenericList groups(c10::AnyType::get());
  groups.push_back(group);
  GenericDict out = make_dict();
  out.insert("state", state);
  out.insert("param_groups", groups);
  return out;
}

SgdState decode_sgd(const GenericDict& d, const std::string& where) {
  const IValue groups_value = field(d, "param_groups", where);
  if (!groups_value.isList() || groups_value.toListRef().size() != 1 ||
      !groups_value.toListRef()[0].isGenericDict()) {
    throw DataError(cat(where,
                        ": 'param_groups' must be a list of one dict (dtrain trains "
                        "with one SGD parameter group)"));
  }
  const GenericDict group = groups_value.toListRef()[0].toGenericDict();
  SgdState s;
  s.lr = number_field(group, "lr", where);
  s.momentum = number_field(group, "momentum", where);
  s.dampening = number_field(group, "dampening", where);
  s.weight_decay = number_field(group, "weight_decay", where);
  s.nesterov = bool_field(group, "nesterov", where);
  const IValue params = field(group, "params", where);
  if (!params.isList()) throw DataError(cat(where, ": 'params' is not a list"));
  s.momentum_buffers.resize(params.toListRef().size());
  for (const auto& item : dict_field(d, "state", where)) {
    const int64_t index = item.key().isInt() ? item.key().toInt() : -1;
    if (index < 0 || index >= static_cast<int64_t>(s.momentum_buffers.size()) ||
        !item.value().isGenericDict()) {
      throw DataError(cat(where, ": optimizer state entry ", item.key(),
                          " is not a parameter index below ", s.momentum_buffers.size()));
    }
    const GenericDict one = item.value().toGenericDict();
    auto buf = one.find("momentum_buffer");
    if (buf == one.end() || buf->value().isNone()) continue;
    s.momentum_buffers[index] =
        tensor_value(buf->value(), cat(where, ": momentum_buffer of parameter ", index));
  }
  return s;
}

}  // namespace

// ---- State of models, optimizers and generators -------------------------------

NamedTensors model_state(const torch::nn::Module& module) { return state_dict(module); }

void load_model_state(torch::nn::Module& module, const NamedTensors& state,
                      const std::string& origin) {
  // Checked before anything changes, so a mismatch leaves the module as it was.
  const std::string why = state_mismatch(module, state, "the checkpoint");
  if (!why.empty()) throw DataError(cat(origin, ": ", why, " (a different --model?)"));
  copy_state(module, state);
}

SgdState sgd_state(const torch::optim::SGD& optimizer) {
  if (optimizer.param_groups().size() != 1) {
    throw InvalidArgument(cat("sgd_state: the optimizer has ", optimizer.param_groups().size(),
                              " parameter groups; checkpoints support one"));
  }
  const auto& group = optimizer.param_groups()[0];
  const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
  SgdState s;
  s.lr = o.lr();
  s.momentum = o.momentum();
  s.dampening = o.dampening();
  s.weight_decay = o.weight_decay();
  s.nesterov = o.nesterov();
  using StateMap = std::decay_t<decltype(optimizer.state())>;
  for (const at::Tensor& p : group.params()) {
    auto it =
        optimizer.state().find(compat::optimizer_state_key<StateMap>(p.unsafeGetTensorImpl()));
    at::Tensor buf;
    if (it != optimizer.state().end()) {
      const auto& st = static_cast<const torch::optim::SGDParamState&>(*it->second);
      if (st.momentum_buffer().defined()) buf = cpu_copy(st.momentum_buffer());
    }
    s.momentum_buffers.push_back(buf);
  }
  return s;
}

void load_sgd_state(torch::optim::SGD& optimizer, const SgdState& state,
                    const std::string& origin) {
  if (optimizer.param_groups().size() != 1) {
    throw InvalidArgument(cat("load_sgd_state: the optimizer has ", optimizer.param_groups().size(),
                              " parameter groups; checkpoints support one"));
  }
  const std::vector<at::Tensor>& params = optimizer.param_groups()[0].params();
  if (params.size() != state.momentum_buffers.size()) {
    throw DataError(cat(origin, ": the optimizer state is for ", state.momentum_buffers.size(),
                        " parameters but the model has ", params.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& buf = state.momentum_buffers[i];
    if (buf.defined() && buf.sizes() != params[i].sizes()) {
      throw DataError(cat(origin, ": momentum buffer of parameter ", i, " is ", shape(buf),
                          " but the parameter is ", shape(params[i])));
    }
  }
  using StateMap = std::decay_t<decltype(optimizer.state())>;
  auto& live = optimizer.state();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto key = compat::optimizer_state_key<StateMap>(params[i].unsafeGetTensorImpl());
    const at::Tensor& buf = state.momentum_buffers[i];
    if (!buf.defined()) {
      live.erase(key);
      continue;
    }
    auto st = std::make_unique<torch::optim::SGDParamState>();
    st->momentum_buffer(buf.to(params[i].options(), /*non_blocking=*/false, /*copy=*/true));
    live[key] = std::move(st);
  }
}

at::Tensor cpu_rng_state() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_cpu_rng_state(const at::Tensor& state) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  try {
    gen.set_state(state);
  } catch (const c10::Error& e) {
    throw DataError(cat("rng_state: ", first_line(e.what_without_backtrace())));
  }
}

// ---- The file format ------------------------------------------------------------

std::vector<char> encode_checkpoint(const Checkpoint& c) {
  c10::Dict<std::string, at::Tensor> model;
  for (const auto& [name, t] : c.model) model.insert(name, cpu_copy(t));
  GenericDict root = make_dict();
  root.insert("format", std::string(kFormat));
  root.insert("model", model);
  root.insert("optimizer", encode_sgd(c.optimizer));
  root.insert("epoch", c.epoch);
  root.insert("step", c.step);
  root.insert("samples_in_epoch", c.samples_in_epoch);
  root.insert("world_size", static_cast<int64_t>(c.world_size));
  root.insert("batch_size", c.batch_size);
  root.insert("seed", static_cast<int64_t>(c.seed));  // Python ints are signed
  if (c.rng_state.defined()) {
    root.insert("rng_state", cpu_copy(c.rng_state));
  } else {
    root.insert("rng_state", IValue());
  }
  return encode_torch_save(root);
}

Checkpoint decode_checkpoint(const std::vector<char>& bytes, const std::string& origin) {
  IValue v;
  try {
    v = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    throw DataError(cat(origin, ": not a checkpoint torch.load can read (",
                        first_line(e.what_without_backtrace()), ")"));
  }
  if (!v.isGenericDict()) throw DataError(cat(origin, ": not a dtrain checkpoint (no dict)"));
  const GenericDict root = v.toGenericDict();
  const IValue format = field(root, "format", origin);
  if (!format.isString() || format.toStringRef() != kFormat) {
    throw DataError(cat(origin, ": format is ", format, ", expected '", kFormat, "'"));
  }
  Checkpoint c;
  for (const auto& item : dict_field(root, "model", origin)) {
    if (!item.key().isString()) throw DataError(cat(origin, ": a model key is not a string"));
    const std::string& name = item.key().toStringRef();
    c.model.emplace_back(name,
                         tensor_value(item.value(), cat(origin, ": model entry '", name, "'")));
  }
  c.optimizer = decode_sgd(dict_field(root, "optimizer", origin), cat(origin, ": optimizer"));
  c.epoch = int_field(root, "epoch", origin);
  c.step = int_field(root, "step", origin);
  c.samples_in_epoch = int_field(root, "samples_in_epoch", origin);
  c.world_size = static_cast<int>(int_field(root, "world_size", origin));
  c.batch_size = int_field(root, "batch_size", origin);
  c.seed = static_cast<uint64_t>(int_field(root, "seed", origin));
  const IValue rng = field(root, "rng_state", origin);
  if (!rng.isNone()) c.rng_state = tensor_value(rng, cat(origin, ": rng_state"));
  if (c.epoch < 0 || c.step < 0 || c.samples_in_epoch < 0 || c.world_size < 1) {
    throw DataError(cat(origin, ": negative counters (epoch ", c.epoch, ", step ", c.step,
                        ", samples_in_epoch ", c.samples_in_epoch, ", world_size ", c.world_size,
                        ")"));
  }
  return c;
}

}  // namespace dtrain
