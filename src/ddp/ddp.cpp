#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/nn/module.h>

#include "common/strings.h"
#include "ddp/reducer.h"
#include "dtrain/ddp.h"
#include "dtrain/errors.h"

namespace dtrain {
namespace {

std::string describe(const std::string& name, const at::Tensor& t) {
  return cat(name, " ", t.sizes(), " ", c10::toString(t.scalar_type()));
}

// Every rank's "name [shape] dtype" lines, exchanged so that all ranks can
// name the same first mismatch.
std::vector<std::string> gather_strings(const ProcessGroup& pg, const std::string& mine) {
  at::Tensor len = at::tensor({static_cast<int64_t>(mine.size())}, at::kLong);
  std::vector<at::Tensor> lens = pg.all_gather(len);
  int64_t most = 0;
  for (const auto& l : lens) most = std::max(most, l.item<int64_t>());
  at::Tensor bytes = at::zeros({most}, at::kByte);
  std::memcpy(bytes.data_ptr<uint8_t>(), mine.data(), mine.size());
  std::vector<at::Tensor> all = pg.all_gather(bytes);
  std::vector<std::string> out;
  for (size_t r = 0; r < all.size(); ++r) {
    out.emplace_back(reinterpret_cast<const char*>(all[r].data_ptr<uint8_t>()),
                     static_cast<size_t>(lens[r].item<int64_t>()));
  }
  return out;
}

void check_same_parameters(const ProcessGroup& pg, const std::vector<std::string>& lines) {
  std::vector<std::string> all = gather_strings(pg, join(lines, "\n"));
  const std::vector<std::string> ref = split(all[0], '\n');
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const std::vector<std::string> other = split(all[r], '\n');
    size_t i = 0;
    while (i < ref.size() && i < other.size() && ref[i] == other[i]) ++i;
    auto at = [](const std::vector<std::string>& v, size_t i) {
      return i < v.size() ? "'" + v[i] + "'" : std::string("no parameter");
    };
    throw DistError(cat("rank ", pg.rank(), ": DDP: ranks 0 and ", r,
                        " have different parameters; first difference at parameter #", i,
                        ": rank 0 has ", at(ref, i), ", rank ", r, " has ", at(other, i),
                        ". Every rank must build the same model"));
  }
}

// PyTorch refuses a module spread over devices in the same way: DDP
// replicates a module that lives on one device.
void check_one_device(const std::vector<std::string>& names,
                      const std::vector<at::Tensor>& params) {
  for (size_t i = 1; i < params.size(); ++i) {
    if (params[i].device() == params[0].device()) continue;
    throw InvalidArgument(cat("DDP: the module's parameters are on several devices ('", names[0],
                              "' on ", params[0].device().str(), ", '", names[i], "' on ",
                              params[i].device().str(),
                              "); DDP needs the whole module on one device: call "
                              "module->to(device) before wrapping it"));
  }
}

std::vector<at::Tensor> values_of(const torch::OrderedDict<std::string, at::Tensor>& d) {
  std::vector<at::Tensor> out;
  for (const auto& item : d) {
    if (item.value().defined()) out.push_back(item.value());
  }
  return out;
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<torch::nn::Module> module, ProcessGroup pg,
                           DdpOptions options)
    : module_(std::move(module)), pg_(std::move(pg)), options_(std::move(options)) {
  if (!module_) throw InvalidArgument("DDP: module is null");
  std::vector<std::string> names, lines;
  std::vector<at::Tensor> params;
  for (const auto& item : module_->named_parameters(/*recurse=*/true)) {
    lines.push_back(describe(item.key(), item.value()));
    if (!item.value().requires_grad()) continue;
    names.push_back(item.key());
    params.push_back(item.value());
  }
  for (const auto& item : module_->named_buffers(/*recurse=*/true)) {
    if (item.value().defined()) lines.push_back("buffer " + describe(item.key(), item.value()));
  }
  check_one_device(names, params);
  if (options_.init_sync) {
    if (pg_.size() > 1) check_same_parameters(pg_, lines);
    broadcast_parameters(*module_, pg_, 0);
  }
  reducer_ = std::make_shared<detail::Reducer>(std::move(names), std::move(params), pg_, options_);
  reducer_->install_hooks();
}

DataParallel::~DataParallel() = default;

void DataParallel::prepare_forward() {
  reducer_->prepare_forward();
  if (options_.broadcast_buffers && pg_.size() > 1) {
    broadcast_coalesced(values_of(module_->named_buffers(true)), pg_, 0);
  }
}

void DataParallel::finish_forward(const std::vector<at::Tensor>& outputs) {
  reducer_->finish_forward(outputs);
}

DataParallel::NoSync::NoSync(DataParallel* ddp) : ddp_(ddp), previous_(ddp->reducer_->sync()) {
  ddp_->reducer_->set_sync(false);
}
DataParallel::NoSync::NoSync(NoSync&& other) noexcept
    : ddp_(other.ddp_), previous_(other.previous_) {
  other.ddp_ = nullptr;
}
DataParallel::NoSync::~NoSync() {
  if (ddp_) ddp_->reducer_->set_sync(previous_);
}

DdpStats DataParallel::stats() const { return reducer_->stats(); }

std::vector<std::vector<std::string>> DataParallel::bucket_parameter_names() const {
  return reducer_->bucket_names();
}

void broadcast_parameters(torch::nn::Module& module, const ProcessGroup& pg, int root) {
  std::vector<at::Tensor> all = values_of(module.named_parameters(true));
  for (const auto& b : values_of(module.named_buffers(true))) all.push_back(b);
  broadcast_coalesced(all, pg, root);
}

// One flat buffer per dtype and device: one collective each, not one per
// tensor (a ResNet-18's 60 BatchNorm buffers are one broadcast).
void broadcast_coalesced(const std::vector<at::Tensor>& tensors, const ProcessGroup& pg, int root) {
  if (pg.size() == 1 || tensors.empty()) return;
  at::NoGradGuard no_grad;
  std::map<std::string, std::vector<at::Tensor>> groups;
  for (const auto& t : tensors) {
    groups[cat(c10::toString(t.scalar_type()), t.device().str())].push_back(t);
  }
  for (auto& [key, group] : groups) {
    std::vector<at::Tensor> flat_views;
    for (auto& t : group) flat_views.push_back(t.detach().reshape({-1}));
    std::vector<at::Tensor> flat{at::cat(flat_views)};
    pg.broadcast(flat, root);
    int64_t offset = 0;
    for (auto& t : group) {
      t.detach().copy_(flat[0].narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace dtrain
