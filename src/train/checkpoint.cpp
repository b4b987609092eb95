// The checkpoint format: Checkpoint <-> one pickled dict in torch.save's zip
// layout, and the model/optimizer/generator state that goes into it. Files,
// checksums and directories are in checkpoint_dir.cpp.
//
// Note [Checkpoint format]
// The file is the zip torch.save writes (data.pkl plus one entry per tensor
// storage, as torch::pickle_save lays it out), so `torch.load(path)` in
// Python returns the dict with real tensors; the pickle holds only dicts,
// lists, numbers, strings and tensors, so weights_only=True accepts it too. The dict mirrors what a
// PyTorch user already has: "model" is a state_dict, "optimizer" is SGD's or AdamW's state_dict
// (state keyed by parameter index), so
//   model.load_state_dict(ckpt["model"]); sgd.load_state_dict(ckpt["optimizer"])
// works for a PyTorch model with the same parameter names and order.
// The same holds for AdamW (torch.optim.AdamW), with any number of parameter
// groups (torchvision's weight-decay groups). Not covered: the
// "differentiable"/"fused" flags of PyTorch 2.x (Python fills in its
// defaults on load), other optimizers, and CUDA generators (only the CPU
// generator's state is kept).
// The way back is limited by LibTorch's unpickler: 1.13's reads
// collections.OrderedDict as None and lacks SETITEM (Python's opcode for a
// one-entry dict), so a checkpoint re-saved by Python is refused with a
// DataError rather than misread; decode_checkpoint names a None container.

#include "dtrain/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "common/strings.h"
#include "common/torch_compat.h"
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

IValue encode_optimizer(const OptimizerState& s) {
  c10::Dict<int64_t, c10::Dict<std::string, at::Tensor>> state;
  for (size_t i = 0; i < s.state.size(); ++i) {
    if (s.state[i].empty()) continue;
    c10::Dict<std::string, at::Tensor> one;
    for (const auto& [name, t] : s.state[i]) one.insert(name, cpu_copy(t));
    state.insert(static_cast<int64_t>(i), one);
  }
  c10::impl::GenericList groups(c10::AnyType::get());
  int64_t next = 0;
  for (const ParamGroupState& g : s.groups) {
    GenericDict group = make_dict();
    group.insert("lr", g.lr);
    if (s.type == OptimizerType::kAdamW) {
      group.insert("betas", c10::ivalue::Tuple::create(std::vector<IValue>{g.beta1, g.beta2}));
      group.insert("eps", g.eps);
      group.insert("weight_decay", g.weight_decay);
      group.insert("amsgrad", g.amsgrad);
      group.insert("maximize", false);
      group.insert("foreach", IValue());
      group.insert("capturable", false);
    } else {
      group.insert("momentum", g.momentum);
      group.insert("dampening", g.dampening);
      group.insert("weight_decay", g.weight_decay);
      group.insert("nesterov", g.nesterov);
      group.insert("maximize", false);
    }
    // A list of Any, not c10::List<int64_t>: LibTorch pickles an int list as
    // torch.jit._pickle.build_intlist(...), a global weights_only=True refuses.
    c10::impl::GenericList params(c10::AnyType::get());
    for (int64_t k = 0; k < g.size; ++k) params.push_back(IValue(next++));
    group.insert("params", params);
    groups.push_back(group);
  }
  GenericDict out = make_dict();
  out.insert("state", state);
  out.insert("param_groups", groups);
  return out;
}

