#include "dtrain/train.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/cuda.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/models.h"

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

LoaderOptions loader_options(const TrainOptions& o, const ProcessGroup& pg, bool train) {
  LoaderOptions l;
  l.batch_size = train ? o.batch_size : o.eval_batch_size;
  l.shuffle = train;
  l.pad = train;  // evaluation sees every test sample exactly once
  l.seed = o.seed;
  l.rank = pg.rank();
  l.world_size = pg.size();
  l.threads = o.loader_threads;
  return l;
}

at::Device pick_device(const std::string& name, const ProcessGroup& pg) {
  const bool has_gpu = torch::cuda::is_available();
  if (name == "auto") {
    return has_gpu ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(
                                               pg.local_rank() % torch::cuda::device_count()))
                   : at::Device(at::kCPU);
  }
  if (name == "cpu") return at::Device(at::kCPU);
  if (name.rfind("cuda", 0) == 0) {
    if (!has_gpu) {
      throw InvalidArgument(cat("--device ", name, ": no GPU is visible to this LibTorch; use "
                                "--device cpu"));
    }
    if (name == "cuda") {
      return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(pg.local_rank() %
                                                                  torch::cuda::device_count()));
    }
    return at::Device(name);
  }
  throw InvalidArgument(cat("--device '", name, "' is not one of auto, cpu, cuda, cuda:N"));
}

// Fraction of the rank's test share classified correctly, as (correct, total).
std::pair<double, double> evaluate(ImageClassifier& model, Loader& test, at::Device device) {
  torch::NoGradGuard no_grad;
  model.eval();
  double correct = 0, total = 0;
  test.start_epoch(0);
  Batch batch;
  while (test.next(batch)) {
    at::Tensor pred = model.forward(batch.inputs.to(device, /*non_blocking=*/true)).argmax(1);
    correct += pred.eq(batch.targets.to(device)).sum().item<double>();
    total += static_cast<double>(batch.targets.size(0));
  }
  model.train();
  return {correct, total};
}

void print_stats(std::ostream& log, const DdpStats& s) {
  log << std::fixed << std::setprecision(2) << "  ddp: forward " << s.forward_seconds * 1e3
      << " ms, backward " << s.backward_compute_seconds * 1e3 << " ms, comm "
      << s.comm_seconds * 1e3 << " ms (" << std::setprecision(0) << s.overlap_fraction() * 100
      << "% overlapped with backward, exposed " << std::setprecision(2)
      << s.exposed_comm_seconds * 1e3 << " ms), hook " << s.comm_hook << ", "
      << s.bucket_bytes.size() << " buckets [";
  for (size_t i = 0; i < s.bucket_bytes.size(); ++i) {
    log << (i ? ", " : "") << std::setprecision(2) << s.bucket_bytes[i] / 1048576.0 << " MiB/"
        << s.bucket_parameters[i];
  }
  log << "]\n";
}

}  // namespace

std::string to_json(const EpochMetrics& m) {
  nlohmann::json j;
  j["epoch"] = m.epoch;
  j["train_loss"] = m.train_loss;
  j["test_acc"] = m.test_acc;
  j["images_per_sec"] = m.images_per_sec;
  j["epoch_seconds"] = m.epoch_seconds;
  j["world_size"] = m.world_size;
  return j.dump();
}

