#pragma once
// LibTorch tensors as kvstore values (dtrain/kvstore.h takes raw arrays so
// the parameter server itself stays torch-free).
//
//   at::Tensor w = torch::zeros({1000}), g = ...;
//   kv->init(0, dtrain::kv_values(w));
//   kv->pushpull(0, dtrain::kv_values(g), dtrain::kv_output(w));
//
// The tensor must be contiguous, on the CPU, float32 or float16, and must
// outlive the call (for *_async calls: the handle's wait). The views share
// the tensor's memory: no copy is made.

#include <ATen/core/Tensor.h>

#include <string>

#include "dtrain/errors.h"
#include "dtrain/kvstore.h"

namespace dtrain {
namespace detail {

inline KVDType kv_dtype(const at::Tensor& t, const char* what) {
  if (!t.defined()) throw InvalidArgument(std::string(what) + ": the tensor is undefined");
  if (!t.device().is_cpu()) {
    throw InvalidArgument(std::string(what) + ": the tensor is on " + t.device().str() +
                          "; kvstore values live on the CPU (copy with .cpu())");
  }
  if (!t.is_contiguous()) {
    throw InvalidArgument(std::string(what) +
                          ": the tensor is not contiguous (call .contiguous())");
  }
  if (t.scalar_type() == at::kFloat) return KVDType::kFloat32;
  if (t.scalar_type() == at::kHalf) return KVDType::kFloat16;
  throw InvalidArgument(std::string(what) + ": kvstore values are float32 or float16, not " +
                        std::string(c10::toString(t.scalar_type())));
}

}  // namespace detail

/// Values read from `t` (push, init).
inline ConstValues kv_values(const at::Tensor& t) {
  ConstValues v;
  v.dtype = detail::kv_dtype(t, "kv_values");
  v.data = t.data_ptr();
  v.count = static_cast<size_t>(t.numel());
  return v;
}

/// Values written into `t` (pull, pushpull, broadcast).
inline Values kv_output(const at::Tensor& t) {
  Values v;
  v.dtype = detail::kv_dtype(t, "kv_output");
  v.data = t.data_ptr();
  v.count = static_cast<size_t>(t.numel());
  return v;
}

}  // namespace dtrain
