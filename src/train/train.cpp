#include "dtrain/train.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/cuda.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "dtrain/checkpoint.h"
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

// Note [Resume]
// Only rank 0 looks at the checkpoint directory: it picks the newest
// checkpoint that verifies (before the metrics file is opened, which is
// appended to on resume) and later broadcasts the checkpoint's bytes. So
// every rank restores exactly the same state, the choice cannot differ
// between ranks, and the other ranks need no shared filesystem. The model is
// restored before DistributedDataParallel's construction (whose broadcast
// from rank 0 then agrees with it), the momentum buffers and the CPU
// generator after the optimizer exists. See train() in train.h for why the
// sampler position carries across world sizes.
std::optional<LoadedCheckpoint> find_checkpoint(const TrainOptions& o, std::ostream* log) {
  std::error_code ec;
  std::filesystem::create_directories(o.checkpoint_dir, ec);
  if (ec) {
    throw InvalidArgument(
        cat("cannot create --checkpoint-dir '", o.checkpoint_dir, "': ", ec.message()));
  }
  std::vector<std::string> skipped;
  std::optional<LoadedCheckpoint> found = load_latest_checkpoint(o.checkpoint_dir, &skipped);
  if (log) {
    for (const std::string& s : skipped) *log << "skipped " << s << std::endl;
    if (!found) {
      *log << (skipped.empty() ? "no checkpoint in " : "no valid checkpoint in ")
           << o.checkpoint_dir << "; starting from scratch" << std::endl;
    }
  }
  return found;
}

// Collective: rank 0's checkpoint (or none) on every rank (Note [Resume]).
std::optional<Checkpoint> share_checkpoint(std::optional<LoadedCheckpoint> found,
                                           const ProcessGroup& pg) {
  const bool root = pg.rank() == 0;
  std::vector<char> bytes;
  if (root && found && pg.size() > 1) bytes = encode_checkpoint(found->checkpoint);
  std::vector<at::Tensor> header{
      at::tensor({static_cast<int64_t>(bytes.size()), int64_t{root && found}}, at::kLong)};
  pg.broadcast(header);
  const int64_t n = header[0][0].item<int64_t>();
  if (header[0][1].item<int64_t>() == 0) return std::nullopt;
  if (pg.size() > 1) {
    std::vector<at::Tensor> payload{root ? at::from_blob(bytes.data(), {n}, at::kByte)
                                         : at::empty({n}, at::kByte)};
    pg.broadcast(payload);
    if (!root) {
      const char* p = reinterpret_cast<const char*>(payload[0].data_ptr<uint8_t>());
      return decode_checkpoint(std::vector<char>(p, p + n),
                               cat("rank ", pg.rank(), ": the checkpoint rank 0 sent"));
    }
  }
  return std::move(found->checkpoint);
}

}  // namespace

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

