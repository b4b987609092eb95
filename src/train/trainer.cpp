// The training loop behind dtrain::train(), in the steps trainer.h lists.

#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <map>

#include <ATen/Parallel.h>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/object_store.h"
#include "dtrain/powersgd.h"
#include "train/steps.h"
#include "train/training_state.h"

namespace dtrain::detail {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
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
// from rank 0 then agrees with it), together with the optimizer state (the
// optimizer refers to the same parameter tensors DDP later wraps) and the
// CPU generator. The learning-rate schedule is a function of the step
// counter (Note [Closed-form schedules]), so restoring the step restores it.
// See train() in train.h for why the sampler position carries across world
// sizes.
std::optional<LoadedCheckpoint> find_checkpoint(const TrainOptions& o, std::ostream* log) {
  std::error_code ec;
  // An s3:// location is not a local directory (checkpoint_dir.cpp's Note
  // [Checkpoints in object storage]); a bad one is named by the listing.
  if (!S3Uri::is_s3_location(o.checkpoint_dir))
    std::filesystem::create_directories(o.checkpoint_dir, ec);
  if (ec) {
    throw InvalidArgument(
        cat("cannot create TrainOptions::checkpoint_dir '", o.checkpoint_dir, "': ", ec.message()));
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

Trainer::Trainer(const TrainOptions& options, const ProcessGroup& pg, std::ostream* log,
                 std::shared_ptr<KVStore> kvstore)
    : o_(options),
      pg_(pg),
      log_(pg.rank() == 0 && options.log_run ? log : nullptr),
      rank_log_(log),
      leader_(pg.rank() == 0),
      kvstore_(std::move(kvstore)),
      progress_(log_, options.progress, options.progress_every_steps,
                options.progress_every_seconds) {}

void Trainer::setup() {
  if (o_.threads > 0) at::set_num_threads(o_.threads);
  const bool checkpointing = !o_.checkpoint_dir.empty();
  // The one place the cadence defaults are resolved (train.h).
  every_steps_ = o_.checkpoint_every_steps;
  every_epochs_ =
      o_.checkpoint_every_epochs > 0 ? o_.checkpoint_every_epochs : (every_steps_ > 0 ? 0 : 1);
  if (leader_ && checkpointing) found_ = find_checkpoint(o_, log_);
  if (leader_ && !o_.metrics_file.empty()) {
    metrics_.open(o_.metrics_file,
                  found_ ? std::ios::out | std::ios::app : std::ios::out | std::ios::trunc);
    if (!metrics_) {
      throw InvalidArgument(cat("cannot write TrainOptions::metrics_file '", o_.metrics_file,
                                "': ", std::strerror(errno)));
    }
  }
  origin_ = found_ ? found_->path : std::string("the checkpoint");
  obs_ = std::make_unique<TrainObservers>(o_, pg_, rank_log_);  // before any data or collective

  // Note [Two drivers, one step] (training_state.cpp): data, model, optimizer
  // and scaler are built as the live trainer builds them.
  const at::Device device = pick_device(o_.device, pg_);
  splits_ = open_dataset(dataset_options(o_, device, loader_options(o_, /*train=*/true),
                                         loader_options(o_, /*train=*/false)),
                         pg_);
  const int64_t batches = splits_.train->batches_per_epoch();
  steps_per_epoch_ = (batches + o_.accumulation_steps - 1) / o_.accumulation_steps;
  schedule_ = lr_schedule_for(o_, steps_per_epoch_, pg_.size());
  validate(schedule_);  // every rank alike, before any collective

  state_ = make_training_state(o_, splits_, device, /*scaler_group=*/pg_);
  if (checkpointing) resume_ = share_checkpoint(std::move(found_), pg_);
  // Rank 0 records it in each checkpoint; every rank resuming checks its own data.
  if (checkpointing && (leader_ || resume_)) data_fingerprint_ = splits_.train->fingerprint();
}

// Note [Refusing changed data]
// The checkpoint's cursor is a position in the permutation of the training
// split's sample indices (Note [Sample cursor]); against a split that lists
// other samples, or the same ones in another order, it would skip or repeat
// samples without a word. So a checkpoint that records the split's
// fingerprint (Note [Dataset fingerprints]) resumes only against data that
// matches it. Every rank checks its own data (each may have its own copy),
// before any collective of the run. Checkpoints without a fingerprint
// (written before it existed) resume unchecked.
void Trainer::check_data() const {
  if (!resume_->data_fingerprint || !data_fingerprint_.known()) return;
  const DataFingerprint& saved = *resume_->data_fingerprint;
  if (saved.matches(data_fingerprint_)) return;
  const std::string& dir = o_.dataset.data_dir;
  throw DataError(cat("rank ", pg_.rank(), ": ", origin_, " was saved training on ", saved.samples,
                      " samples (", saved.str(), ") but dataset '", o_.dataset.name, "'",
                      dir.empty() ? std::string() : cat(" at '", dir, "'"), " now has ",
                      data_fingerprint_.samples, " (", data_fingerprint_.str(),
                      "): ", describe_change(saved, data_fingerprint_),
                      "; resume against the same data, or start a new run in a fresh "
                      "checkpoint directory (TrainOptions::checkpoint_dir)"));
}

void Trainer::resume() {
  if (!resume_) return;
  check_data();
  load_model_state(*state_.model, resume_->model, origin_);
  if (o_.channels_last) to_channels_last(*state_.model);
  load_optimizer_state(*state_.optimizer, resume_->optimizer, origin_);
  if (resume_->rng_state.defined()) set_cpu_rng_state(resume_->rng_state);
  if (resume_->scaler && state_.scaler->is_enabled()) {
    c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
    d.insert("scale", resume_->scaler->scale);
    d.insert("growth_factor", resume_->scaler->growth_factor);
    d.insert("backoff_factor", resume_->scaler->backoff_factor);
    d.insert("growth_interval", resume_->scaler->growth_interval);
    d.insert("_growth_tracker", resume_->scaler->growth_tracker);
    state_.scaler->load_state_dict(d);
  }
  first_epoch_ = resume_->epoch;
  global_step_ = resume_->step;
  resume_sample_ = resume_->samples_in_epoch;
}

void Trainer::wrap() {
  DdpOptions d = obs_->ddp_options(o_.ddp);
  kv_ = KvSync::open(o_, std::move(kvstore_), pg_, *state_.model, schedule_.base_lr);
  if (kv_ && resume_) kv_->restore_state(resume_->server_optimizer, origin_, leader_, log_);
  if (kv_) d.comm_hook = kv_->hook();
  check_powersgd_rank(d.comm_hook.get(), *state_.model, o_.model,
                      "PowerSGDOptions::matrix_approximation_rank");
  if (resume_ && d.comm_hook) restore_hook_state(*d.comm_hook);
  ddp_ = std::make_unique<DistributedDataParallel<ImageClassifier>>(state_.model, pg_, d);
  obs_->attach(*ddp_, *state_.scaler, *state_.model,
               resume_ ? cat("\nresumed from ", origin_, " at step ", global_step_) : "",
               global_step_);
}

void Trainer::log_start() const {
  if (!log_) return;
  *log_ << "dtrain train: model " << o_.model << ", dataset " << o_.dataset.name << ", "
        << pg_.size() << " rank(s) x batch " << o_.batch_size << ", "
        << splits_.train->batches_per_epoch() << " steps per epoch, " << at::get_num_threads()
        << " thread(s) per rank on " << state_.device.str() << std::endl;
  *log_ << "  optimizer " << to_string(o_.optimizer.type) << ", lr " << schedule_.base_lr
        << (o_.lr_scaling == LrScaling::kLinear ? " (linear scaling)" : "") << ", schedule "
        << to_string(schedule_.kind);
  if (schedule_.warmup_steps > 0) *log_ << " after " << schedule_.warmup_steps << " warm-up steps";
  *log_ << (o_.channels_last ? ", channels-last" : "")
        << (state_.amp_dtype ? ", amp " + to_string(o_.amp) : std::string()) << std::endl;
  if (kv_) *log_ << "  " << kv_->describe() << std::endl;
  if (!resume_) return;
  *log_ << "resumed from " << origin_ << " (epoch " << first_epoch_ + 1 << ", step " << global_step_
        << ")" << std::endl;
  if (resume_sample_ > 0) {
    *log_ << "  epoch " << first_epoch_ + 1 << " continues ";
    const int64_t per_step = o_.batch_size * pg_.size(), b = resume_sample_ / per_step;
    const int64_t batches = splits_.train->batches_per_epoch();
    if (resume_sample_ % per_step == 0 || b >= batches) {
      *log_ << "at batch " << std::min(b, batches) << " of " << batches;
    } else {
      *log_ << "after sample " << resume_sample_ << " of its global order";
    }
    *log_ << " (saved by " << resume_->world_size << " rank(s) x batch " << resume_->batch_size
          << " after " << resume_->samples_in_epoch << " samples)" << std::endl;
  }
  if (resume_->seed != o_.seed) {
    *log_ << "  warning: the checkpoint was written with seed " << resume_->seed
          << ", this run uses seed " << o_.seed
          << ": the rest of the epoch is a different sample order" << std::endl;
  }
}

// Note [Mixed precision step] in training_state.cpp; accumulated batches
// skip DDP's reduction (no_sync) until the step's last one.
at::Tensor Trainer::forward_backward(const Batch& batch, bool sync_step) {
  auto no_sync = sync_step ? std::optional<DataParallel::NoSync>()
                           : std::optional<DataParallel::NoSync>(ddp_->no_sync());
  return train_micro_batch(state_, *ddp_, batch, splits_.normalize, o_, obs_->timeline());
}

void Trainer::optimizer_step() {  // Note [Mixed precision step]
  TimelineSpan span(obs_->timeline(), "optimizer step");
  lr_ = lr_at(schedule_, global_step_);
  if (kv_ && kv_->updates_on_servers()) {  // Note [Where the optimizer runs]
    kv_->step();
    state_.optimizer->zero_grad();
    ++global_step_;
    return;
  }
  scaled_optimizer_step(*state_.optimizer, *state_.scaler, state_.params, lr_, o_.clip_grad_norm);
  ++global_step_;
}

// Note [Resuming mid-epoch]
// The checkpoint's samples_in_epoch is a SampleCursor's count (Note [Sample
// cursor]): positions of the epoch's global order consumed by every rank
// together. On a whole global batch of this run, skip_to() gets there (any
// loader); elsewhere -- another world size or batch size -- resume_at()
// continues at exactly that position, so nothing is re-read or skipped
// (with LoaderOptions::exact, also none of the padding).
void Trainer::resume_epoch(Loader& loader) const {
  // The count is of positions of the saving run's order; another shuffle
  // block is another order (Note [Block order]), so samples would be seen
  // twice and others never.
  if (resume_->shuffle_block != o_.dataset.train.shuffle_block) {
    throw InvalidArgument(cat("TrainOptions::dataset.train.shuffle_block ",
                              o_.dataset.train.shuffle_block, " differs from the ",
                              resume_->shuffle_block, " of ", origin_, ", saved mid-epoch after ",
                              resume_->samples_in_epoch,
                              " samples: resume with the checkpoint's block (or after an epoch's "
                              "end, when any block may change)"));
  }
  const int64_t per_step = o_.batch_size * pg_.size();
  if (resume_sample_ % per_step == 0 || resume_sample_ / per_step >= loader.batches_per_epoch()) {
    loader.skip_to(std::min(resume_sample_ / per_step, loader.batches_per_epoch()));
  } else {
    try {
      loader.resume_at(resume_sample_);
    } catch (const InvalidArgument& e) {
      // A loader that positions by batch only (synthetic data): the last whole
      // batch of this run, at most one global batch re-read, as before the cursor.
      const int64_t b = std::min(resume_sample_ / per_step, loader.batches_per_epoch());
      if (log_) *log_ << "  " << e.what() << "; continuing at batch " << b << std::endl;
      loader.skip_to(b);
    }
  }
}

Trainer::EpochTotals Trainer::run_epoch(int64_t epoch) {
  const auto start = Clock::now();
  splits_.train->start_epoch(epoch);
  if (epoch == first_epoch_ && resume_sample_ > 0) resume_epoch(*splits_.train);
  const int64_t batches = splits_.train->batches_per_epoch();
  progress_.start(epoch + 1, o_.epochs, batches, splits_.train->position());
  EpochTotals t;
  int pending = 0;  // batches accumulated since the last optimizer step
  bool save_after_epoch = false;
  Batch batch;
  state_.optimizer->zero_grad();
  obs_->epoch_start(epoch);
  obs_->wait_for_batch();
  while (splits_.train->next(batch)) {
    obs_->batch_ready();
    // position() counts this batch: it is the last when it reaches batches.
    const bool last = splits_.train->position() == batches;
    const bool sync_step = ++pending == o_.accumulation_steps || last;
    const at::Tensor loss = forward_backward(batch, sync_step);
    if (sync_step) {
      if (last) obs_->gradients(global_step_ + 1);
      optimizer_step();
      pending = 0;
      if (!o_.checkpoint_dir.empty() && every_steps_ > 0 && global_step_ % every_steps_ == 0) {
        // After the step nothing is pending, so the state is complete.
        if (last) {
          save_after_epoch = true;
        } else {
          checkpoint(epoch, splits_.train->start_sample() +
                                splits_.train->position() * o_.batch_size * pg_.size());
        }
      }
    }
    const double n = static_cast<double>(batch.targets.size(0));
    const double loss_value = loss.item<double>();
    t.loss_sum += loss_value * n;
    t.samples += n;
    progress_.update(splits_.train->position(), static_cast<int64_t>(t.samples), pg_.size(),
                     t.loss_sum / t.samples);
    obs_->batch_done(batch.targets.size(0), loss_value, sync_step, global_step_, lr_);
    if (sync_step && o_.on_step) o_.on_step(global_step_, ddp_->stats());
    if (sync_step && o_.step_observer) o_.step_observer({global_step_, epoch, loss_value, lr_});
    obs_->wait_for_batch();
  }
  progress_.finish();
  t.seconds = since(start);
  t.save_after_evaluation = save_after_epoch;
  return t;
}

EpochMetrics Trainer::evaluate(int64_t epoch, const EpochTotals& t) {
  TimelineSpan span(obs_->timeline(), "evaluate");
  const double train_seconds = t.seconds;
  const ClassificationCounts c = evaluate_epoch(state_, o_, splits_);
  // Ranks step in lockstep (DDP), so the sum of the ranks' rates is the
  // group's throughput.
  std::vector<double> sums =
      all_reduce_sum(pg_, {t.loss_sum, t.samples, static_cast<double>(c.top1),
                           static_cast<double>(c.top5), c.loss_sum, static_cast<double>(c.samples),
                           train_seconds > 0 ? t.samples / train_seconds : 0});
  EpochMetrics m;
  m.epoch = epoch + 1;
  m.train_loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
  ClassificationCounts all;  // every rank's: sums of integers, exact in doubles
  all.top1 = static_cast<int64_t>(sums[2]);
  all.top5 = static_cast<int64_t>(sums[3]);
  all.loss_sum = sums[4];
  all.samples = static_cast<int64_t>(sums[5]);
  fill_epoch_metrics(state_, all, &m);
  m.images_per_sec = sums[6];
  m.lr = lr_ > 0 ? lr_ : lr_at(schedule_, global_step_);
  m.world_size = pg_.size();
  return m;
}

void Trainer::report(const EpochMetrics& m) {
  if (log_) {
    *log_ << std::fixed << "epoch " << m.epoch << "/" << o_.epochs << "  train_loss "
          << std::setprecision(4) << m.train_loss << "  test_acc " << std::setprecision(2)
          << m.test_acc * 100 << "%  top5 " << m.test_top5 * 100 << "%  lr " << std::defaultfloat
          << std::setprecision(4) << m.lr << std::fixed << "  images/sec " << std::setprecision(1)
          << m.images_per_sec << "  time " << std::setprecision(1) << m.epoch_seconds << " s"
          << obs_->epoch_line_suffix() << std::endl;
    if (o_.verbose) print_stats(*log_, ddp_->stats());
    const auto* powersgd = dynamic_cast<const PowerSGDHook*>(ddp_->options().comm_hook.get());
    if (o_.verbose && powersgd) {
      const PowerSGDStats s = powersgd->stats();
      *log_ << "  powersgd: iteration " << s.iterations << ", compression rate "
            << std::setprecision(1) << s.compression_rate() << " (" << s.numel_before_compression
            << " -> " << s.numel_after_compression << " elements so far)\n";
    }
  }
  if (metrics_.is_open()) metrics_ << to_json(m) << std::endl;
}

// Note [Comm hook state]
// A comm hook may keep state per rank (PowerSGD's error feedback differs
// between ranks; its Qs are equal). At a checkpoint every rank's
// CommHook::state() goes to rank 0 by one all_gather per dtype of all its
// entries flattened (the entries are the same names and shapes on every
// rank: the ranks ran the same iterations of the same model; a layout check
// comes first) and is saved as "comm_hook" with the keys
// "rank<r>.<entry>"; on resume each rank loads its own share. A checkpoint
// from another world size (or without the entries) starts the hook's state
// afresh, with a line saying so: the run then differs from an uninterrupted
// one by the lost error feedback.
NamedTensors Trainer::gather_hook_state() const {
  NamedTensors out;
  const CommHook* hook = ddp_ ? ddp_->options().comm_hook.get() : nullptr;
  if (!hook) return out;
  const auto mine = hook->state();
  if (mine.empty()) return out;  // a stateless hook, on every rank alike
  if (pg_.size() == 1) {
    for (const auto& [key, t] : mine) out.emplace_back(cat("rank0.", key), t.cpu());
    return out;
  }
  // One all_gather per dtype of every entry flattened (entries are CPU
  // tensors of the same names and shapes on every rank), after a check that
  // the ranks agree on the layout: [entries, elements per dtype...].
  std::vector<at::ScalarType> dtypes;
  std::map<at::ScalarType, std::vector<at::Tensor>> flat;
  for (const auto& [key, t] : mine) {
    if (!flat.count(t.scalar_type())) dtypes.push_back(t.scalar_type());
    flat[t.scalar_type()].push_back(t.reshape({-1}).cpu());
  }
  std::vector<int64_t> layout{static_cast<int64_t>(mine.size())};
  std::vector<at::Tensor> joined;
  for (at::ScalarType d : dtypes) {
    joined.push_back(at::cat(flat[d]));
    layout.push_back(joined.back().numel());
  }
  const auto layouts = pg_.all_gather(at::tensor(layout, at::kLong));
  for (int r = 0; r < pg_.size(); ++r) {
    if (!layouts[r].equal(layouts[pg_.rank()])) {
      throw Error(cat("rank ", pg_.rank(), ": comm hook ", hook->name(), " has ", mine.size(),
                      " state entries here but rank ", r, " has another layout (",
                      layouts[r][0].item<int64_t>(), " entries); cannot checkpoint it"));
    }
  }
  std::vector<std::vector<at::Tensor>> gathered;
  for (const at::Tensor& j : joined) gathered.push_back(pg_.all_gather(j));
  if (!leader_) return out;  // only rank 0 writes (checkpoint())
  for (int r = 0; r < pg_.size(); ++r) {
    std::map<at::ScalarType, int64_t> at_offset;
    for (const auto& [key, t] : mine) {
      const size_t d = static_cast<size_t>(
          std::find(dtypes.begin(), dtypes.end(), t.scalar_type()) - dtypes.begin());
      int64_t& offset = at_offset[t.scalar_type()];
      out.emplace_back(cat("rank", r, ".", key),
                       gathered[d][r].narrow(0, offset, t.numel()).view(t.sizes()).clone());
      offset += t.numel();
    }
  }
  return out;
}

void Trainer::restore_hook_state(CommHook& hook) const {
  if (hook.state().empty() && !resume_->comm_hook_state) return;  // stateless
  const std::string prefix = cat("rank", pg_.rank(), ".");
  NamedTensors mine;
  if (resume_->comm_hook_state && resume_->world_size == pg_.size()) {
    for (const auto& [key, t] : *resume_->comm_hook_state) {
      if (key.rfind(prefix, 0) == 0) mine.emplace_back(key.substr(prefix.size()), t);
    }
  }
  if (mine.empty()) {
    if (log_) {
      *log_ << "  comm hook " << hook.name() << ": the checkpoint has no state for world size "
            << pg_.size() << "; starting its state (error feedback, warm start) afresh"
            << std::endl;
    }
    return;
  }
  try {
    hook.load_state(mine);
  } catch (const InvalidArgument& e) {
    throw DataError(cat(origin_, ": comm_hook: ", e.what()));
  }
}

// Rank 0 writes; the others only train on (they hold the same state), after
// handing their comm hook's state to rank 0.
void Trainer::checkpoint(int64_t epoch, int64_t samples_in_epoch) {
  NamedTensors hook_state = gather_hook_state();
  if (!leader_) return;
  TimelineSpan span(obs_->timeline(), "checkpoint");
  Checkpoint c;
  c.model = model_state(*state_.model);
  c.optimizer = optimizer_state(*state_.optimizer);
  c.epoch = epoch;
  c.step = global_step_;
  c.samples_in_epoch = samples_in_epoch;
  c.world_size = pg_.size();
  c.batch_size = o_.batch_size;
  c.seed = o_.seed;
  c.shuffle_block = o_.dataset.train.shuffle_block;
  c.rng_state = cpu_rng_state();
  if (state_.scaler->is_enabled()) {
    const c10::impl::GenericDict d = state_.scaler->state_dict();
    ScalerState st;
    st.scale = d.at("scale").toDouble();
    st.growth_factor = d.at("growth_factor").toDouble();
    st.backoff_factor = d.at("backoff_factor").toDouble();
    st.growth_interval = d.at("growth_interval").toInt();
    st.growth_tracker = d.at("_growth_tracker").toInt();
    c.scaler = st;
  }
  if (kv_) c.server_optimizer = kv_->save_state();  // Note [Keys and resume]
  if (!hook_state.empty()) c.comm_hook_state = std::move(hook_state);
  if (data_fingerprint_.known()) c.data_fingerprint = data_fingerprint_;
  try {
    save_checkpoint(o_.checkpoint_dir, c, o_.keep_checkpoints);
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {
    throw Error(cat("rank 0: writing the checkpoint of step ", global_step_, ": ", e.what()));
  }
}

std::vector<EpochMetrics> Trainer::run() {
  setup();
  resume();
  wrap();
  log_start();
  if (o_.step_observer) {
    o_.step_observer({global_step_, first_epoch_, std::numeric_limits<double>::quiet_NaN(),
                      lr_at(schedule_, global_step_)});
  }
  std::vector<EpochMetrics> history;
  for (int64_t epoch = first_epoch_; epoch < o_.epochs; ++epoch) {
    const auto start = Clock::now();
    const EpochTotals totals = run_epoch(epoch);
    EpochMetrics m = evaluate(epoch, totals);
    m.epoch_seconds = since(start);
    history.push_back(m);
    obs_->epoch_end(m, global_step_);
    report(m);
    const bool epoch_due = every_epochs_ > 0 && (epoch + 1) % every_epochs_ == 0;
    if (!o_.checkpoint_dir.empty() &&
        (totals.save_after_evaluation || epoch_due || epoch + 1 == o_.epochs)) {
      checkpoint(epoch + 1, 0);
    }
  }
  if (kv_) kv_->close();
  obs_->finish();
  return history;
}

}  // namespace dtrain::detail
