// train_live(): dtrain train under live recovery (dtrain/live.h).
//
// Note [Live training]
// The job has W0 logical ranks (WORLD_SIZE at start). Logical rank r reads
// what rank r of a W0-rank job reads: DistributedSampler rank r of W0, so its
// loader (opened with that share) yields the same micro-batch at the same
// step whichever member runs it. A step is (epoch, batch) =
// (step / steps_per_epoch, step % steps_per_epoch); the LiveGroup's committed
// step counter is the only position, so a redone step re-reads the same
// batches (a loader not at the step's batch is moved there with skip_to) and
// no sample is seen twice or skipped. Per step:
//
//   begin_step()    the generation; this member's logical ranks
//   run_logical()   forward (autocast) and backward (scaled) per logical
//                   rank, DDP's reduction in the last one (comm hooks as
//                   configured; gradients divided by W0 by the library)
//   should_commit() every member finished: the optimizer step (unscale,
//                   clip, GradScaler::step/update: the gradients are
//                   identical on every member after the reduction, so every
//                   member skips an overflowed step alike without a
//                   collective of its own), else nothing and the step is redone
//
// Joiners receive model and optimizer (registered with the LiveGroup) and
// "trainer": the loss scaler's state and the CPU generator. The schedule is a
// function of the step (Note [Closed-form schedules]).
//
// What differs from train(): accumulation_steps must be 1 (a logical rank's
// micro-batch is one batch); no checkpoints are read or written (the state
// lives in the members; a job that falls below the minimum ends); evaluation
// runs the whole test split on every member without collectives (the models
// are identical), and train_loss is this member's mean over the micro-batches
// it ran; no per-bucket timeline spans (each generation has its own reducer).
// Every member ends with a line naming its member id and the sum of its
// parameters, so the replacement's weights can be compared with the others'.

#include "train/live_trainer.h"

#include <chrono>
#include <cstdlib>
#include <sstream>

#include <ATen/Parallel.h>
#include <torch/serialize.h>
#include <torch/utils.h>

#include "common/strings.h"
#include "dtrain/checkpoint.h"
#include "dtrain/errors.h"
#include "dtrain/optim.h"
#include "train/steps.h"