int64_t resume_batch(int64_t samples_in_epoch, int64_t batch_size, int world_size,
                     int64_t batches_per_epoch) {
  return std::min(batches_per_epoch, samples_in_epoch / (batch_size * world_size));
}

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
  if (o.checkpoint_every_steps < 0 || o.checkpoint_every_epochs < 0) {
    throw InvalidArgument(cat("--checkpoint-every must be positive, got ",
                              std::min(o.checkpoint_every_steps, o.checkpoint_every_epochs)));
  }
  if (o.keep_checkpoints < 1) {
    throw InvalidArgument(cat("--keep-checkpoints must be >= 1, got ", o.keep_checkpoints));
  }
  if (o.checkpoint_dir.empty() &&
      (o.checkpoint_every_steps > 0 || o.checkpoint_every_epochs > 0)) {
    throw InvalidArgument("--checkpoint-every needs --checkpoint-dir");
  }
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
  const bool checkpointing = !options.checkpoint_dir.empty();
  // The one place the cadence defaults are resolved (train.h).
  const int64_t every_steps = options.checkpoint_every_steps;
  const int64_t every_epochs =
      options.checkpoint_every_epochs > 0 ? options.checkpoint_every_epochs
                                          : (every_steps > 0 ? 0 : 1);
  std::optional<LoadedCheckpoint> found;
  if (leader && checkpointing) found = find_checkpoint(options, log);
  std::ofstream metrics;
  if (leader && !options.metrics_file.empty()) {
    metrics.open(options.metrics_file, found ? std::ios::out | std::ios::app
                                             : std::ios::out | std::ios::trunc);
    if (!metrics) {
      throw InvalidArgument(cat("cannot write --metrics-file '", options.metrics_file,
                                "': ", std::strerror(errno)));
    }
  }
  const std::string origin = found ? found->path : std::string("the checkpoint");

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
  std::optional<Checkpoint> resume;
  if (checkpointing) resume = share_checkpoint(std::move(found), pg);
  if (resume) load_model_state(*model, resume->model, origin);  // Note [Resume]
  DistributedDataParallel<ImageClassifier> ddp(model, pg, options.ddp);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(options.lr)
                                                       .momentum(options.momentum)
                                                       .weight_decay(options.weight_decay));
  int64_t first_epoch = 0, global_step = 0, skip_batches = 0;
  if (resume) {
    load_sgd_state(optimizer, resume->optimizer, origin);
    if (resume->rng_state.defined()) set_cpu_rng_state(resume->rng_state);
    first_epoch = resume->epoch;
    global_step = resume->step;
    skip_batches = resume_batch(resume->samples_in_epoch, options.batch_size, pg.size(),
                                splits.train->batches_per_epoch());
  }
  if (leader && log) {
    *log << "dtrain train: model " << options.model << ", dataset " << options.dataset.name
         << ", " << pg.size() << " rank(s) x batch " << options.batch_size << ", "
         << splits.train->batches_per_epoch() << " steps per epoch, " << at::get_num_threads()
         << " thread(s) per rank on " << device.str() << std::endl;
    if (resume) {
      *log << "resumed from " << origin << " (epoch " << first_epoch + 1 << ", step "
           << global_step << ")" << std::endl;
      if (skip_batches > 0) {
        *log << "  epoch " << first_epoch + 1 << " continues at batch " << skip_batches << " of "
             << splits.train->batches_per_epoch() << " (saved by " << resume->world_size
             << " rank(s) x batch " << resume->batch_size << " after "
             << resume->samples_in_epoch << " samples)" << std::endl;
      }
      if (resume->seed != options.seed) {
        *log << "  warning: the checkpoint was written with --seed " << resume->seed
             << ", this run uses --seed " << options.seed
             << ": the rest of the epoch is a different sample order" << std::endl;
      }
    }
  }

  // Rank 0 writes; the others only train on (they hold the same state).
  auto save = [&](int64_t epoch, int64_t samples_in_epoch) {
    if (!leader) return;
    Checkpoint c;
    c.model = model_state(*model);
    c.optimizer = sgd_state(optimizer);
    c.epoch = epoch;
    c.step = global_step;
    c.samples_in_epoch = samples_in_epoch;
    c.world_size = pg.size();
    c.batch_size = options.batch_size;
    c.seed = options.seed;
    c.rng_state = cpu_rng_state();
    try {
      save_checkpoint(options.checkpoint_dir, c, options.keep_checkpoints);
    } catch (const InvalidArgument&) {
      throw;
    } catch (const Error& e) {
      throw Error(cat("rank 0: writing the checkpoint of step ", global_step, ": ", e.what()));
    }
  };

  std::vector<EpochMetrics> history;
  for (int64_t epoch = first_epoch; epoch < options.epochs; ++epoch) {
    const auto start = Clock::now();
    splits.train->start_epoch(epoch);
    if (epoch == first_epoch && skip_batches > 0) splits.train->skip_to(skip_batches);
    const int64_t batches = splits.train->batches_per_epoch();
    double loss_sum = 0, samples = 0;
    int pending = 0;  // batches accumulated since the last optimizer step
    bool save_after_epoch = false;
    Batch batch;
    optimizer.zero_grad();
    while (splits.train->next(batch)) {
      // position() counts this batch: it is the last when it reaches batches.
      const bool last = splits.train->position() == batches;
      const bool sync_step = ++pending == options.accumulation_steps || last;
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
        pending = 0;
        ++global_step;
        if (checkpointing && every_steps > 0 && global_step % every_steps == 0) {
          // After the step nothing is pending, so the state is complete.
          if (last) {
            save_after_epoch = true;
          } else {
            save(epoch, splits.train->position() * options.batch_size * pg.size());
          }
        }
      }
      const double n = static_cast<double>(batch.targets.size(0));
      loss_sum += loss.item<double>() * n;
      samples += n;
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
    const bool epoch_due = every_epochs > 0 && (epoch + 1) % every_epochs == 0;
    if (checkpointing && (save_after_epoch || epoch_due || epoch + 1 == options.epochs)) {
      save(epoch + 1, 0);
    }
  }
  return history;
}

}  // namespace dtrain