ParamGroupState decode_group(const GenericDict& group, bool adamw, const std::string& where) {
  ParamGroupState g;
  g.lr = number_field(group, "lr", where);
  g.weight_decay = number_field(group, "weight_decay", where);
  if (adamw) {
    const IValue betas = field(group, "betas", where);
    if (!betas.isTuple() || betas.toTupleRef().elements().size() != 2) {
      throw DataError(cat(where, ": 'betas' is not a pair"));
    }
    auto beta = [&](size_t k) {
      const IValue& v = betas.toTupleRef().elements()[k];
      if (!v.isDouble() && !v.isInt()) throw DataError(cat(where, ": 'betas' are not numbers"));
      return v.isDouble() ? v.toDouble() : static_cast<double>(v.toInt());
    };
    g.beta1 = beta(0);
    g.beta2 = beta(1);
    g.eps = number_field(group, "eps", where);
    g.amsgrad = bool_field(group, "amsgrad", where);
  } else {
    g.momentum = number_field(group, "momentum", where);
    g.dampening = number_field(group, "dampening", where);
    g.nesterov = bool_field(group, "nesterov", where);
  }
  const IValue params = field(group, "params", where);
  if (!params.isList()) throw DataError(cat(where, ": 'params' is not a list"));
  g.size = static_cast<int64_t>(params.toListRef().size());
  return g;
}