namespace dtrain::detail {
namespace {

using Clock = std::chrono::steady_clock;

LoaderOptions share(const TrainOptions& o, bool train, int rank, int world) {
  LoaderOptions l;
  l.batch_size = train ? o.batch_size : o.eval_batch_size;
  l.shuffle = train;
  l.pad = train;
  l.seed = o.seed;
  l.threads = o.loader_threads;
  l.rank = rank;
  l.world_size = world;
  return l;
}

int local_rank_from_env() {
  const char* v = std::getenv("LOCAL_RANK");
  long long r = 0;
  return v != nullptr && parse_int(v, &r) ? static_cast<int>(r) : 0;
}

}  // namespace

LiveTrainer::LiveTrainer(const TrainOptions& options, LiveOptions live, std::ostream* log)
    : o_(options), live_options_(std::move(live)), log_(log) {}

LiveTrainer::~LiveTrainer() = default;

void LiveTrainer::setup() {
  validate(o_);  // names the conflict with --kvstore among others
  if (o_.accumulation_steps != 1) {
    throw InvalidArgument(
        cat("TrainOptions::accumulation_steps ", o_.accumulation_steps,
            " under live recovery: a logical rank's micro-batch is one batch; use 1"));
  }
  if (o_.threads > 0) at::set_num_threads(o_.threads);
  device_ = pick_device(o_.device, local_rank_from_env());
  auto user_event = live_options_.on_event;
  live_options_.on_event = [this, user_event](const RecoveryEvent& e) {
    pending_events_.push_back(e);
    if (user_event) user_event(e);
  };
  live_options_.seed = o_.seed;
  live_ = std::make_unique<LiveGroup>(live_options_);
  const int w0 = live_->options().logical_world_size > 0 ? live_->options().logical_world_size
                                                         : live_->options().initial_world_size;
  data_.resize(static_cast<size_t>(w0));
  at_.assign(static_cast<size_t>(w0), {-1, -1});

  DatasetOptions d = o_.dataset;
  d.uint8_inputs = d.uint8_inputs || device_.is_cuda();
  d.device = device_;
  d.train = share(o_, true, 0, w0);
  d.test = share(o_, false, 0, 1);  // the whole test split (Note [Live training])
  shapes_ = open_dataset(d);
  steps_per_epoch_ = shapes_.train->batches_per_epoch();
  schedule_ = lr_schedule_for(o_, steps_per_epoch_, w0);
  validate(schedule_);

  torch::manual_seed(o_.seed);
  model_ = build_model(o_.model, shapes_, device_, o_.channels_last, o_.init_weights);
  optimizer_ = make_optimizer(*model_, o_.optimizer);
  for (const auto& group : optimizer_->param_groups()) {
    params_.insert(params_.end(), group.params().begin(), group.params().end());
  }
  GradScalerOptions so;
  so.enabled = false;
  if (o_.amp != AmpMode::kNone) {
    amp_dtype_ = amp_dtype(o_.amp);
    check_autocast(device_.type(), *amp_dtype_);
    so.enabled = needs_grad_scaler(*amp_dtype_);
  }
  scaler_ = std::make_unique<GradScaler>(so);

  live_->register_module(*model_);
  live_->register_optimizer(*optimizer_);
  live_->register_state(
      "trainer", [this] { return save_position(); },
      [this](const std::string& bytes) { load_position(bytes); });
  live_->wrap_ddp(*model_, o_.ddp);
}

// The scaler's state and the CPU generator, for a joiner.
std::string LiveTrainer::save_position() const {
  std::ostringstream out;
  torch::serialize::OutputArchive a;
  a.write("rng", cpu_rng_state());
  a.write("scale", at::tensor({scaler_->is_enabled() ? scaler_->get_scale() : 0.0}));
  if (scaler_->is_enabled()) {
    const c10::impl::GenericDict sd = scaler_->state_dict();
    a.write("growth_tracker", at::tensor({sd.at("_growth_tracker").toInt()}));
  }
  a.save_to(out);
  return out.str();
}

void LiveTrainer::load_position(const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive a;
  a.load_from(in);
  at::Tensor rng, scale, tracker;
  a.read("rng", rng);
  set_cpu_rng_state(rng);
  a.read("scale", scale);
  if (scaler_->is_enabled() && a.try_read("growth_tracker", tracker)) {
    c10::impl::GenericDict d = scaler_->state_dict();
    d.insert_or_assign("scale", scale.item<double>());
    d.insert_or_assign("_growth_tracker", tracker.item<int64_t>());
    scaler_->load_state_dict(d);
  }
}

Loader& LiveTrainer::loader_of(int r, int64_t epoch, int64_t batch) {
  DatasetSplits& split = data_[static_cast<size_t>(r)];
  if (!split.train) {
    DatasetOptions d = o_.dataset;
    d.uint8_inputs = d.uint8_inputs || device_.is_cuda();
    d.device = device_;
    d.train = share(o_, true, r, static_cast<int>(data_.size()));
    d.test = share(o_, false, 0, 1);
    split = open_dataset(d);
  }
  auto& [at_epoch, at_batch] = at_[static_cast<size_t>(r)];
  if (at_epoch != epoch) {
    split.train->start_epoch(epoch);
    at_epoch = epoch;
    at_batch = 0;
  }
  if (at_batch != batch) split.train->skip_to(batch);
  at_batch = batch + 1;
  return *split.train;
}

bool LiveTrainer::train_step(const LiveStep& s, int64_t epoch, int64_t batch, double* loss_sum,
                             double* samples) {
  double step_loss = 0, step_samples = 0;
  optimizer_->zero_grad();
  const bool ok = live_->run_logical([&](int r) {
    Batch b;
    if (!loader_of(r, epoch, batch).next(b)) {
      throw Error(cat("logical rank ", r, ": no batch ", batch, " in epoch ", epoch + 1));
    }
    at::Tensor loss;
    {
      TimelineSpan span(obs_ ? obs_->timeline() : nullptr, "forward");
      std::optional<AutocastGuard> autocast;
      if (amp_dtype_) autocast.emplace(device_.type(), *amp_dtype_);
      s.ddp->prepare_forward();
      at::Tensor logits =
          model_->forward(device_inputs(b.inputs, device_, o_.channels_last, shapes_.normalize));
      s.ddp->finish_forward({logits});
      loss = classification_loss(logits, b.targets.to(device_), o_.label_smoothing);
    }
    TimelineSpan span(obs_ ? obs_->timeline() : nullptr, "backward");
    scaler_->scale(loss).backward();
    const double n = static_cast<double>(b.targets.size(0));
    step_loss += loss.item<double>() * n;
    step_samples += n;
  });
  if (!ok || !live_->should_commit()) return false;  // redone by the next begin_step()
  optimizer_step(s.step);
  *loss_sum += step_loss;
  *samples += step_samples;
  return true;
}

void LiveTrainer::optimizer_step(int64_t step) {
  TimelineSpan span(obs_ ? obs_->timeline() : nullptr, "optimizer step");
  lr_ = lr_at(schedule_, step);
  scaled_optimizer_step(*optimizer_, *scaler_, params_, lr_, o_.clip_grad_norm);
}

// Events queued by on_event while begin_step() ran; the observers exist from
// the first generation on (they need its group).
void LiveTrainer::drain_events(const LiveStep& s) {
  const bool leader = s.pg.rank() == 0;
  if (!obs_) obs_ = std::make_unique<TrainObservers>(o_, s.pg, log_);
  for (const RecoveryEvent& e : pending_events_) obs_->recovery(e, leader ? log_ : nullptr);
  pending_events_.clear();
}

EpochMetrics LiveTrainer::end_epoch(int64_t epoch, double loss_sum, double samples, double seconds,
                                    const LiveStep& s) {
  EpochMetrics m;
  m.epoch = epoch + 1;
  m.train_loss = samples > 0 ? loss_sum / samples : 0;
  if (o_.evaluate_every_epoch) {
    const ClassificationCounts c = evaluate_split(*model_, *shapes_.test, device_, o_.channels_last,
                                                  nullptr, shapes_.normalize);
    m.test_acc = c.samples > 0 ? static_cast<double>(c.top1) / c.samples : 0;
    m.test_top5 = c.samples > 0 ? static_cast<double>(c.top5) / c.samples : 0;
    m.test_loss = c.samples > 0 ? c.loss_sum / c.samples : 0;
  }
  m.lr = lr_;
  m.loss_scale = scaler_->is_enabled() ? scaler_->get_scale() : 0;
  m.world_size = static_cast<int>(s.members.size());
  m.images_per_sec = seconds > 0 ? samples / seconds * s.pg.size() : 0;
  m.epoch_seconds = seconds;
  if (log_ && s.pg.rank() == 0 && o_.log_run) {
    *log_ << "epoch " << m.epoch << "/" << o_.epochs << "  train_loss " << m.train_loss
          << "  test_acc " << m.test_acc * 100 << "%  lr " << m.lr << "  workers " << m.world_size
          << " (logical ranks " << data_.size() << ")" << std::endl;
  }
  return m;
}

std::vector<EpochMetrics> LiveTrainer::run() {
  setup();
  std::vector<EpochMetrics> history;
  const int64_t total = steps_per_epoch_ * o_.epochs;
  int64_t epoch = live_->step() / std::max<int64_t>(1, steps_per_epoch_);
  double loss_sum = 0, samples = 0;
  auto epoch_start = Clock::now();
  while (live_->step() < total) {
    const LiveStep& s = live_->begin_step();
    drain_events(s);
    const int64_t step = s.step;
    if (step / steps_per_epoch_ != epoch) {  // a joiner's first step, or the epoch rolled over
      epoch = step / steps_per_epoch_;
      loss_sum = samples = 0;
      epoch_start = Clock::now();
    }
    if (!train_step(s, epoch, step % steps_per_epoch_, &loss_sum, &samples)) continue;
    if (o_.on_step) o_.on_step(live_->step(), DdpStats{});
    const int64_t in_epoch = live_->step() - epoch * steps_per_epoch_;
    if (log_ && o_.log_run && s.pg.rank() == 0 && o_.progress != TrainOptions::Progress::kNone &&
        o_.progress_every_steps > 0 && in_epoch % o_.progress_every_steps == 0) {
      *log_ << "  epoch " << epoch + 1 << "/" << o_.epochs << " step " << in_epoch << "/"
            << steps_per_epoch_ << "  loss " << (samples > 0 ? loss_sum / samples : 0)
            << "  workers " << s.members.size() << std::endl;
    }
    if (live_->step() % steps_per_epoch_ == 0) {
      const double seconds = std::chrono::duration<double>(Clock::now() - epoch_start).count();
      history.push_back(end_epoch(epoch, loss_sum, samples, seconds, s));
      if (obs_) obs_->epoch_end(history.back(), live_->step());
    }
  }
  if (obs_) obs_->finish();
  if (log_) {  // every member: a replacement's weights can be compared with the others'
    double sum = 0;
    for (const auto& p : model_->parameters())
      sum += p.detach().to(at::kDouble).sum().item<double>();
    std::ostringstream line;
    line.precision(17);
    line << "live: member " << live_->member() << " finished at step " << live_->step()
         << ", parameter sum " << sum;
    *log_ << line.str() << std::endl;
  }
  return history;
}

}  // namespace dtrain::detail

namespace dtrain {

std::vector<EpochMetrics> train(const TrainOptions& options, const LiveOptions& live,
                                std::ostream* log) {
  return detail::LiveTrainer(options, live, log).run();
}

}  // namespace dtrain
