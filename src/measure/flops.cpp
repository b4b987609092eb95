// forward_macs(): the multiply-accumulates of one forward pass, counted from
// the operators the forward really runs.
#include <algorithm>
#include <cstring>

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/utils.h>

#include "dtrain/bench.h"
#include "dtrain/models.h"

namespace dtrain {
namespace {

// Note [Counting MACs with RecordFunction]
// LibTorch's C++ modules have no forward hooks (Python's way to see each
// layer's input), but every ATen operator passes the dispatcher, which hands
// RecordFunction observers the operator's name and inputs (the mechanism
// torch.profiler's with_flops uses). An observer installed on this thread for
// one forward pass of a 1-image batch adds up
//   aten::convolution  N x H_out x W_out x weight.numel()  (weight [C_out,
//                      C_in/groups, kh, kw]: each output element takes
//                      C_in/groups x kh x kw MACs; transposed: the input's
//                      positions instead of the output's)
//   aten::linear       rows x weight.numel()        (weight [out, in])
//   aten::addmm, mm    n x k x m                    (torch::nn::Linear's C++
//                      forward calls addmm, or matmul, not aten::linear)
//   aten::matmul       rows x k x m
// and nothing else (bias additions, normalisation, activations, pooling and
// the squeeze-excitation's scaling are a few percent at most), which is the
// convention of torchvision's "GFLOPS" column and of fvcore: ResNet-50 at
// 224 px is 4.09 G. Only the outermost of these operators counts (a depth
// kept by the start and end callbacks), so aten::linear's own addmm or a
// convolution kernel's internal mm is not counted twice; the composite
// aten::conv2d above aten::convolution is not in the list. Observers are
// plain function pointers, so the count is reached through a thread_local
// pointer that MacCounter sets for its lifetime and clears; no other state
// is shared.
struct Count {
  int64_t macs = 0;
  int depth = 0;  // counted operators in progress on this thread
};
thread_local Count* tl_count = nullptr;

// Marks a counted operator, so that its end callback lowers the depth.
struct Counted : at::ObserverContext {};

int64_t at_or_last(const std::vector<int64_t>& v, size_t i, int64_t fallback) {
  return v.empty() ? fallback : v[std::min(i, v.size() - 1)];
}

bool tensors(c10::ArrayRef<const c10::IValue> in, size_t a, size_t b) {
  return in.size() > b && in[a].isTensor() && in[b].isTensor();
}

// The multiply-accumulates of one counted operator; -1 for any other.
int64_t op_macs(const char* name, c10::ArrayRef<const c10::IValue> in) {
  if (std::strcmp(name, "aten::convolution") == 0) {
    if (!tensors(in, 0, 1) || in.size() < 7 || !in[3].isIntList() || !in[4].isIntList() ||
        !in[5].isIntList() || !in[6].isBool()) {
      return 0;
    }
    const at::Tensor x = in[0].toTensor();
    const at::Tensor w = in[1].toTensor();
    const std::vector<int64_t> stride = in[3].toIntVector();
    const std::vector<int64_t> padding = in[4].toIntVector();
    const std::vector<int64_t> dilation = in[5].toIntVector();
    const bool transposed = in[6].toBool();
    int64_t positions = x.size(0);
    for (int64_t d = 2; d < x.dim(); ++d) {
      const size_t i = static_cast<size_t>(d - 2);
      positions *= transposed ? x.size(d)
                              : (x.size(d) + 2 * at_or_last(padding, i, 0) -
                                 at_or_last(dilation, i, 1) * (w.size(d) - 1) - 1) /
                                        at_or_last(stride, i, 1) +
                                    1;
    }
    return positions * w.numel();
  }
  if (std::strcmp(name, "aten::linear") == 0) {
    if (!tensors(in, 0, 1)) return 0;
    const at::Tensor x = in[0].toTensor();
    const at::Tensor w = in[1].toTensor();
    return w.dim() == 2 && w.size(1) > 0 ? x.numel() / w.size(1) * w.numel() : 0;
  }
  if (std::strcmp(name, "aten::addmm") == 0) {  // addmm(bias, mat1 [n, k], mat2 [k, m])
    if (!tensors(in, 1, 2)) return 0;
    const at::Tensor a = in[1].toTensor();
    const at::Tensor b = in[2].toTensor();
    return a.dim() == 2 && b.dim() == 2 ? a.size(0) * a.size(1) * b.size(1) : 0;
  }
  if (std::strcmp(name, "aten::mm") == 0 || std::strcmp(name, "aten::matmul") == 0) {
    if (!tensors(in, 0, 1)) return 0;
    const at::Tensor a = in[0].toTensor();
    const at::Tensor b = in[1].toTensor();
    if (a.dim() == 0 || b.dim() == 0) return 0;
    // a [..., k] times b [k] or [..., k, m]: every element of a meets m columns.
    return a.numel() * (b.dim() == 1 ? 1 : b.size(-1));
  }
  return -1;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (tl_count == nullptr) return nullptr;
  const int64_t macs = op_macs(fn.name(), fn.inputs());
  if (macs < 0) return nullptr;
  if (tl_count->depth++ == 0) tl_count->macs += macs;
  return std::make_unique<Counted>();
}

void on_end(const at::RecordFunction&, at::ObserverContext* ctx) {
  if (ctx != nullptr && tl_count != nullptr) --tl_count->depth;
}

// Counts the operators this thread runs while it lives.
class MacCounter {
 public:
  explicit MacCounter(Count* count) {
    tl_count = count;
    handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(on_start, on_end)
                                             .needsInputs(true)
                                             .scopes({at::RecordScope::FUNCTION}));
  }
  ~MacCounter() {
    at::removeCallback(handle_);
    tl_count = nullptr;
  }
  MacCounter(const MacCounter&) = delete;
  MacCounter& operator=(const MacCounter&) = delete;

 private:
  at::CallbackHandle handle_;
};

// Restores a module's training mode.
class ModeGuard {
 public:
  explicit ModeGuard(torch::nn::Module& m) : m_(m), training_(m.is_training()) {}
  ~ModeGuard() { m_.train(training_); }
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  torch::nn::Module& m_;
  bool training_;
};

}  // namespace

int64_t forward_macs(ImageClassifier& model, int64_t in_channels, int64_t image_size) {
  at::TensorOptions options;
  for (const at::Tensor& p : model.parameters()) {
    options = options.device(p.device()).dtype(p.scalar_type());
    break;
  }
  ModeGuard mode(model);
  model.eval();  // no BatchNorm statistics updated, no dropout
  torch::NoGradGuard no_grad;
  Count count;
  {
    MacCounter counter(&count);
    model.forward(at::zeros({1, in_channels, image_size, image_size}, options));
  }
  return count.macs;
}

}  // namespace dtrain