OptimizerState decode_optimizer(const GenericDict& d, const std::string& where) {
  const IValue groups_value = field(d, "param_groups", where);
  if (!groups_value.isList() || groups_value.toListRef().empty()) {
    throw DataError(cat(where, ": 'param_groups' must be a non-empty list"));
  }
  OptimizerState s;
  int64_t total = 0;
  for (const IValue& g : groups_value.toListRef()) {
    if (!g.isGenericDict()) throw DataError(cat(where, ": a parameter group is not a dict"));
    const GenericDict group = g.toGenericDict();
    if (s.groups.empty())
      s.type = group.contains("betas") ? OptimizerType::kAdamW : OptimizerType::kSgd;
    s.groups.push_back(decode_group(group, s.type == OptimizerType::kAdamW, where));
    total += s.groups.back().size;
  }
  s.state.resize(static_cast<size_t>(total));
  for (const auto& item : dict_field(d, "state", where)) {
    const int64_t index = item.key().isInt() ? item.key().toInt() : -1;
    if (index < 0 || index >= total || !item.value().isGenericDict()) {
      throw DataError(cat(where, ": optimizer state entry ", item.key(),
                          " is not a parameter index below ", total));
    }
    for (const auto& entry : item.value().toGenericDict()) {
      if (!entry.key().isString() || entry.value().isNone()) continue;
      const std::string& name = entry.key().toStringRef();
      const IValue& v = entry.value();
      // AdamW's "step" is a tensor from PyTorch 1.12 on, a number before.
      s.state[index][name] =
          v.isTensor() ? v.toTensor()
          : (v.isInt() || v.isDouble())
              ? at::scalar_tensor(v.isInt() ? static_cast<double>(v.toInt()) : v.toDouble(),
                                  at::kFloat)
              : tensor_value(v, cat(where, ": ", name, " of parameter ", index));
    }
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
  if (!why.empty()) throw DataError(cat(origin, ": ", why, " (a model of another architecture?)"));
  copy_state(module, state);
}

OptimizerState optimizer_state(const torch::optim::Optimizer& optimizer) {
  using StateMap = std::decay_t<decltype(optimizer.state())>;
  OptimizerState s;
  for (const auto& group : optimizer.param_groups()) {
    ParamGroupState g;
    g.size = static_cast<int64_t>(group.params().size());
    if (const auto* o = dynamic_cast<const torch::optim::SGDOptions*>(&group.options())) {
      s.type = OptimizerType::kSgd;
      g.lr = o->lr();
      g.weight_decay = o->weight_decay();
      g.momentum = o->momentum();
      g.dampening = o->dampening();
      g.nesterov = o->nesterov();
    } else if (const auto* a = dynamic_cast<const torch::optim::AdamWOptions*>(&group.options())) {
      s.type = OptimizerType::kAdamW;
      g.lr = a->lr();
      g.weight_decay = a->weight_decay();
      g.beta1 = std::get<0>(a->betas());
      g.beta2 = std::get<1>(a->betas());
      g.eps = a->eps();
      g.amsgrad = a->amsgrad();
    } else {
      throw InvalidArgument("optimizer_state: checkpoints support torch::optim::SGD and AdamW");
    }
    s.groups.push_back(g);
    for (const at::Tensor& p : group.params()) {
      std::map<std::string, at::Tensor> one;
      auto it =
          optimizer.state().find(compat::optimizer_state_key<StateMap>(p.unsafeGetTensorImpl()));
      if (it != optimizer.state().end() && s.type == OptimizerType::kSgd) {
        const auto& st = static_cast<const torch::optim::SGDParamState&>(*it->second);
        if (st.momentum_buffer().defined()) one["momentum_buffer"] = cpu_copy(st.momentum_buffer());
      } else if (it != optimizer.state().end()) {
        const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
        one["step"] = at::scalar_tensor(static_cast<double>(st.step()), at::kFloat);
        one["exp_avg"] = cpu_copy(st.exp_avg());
        one["exp_avg_sq"] = cpu_copy(st.exp_avg_sq());
        if (st.max_exp_avg_sq().defined()) one["max_exp_avg_sq"] = cpu_copy(st.max_exp_avg_sq());
      }
      s.state.push_back(std::move(one));
    }
  }
  return s;
}

void load_optimizer_state(torch::optim::Optimizer& optimizer, const OptimizerState& state,
                          const std::string& origin) {
  const OptimizerState live = optimizer_state(optimizer);  // type and group sizes
  std::vector<int64_t> want, have;
  for (const auto& g : live.groups) want.push_back(g.size);
  for (const auto& g : state.groups) have.push_back(g.size);
  if (live.type != state.type) {
    throw DataError(cat(origin, ": the checkpoint holds ", to_string(state.type),
                        " state but this run's optimizer is ", to_string(live.type)));
  }
  if (want != have || state.state.size() != live.state.size()) {
    throw DataError(cat(origin, ": the checkpoint's optimizer has parameter groups of sizes ",
                        c10::IntArrayRef(have), " but this run's has ", c10::IntArrayRef(want),
                        " (another model, or another OptimizerOptions::norm_weight_decay or "
                        "OptimizerOptions::bias_weight_decay?)"));
  }
  std::vector<at::Tensor> params;
  for (const auto& group : optimizer.param_groups()) {
    params.insert(params.end(), group.params().begin(), group.params().end());
  }
  const std::vector<std::string> names =
      state.type == OptimizerType::kSgd
          ? std::vector<std::string>{"momentum_buffer"}
          : std::vector<std::string>{"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  for (size_t i = 0; i < params.size(); ++i) {
    for (const auto& [name, t] : state.state[i]) {
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        throw DataError(cat(origin, ": unexpected ", to_string(state.type), " state '", name,
                            "' for parameter ", i));
      }
      if (name != "step" && (!t.defined() || t.sizes() != params[i].sizes())) {
        throw DataError(cat(origin, ": ", name, " of parameter ", i, " is ",
                            t.defined() ? shape(t) : "undefined", " but the parameter is ",
                            shape(params[i])));
      }
    }
    if (state.type == OptimizerType::kAdamW && !state.state[i].empty() &&
        (!state.state[i].count("step") || !state.state[i].count("exp_avg") ||
         !state.state[i].count("exp_avg_sq"))) {
      throw DataError(
          cat(origin, ": adamw state of parameter ", i, " lacks step, exp_avg or exp_avg_sq"));
    }
  }
  using StateMap = std::decay_t<decltype(optimizer.state())>;
  auto& slots = optimizer.state();
  auto like = [](const at::Tensor& t, const at::Tensor& p) {
    return t.to(p.options(), /*non_blocking=*/false, /*copy=*/true);
  };
  for (size_t i = 0; i < params.size(); ++i) {
    const auto key = compat::optimizer_state_key<StateMap>(params[i].unsafeGetTensorImpl());
    const auto& one = state.state[i];
    auto find = [&](const char* name) {
      auto it = one.find(name);
      return it == one.end() ? at::Tensor() : it->second;
    };
    if (one.empty() || (state.type == OptimizerType::kSgd && !find("momentum_buffer").defined())) {
      slots.erase(key);
      continue;
    }
    if (state.type == OptimizerType::kSgd) {
      auto st = std::make_unique<torch::optim::SGDParamState>();
      st->momentum_buffer(like(find("momentum_buffer"), params[i]));
      slots[key] = std::move(st);
    } else {
      auto st = std::make_unique<torch::optim::AdamWParamState>();
      st->step(static_cast<int64_t>(std::llround(find("step").item<double>())));
      st->exp_avg(like(find("exp_avg"), params[i]));
      st->exp_avg_sq(like(find("exp_avg_sq"), params[i]));
      if (find("max_exp_avg_sq").defined()) {
        st->max_exp_avg_sq(like(find("max_exp_avg_sq"), params[i]));
      }
      slots[key] = std::move(st);
    }
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
  root.insert("optimizer", encode_optimizer(c.optimizer));
  root.insert("epoch", c.epoch);
  root.insert("step", c.step);
  root.insert("samples_in_epoch", c.samples_in_epoch);
  root.insert("world_size", static_cast<int64_t>(c.world_size));
  root.insert("batch_size", c.batch_size);
  root.insert("seed", static_cast<int64_t>(c.seed));  // Python ints are signed
  root.insert("shuffle_block", c.shuffle_block);
  if (c.rng_state.defined()) {
    root.insert("rng_state", cpu_copy(c.rng_state));
  } else {
    root.insert("rng_state", IValue());
  }
  if (c.scaler) {
    GenericDict scaler = make_dict();
    scaler.insert("scale", c.scaler->scale);
    scaler.insert("growth_factor", c.scaler->growth_factor);
    scaler.insert("backoff_factor", c.scaler->backoff_factor);
    scaler.insert("growth_interval", c.scaler->growth_interval);
    scaler.insert("_growth_tracker", c.scaler->growth_tracker);
    root.insert("scaler", scaler);
  } else {
    root.insert("scaler", IValue());
  }
  if (c.server_optimizer) {
    c10::Dict<std::string, at::Tensor> momentum;
    for (const auto& [name, t] : c.server_optimizer->momentum) momentum.insert(name, cpu_copy(t));
    c10::Dict<std::string, int64_t> updates;
    for (const auto& [name, n] : c.server_optimizer->updates) updates.insert(name, n);
    GenericDict server = make_dict();
    server.insert("momentum", momentum);
    server.insert("updates", updates);
    root.insert("server_optimizer", server);
  } else {
    root.insert("server_optimizer", IValue());
  }
  if (c.comm_hook_state) {
    c10::Dict<std::string, at::Tensor> hook;
    for (const auto& [name, t] : *c.comm_hook_state) hook.insert(name, cpu_copy(t));
    root.insert("comm_hook", hook);
  } else {
    root.insert("comm_hook", IValue());
  }
  if (c.data_fingerprint) {
    // Note [Dataset fingerprints]; the CRCs as non-negative Python ints.
    GenericDict data = make_dict();
    data.insert("samples", c.data_fingerprint->samples);
    data.insert("classes", c.data_fingerprint->classes);
    data.insert("names", static_cast<int64_t>(c.data_fingerprint->names));
    data.insert("sizes", static_cast<int64_t>(c.data_fingerprint->sizes));
    data.insert("etags", static_cast<int64_t>(c.data_fingerprint->etags));
    root.insert("data_fingerprint", data);
  } else {
    root.insert("data_fingerprint", IValue());
  }
  return encode_torch_save(root);
}

Checkpoint decode_checkpoint(const std::vector<char>& bytes, const std::string& origin) {
  // LibTorch's reader only sees files that pass dtrain's own check
  // (Note [What the torch.save check covers]).
  if (auto problem = torch_save_problem(bytes)) {
    throw DataError(cat(origin, ": not a checkpoint torch.load can read (", *problem, ")"));
  }
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
  c.optimizer = decode_optimizer(dict_field(root, "optimizer", origin), cat(origin, ": optimizer"));
  c.epoch = int_field(root, "epoch", origin);
  c.step = int_field(root, "step", origin);
  c.samples_in_epoch = int_field(root, "samples_in_epoch", origin);
  c.world_size = static_cast<int>(int_field(root, "world_size", origin));
  c.batch_size = int_field(root, "batch_size", origin);
  c.seed = static_cast<uint64_t>(int_field(root, "seed", origin));
  if (root.find("shuffle_block") != root.end()) {  // absent before shuffle blocks: 1
    c.shuffle_block = int_field(root, "shuffle_block", origin);
  }
  const IValue rng = field(root, "rng_state", origin);
  if (!rng.isNone()) c.rng_state = tensor_value(rng, cat(origin, ": rng_state"));
  auto scaler = root.find("scaler");  // absent before mixed precision
  if (scaler != root.end() && !scaler->value().isNone()) {
    const GenericDict d = dict_field(root, "scaler", origin);
    const std::string where = cat(origin, ": scaler");
    ScalerState st;
    st.scale = number_field(d, "scale", where);
    st.growth_factor = number_field(d, "growth_factor", where);
    st.backoff_factor = number_field(d, "backoff_factor", where);
    st.growth_interval = int_field(d, "growth_interval", where);
    st.growth_tracker = int_field(d, "_growth_tracker", where);
    c.scaler = st;
  }
  auto server = root.find("server_optimizer");  // absent before parameter servers
  if (server != root.end() && !server->value().isNone()) {
    const GenericDict d = dict_field(root, "server_optimizer", origin);
    const std::string where = cat(origin, ": server_optimizer");
    ServerOptimizerState st;
    for (const auto& item : dict_field(d, "momentum", where)) {
      if (!item.key().isString()) throw DataError(cat(where, ": a momentum key is not a string"));
      const std::string& name = item.key().toStringRef();
      st.momentum.emplace_back(
          name, tensor_value(item.value(), cat(where, ": momentum of '", name, "'")));
    }
    for (const auto& item : dict_field(d, "updates", where)) {
      if (!item.key().isString() || !item.value().isInt()) {
        throw DataError(cat(where, ": 'updates' is not a dict of names to integers"));
      }
      st.updates[item.key().toStringRef()] = item.value().toInt();
    }
    c.server_optimizer = std::move(st);
  }
  auto hook = root.find("comm_hook");  // absent before comm hook state
  if (hook != root.end() && !hook->value().isNone()) {
    NamedTensors st;
    for (const auto& item : dict_field(root, "comm_hook", origin)) {
      if (!item.key().isString()) throw DataError(cat(origin, ": a comm_hook key is not a string"));
      const std::string& name = item.key().toStringRef();
      st.emplace_back(name,
                      tensor_value(item.value(), cat(origin, ": comm_hook entry '", name, "'")));
    }
    c.comm_hook_state = std::move(st);
  }
  auto data = root.find("data_fingerprint");  // absent before fingerprints
  if (data != root.end() && !data->value().isNone()) {
    const GenericDict d = dict_field(root, "data_fingerprint", origin);
    const std::string where = cat(origin, ": data_fingerprint");
    auto crc = [&](const char* key) {
      const int64_t v = int_field(d, key, where);
      if (v < 0 || v > int64_t{0xffffffff}) {
        throw DataError(cat(where, ": '", key, "' is ", v, ", not a CRC-32"));
      }
      return static_cast<uint32_t>(v);
    };
    DataFingerprint f;
    f.samples = int_field(d, "samples", where);
    f.classes = int_field(d, "classes", where);
    f.names = crc("names");
    f.sizes = crc("sizes");
    f.etags = crc("etags");
    c.data_fingerprint = f;
  }
  if (c.epoch < 0 || c.step < 0 || c.samples_in_epoch < 0 || c.world_size < 1) {
    throw DataError(cat(origin, ": negative counters (epoch ", c.epoch, ", step ", c.step,
                        ", samples_in_epoch ", c.samples_in_epoch, ", world_size ", c.world_size,
                        ")"));
  }
  return c;
}

}  // namespace dtrain