void validate(const TrainOptions& o) {
  auto positive = [](const char* flag, double v) {
    if (!(v > 0)) throw InvalidArgument(cat(flag, " must be positive, got ", v));
  };
  positive("--epochs", static_cast<double>(o.epochs));
  positive("--batch-size", static_cast<double>(o.batch_size));
  positive("--eval-batch-size", static_cast<double>(o.eval_batch_size));
  positive("--lr", o.lr);
  positive("--accumulation-steps", o.accumulation_steps);
  positive("--bucket-cap-mb", o.ddp.bucket_cap_mb);
  if (o.momentum < 0) throw InvalidArgument(cat("--momentum must be >= 0, got ", o.momentum));
  if (o.weight_decay < 0) {
    throw InvalidArgument(cat("--weight-decay must be >= 0, got ", o.weight_decay));
  }
  if (o.threads < 0) throw InvalidArgument(cat("--threads must be >= 0, got ", o.threads));
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

std::vector<EpochMetrics> train(const TrainOptions& options, const ProcessGroup& pg,
                                std::ostream* log) {
  validate(options);
  if (options.threads > 0) at::set_num_threads(options.threads);
  const bool leader = pg.rank() == 0;
  std::ofstream metrics;
  if (leader && !options.metrics_file.empty()) {
    metrics.open(options.metrics_file, std::ios::out | std::ios::trunc);
    if (!metrics) {
      throw InvalidArgument(cat("cannot write --metrics-file '", options.metrics_file,
                                "': ", std::strerror(errno)));
    }
  }

  DatasetOptions data = options.dataset;
  data.train = loader_options(options, pg, /*train=*/true);
  data.test = loader_options(options, pg, /*train=*/false);
  DatasetSplits splits = open_dataset(data);

  torch::manual_seed(options.seed);
  ModelOptions mo;
  mo.in_channels = splits.sample_shape.at(0);
  mo.image_size = splits.sample_shape.at(1);
  mo.num_classes = splits.num_classes;
  auto model = make_model(options.model, mo);
  const at::Device device = pick_device(options.device, pg);
  model->to(device);
  DistributedDataParallel<ImageClassifier> ddp(model, pg, options.ddp);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(options.lr)
                                                       .momentum(options.momentum)
                                                       .weight_decay(options.weight_decay));
  if (leader && log) {
    *log << "dtrain train: model " << options.model << ", dataset " << options.dataset.name
         << ", " << pg.size() << " rank(s) x batch " << options.batch_size << ", "
         << splits.train->batches_per_epoch() << " steps per epoch, " << at::get_num_threads()
         << " thread(s) per rank on " << device.str() << std::endl;
  }

  std::vector<EpochMetrics> history;
  for (int64_t epoch = 0; epoch < options.epochs; ++epoch) {
    const auto start = Clock::now();
    splits.train->start_epoch(epoch);
    double loss_sum = 0, samples = 0;
    int64_t step = 0;
    Batch batch;
    optimizer.zero_grad();
    while (splits.train->next(batch)) {
      const bool sync_step = (step + 1) % options.accumulation_steps == 0 ||
                             step + 1 == splits.train->batches_per_epoch();
      at::Tensor loss;
      {
        auto no_sync = sync_step ? std::optional<DataParallel::NoSync>()
                                 : std::optional<DataParallel::NoSync>(ddp.no_sync());
        at::Tensor logits = ddp.forward(batch.inputs.to(device, /*non_blocking=*/true));
        loss = torch::nn::functional::cross_entropy(logits, batch.targets.to(device));
        (options.accumulation_steps > 1 ? loss / options.accumulation_steps : loss).backward();
      }
      if (sync_step) {
        optimizer.step();
        optimizer.zero_grad();
      }
      const double n = static_cast<double>(batch.targets.size(0));
      loss_sum += loss.item<double>() * n;
      samples += n;
      ++step;
    }
    const double train_seconds = since(start);
    auto [correct, total] = evaluate(*model, *splits.test, device);
    // Ranks step in lockstep (DDP), so the sum of the ranks' rates is the
    // group's throughput.
    std::vector<double> sums = all_reduce_sum(
        pg, {loss_sum, samples, correct, total, train_seconds > 0 ? samples / train_seconds : 0});
    EpochMetrics m;
    m.epoch = epoch + 1;
    m.train_loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
    m.test_acc = sums[3] > 0 ? sums[2] / sums[3] : 0;
    m.images_per_sec = sums[4];
    m.epoch_seconds = since(start);
    m.world_size = pg.size();
    history.push_back(m);
    if (leader && log) {
      *log << std::fixed << "epoch " << m.epoch << "/" << options.epochs << "  train_loss "
           << std::setprecision(4) << m.train_loss << "  test_acc " << std::setprecision(2)
           << m.test_acc * 100 << "%  images/sec " << std::setprecision(1) << m.images_per_sec
           << "  time " << std::setprecision(1) << m.epoch_seconds << " s" << std::endl;
      if (options.verbose) print_stats(*log, ddp.stats());
    }
    if (metrics.is_open()) metrics << to_json(m) << std::endl;
  }
  return history;
}

}  // namespace dtrain
