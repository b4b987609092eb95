// dtrain::evaluate(): the test split once over all ranks (dtrain/eval.h).
//
// Note [Evaluation order]
// The evaluation loader neither shuffles nor pads, so rank r of W holds
// dataset samples r, r + W, r + 2W, ...: shares differ by at most one
// sample, and their sum is the split. Logits are gathered padded to the
// largest share (all_gather needs equal shapes) and interleaved back into
// dataset order on rank 0.

#include "dtrain/eval.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/serialize.h>

#include <exception>
#include <fstream>
#include <iomanip>

#include "common/strings.h"
#include "dtrain/checkpoint.h"
#include "dtrain/ddp.h"
#include "dtrain/errors.h"
#include "dtrain/weights.h"
#include "train/steps.h"

namespace dtrain {
namespace {

// Rank 0 loads the weights; the outcome is agreed on before the parameters
// are broadcast, so a failure never leaves the other ranks waiting.
void load_weights_collective(ImageClassifier& model, const EvalOptions& o, const ProcessGroup& pg,
                             std::ostream* log) {
  std::exception_ptr error;
  if (pg.rank() == 0) {
    try {
      if (!o.checkpoint_dir.empty()) {
        std::vector<std::string> skipped;
        auto found = load_latest_checkpoint(o.checkpoint_dir, &skipped);
        if (log) {
          for (const auto& s : skipped) *log << "skipped " << s << std::endl;
        }
        if (!found) {
          throw DataError(
              cat("no valid checkpoint in EvalOptions::checkpoint_dir ", o.checkpoint_dir));
        }
        load_model_state(model, found->checkpoint.model, found->path);
        if (log) *log << "weights from " << found->path << std::endl;
      } else {
        load_weights(model, o.init_weights);  // dtrain/weights.h: Python's state_dicts
        if (log) *log << "weights from " << o.init_weights << std::endl;
      }
    } catch (const std::exception&) {
      error = std::current_exception();
    }
  }
  std::vector<at::Tensor> failed{at::tensor({int64_t{error != nullptr}}, at::kLong)};
  pg.broadcast(failed);
  if (error) std::rethrow_exception(error);
  if (failed[0].item<int64_t>() != 0) {
    throw DataError(cat("rank ", pg.rank(), ": rank 0 could not load the weights"));
  }
  broadcast_parameters(model, pg);
}

// Note [Evaluation order]
at::Tensor gather_logits(const std::vector<at::Tensor>& mine, int64_t total, int64_t classes,
                         const ProcessGroup& pg) {
  const int64_t world = pg.size();
  const int64_t share = (total + world - 1) / world;
  at::Tensor local = mine.empty() ? at::zeros({0, classes}) : at::cat(mine);
  at::Tensor padded = at::zeros({share, classes});
  padded.narrow(0, 0, local.size(0)).copy_(local);
  std::vector<at::Tensor> all = world > 1 ? pg.all_gather(padded) : std::vector<at::Tensor>{padded};
  at::Tensor out = at::empty({total, classes});
  for (int64_t i = 0; i < total; ++i) out[i].copy_(all[i % world][i / world]);
  return out;
}

}  // namespace

void validate(const EvalOptions& o) {
  if (o.checkpoint_dir.empty() == o.init_weights.empty()) {
    throw InvalidArgument(
        "give the weights with exactly one of EvalOptions::checkpoint_dir, "
        "EvalOptions::init_weights");
  }
  if (o.batch_size < 1) {
    throw InvalidArgument(cat("EvalOptions::batch_size must be positive, got ", o.batch_size));
  }
  if (o.threads < 0) {
    throw InvalidArgument(cat("EvalOptions::threads must be >= 0, got ", o.threads));
  }
  detail::check_device(o.device, "EvalOptions::device");
  bool known = false;
  for (const auto& n : model_names()) known = known || n == o.model;
  if (!known) {
    throw InvalidArgument(
        cat("unknown model '", o.model, "'; valid models: ", join(model_names(), ", ")));
  }
  known = false;
  for (const auto& n : dataset_names()) known = known || n == o.dataset.name;
  if (!known) {
    throw InvalidArgument(cat("unknown dataset '", o.dataset.name,
                              "'; valid datasets: ", join(dataset_names(), ", ")));
  }
}

EvalResult evaluate(const EvalOptions& o, const ProcessGroup& pg, std::ostream* log) {
  validate(o);
  if (o.threads > 0) at::set_num_threads(o.threads);
  if (pg.rank() != 0) log = nullptr;
  DatasetOptions data = o.dataset;
  data.test.batch_size = o.batch_size;
  data.test.shuffle = false;
  data.test.pad = false;  // Note [Evaluation order]
  data.test.threads = o.loader_threads;
  data.train = data.test;  // not iterated
  const at::Device device = pick_device(o.device, pg);
  data.uint8_inputs = data.uint8_inputs || device.is_cuda();  // normalised on the GPU
  DatasetSplits splits = open_dataset(data, pg);
  auto model = detail::build_model(o.model, splits, device, o.channels_last);
  load_weights_collective(*model, o, pg, log);

  std::vector<at::Tensor> logits;
  const ClassificationCounts c =
      detail::evaluate_split(*model, *splits.test, device, o.channels_last,
                             o.logits_file.empty() ? nullptr : &logits, splits.normalize);
  const std::vector<double> sums =
      all_reduce_sum(pg, {static_cast<double>(c.samples), static_cast<double>(c.top1),
                          static_cast<double>(c.top5), c.loss_sum});
  EvalResult r;
  r.samples = static_cast<int64_t>(sums[0]);
  if (r.samples > 0) {
    r.top1 = sums[1] / sums[0];
    r.top5 = sums[2] / sums[0];
    r.loss = sums[3] / sums[0];
  }
  if (!o.logits_file.empty()) {
    at::Tensor all = gather_logits(logits, r.samples, splits.num_classes, pg);
    if (pg.rank() == 0) {
      const std::vector<char> bytes = torch::pickle_save(all);
      std::ofstream out(o.logits_file, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!out.flush()) {
        throw Error(cat("cannot write EvalOptions::logits_file '", o.logits_file, "'"));
      }
    }
  }
  if (log) {
    *log << std::fixed << "evaluated " << r.samples << " samples on " << pg.size()
         << " rank(s): top-1 " << std::setprecision(2) << r.top1 * 100 << "%  top-5 "
         << r.top5 * 100 << "%  loss " << std::setprecision(4) << r.loss << std::endl;
  }
  return r;
}

}  // namespace dtrain
