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
// What a step does is train()'s, one copy of it (Note [Two drivers, one step]
// in training_state.cpp): the data options, model, optimizer, autocast dtype
// and loss scaler (make_training_state, after the same manual_seed), a
// micro-batch's forward and scaled backward (train_micro_batch), the
// optimizer step (scaled_optimizer_step), the schedule and the epoch's
// evaluation. This driver keeps its own loop because its position is the
// LiveGroup's committed step, not a step counter and checkpoint of its own.
//
// What differs from train(): accumulation_steps must be 1 (a logical rank's
// micro-batch is one batch); dataset.train.exact is not used; no checkpoints are read or written
// (the state lives in the members; a job that falls below the minimum ends); evaluation runs the
// whole test split on every member without collectives (the models are identical), and train_loss
// is this member's mean over the micro-batches it ran; no per-bucket timeline spans (each
// generation has its own reducer). Every member ends with a line naming its member id and the sum
// of its parameters, so the replacement's weights can be compared with the others'.

#include "train/live_trainer.h"

#include <chrono>
#include <cstdlib>
#include <sstream>

#include <ATen/Parallel.h>
#include <torch/serialize.h>

#include "common/strings.h"
#include "dtrain/checkpoint.h"
#include "dtrain/errors.h"
#include "dtrain/optim.h"
#include "train/steps.h"
#include "train/training_state.h"

namespace dtrain::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Logical rank r of w0's data (Note [Live training]): DistributedSampler
// rank r of w0's share of the training split, padded (dataset.train.exact is
// not used: every logical rank has a batch at every step), and the whole test
// split.
DatasetSplits open_logical_rank(const TrainOptions& o, at::Device device, int r, int w0) {
  LoaderOptions train = loader_options(o, /*train=*/true);
  train.exact = false;
  train.rank = r;
  train.world_size = w0;
  LoaderOptions test = loader_options(o, /*train=*/false);
  test.rank = 0;
  test.world_size = 1;
  return open_dataset(dataset_options(o, device, train, test));
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
  const at::Device device = pick_device(o_.device, local_rank_from_env());
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

  // Note [Two drivers, one step] (training_state.cpp): data, model, optimizer
  // and scaler are built as the Trainer builds them.
  shapes_ = open_logical_rank(o_, device, 0, w0);
  steps_per_epoch_ = shapes_.train->batches_per_epoch();
  schedule_ = lr_schedule_for(o_, steps_per_epoch_, w0);
  validate(schedule_);

  // The scaler needs no group: after the reduction every member has the
  // same gradients, so all skip an overflowed step alike.
  state_ = make_training_state(o_, shapes_, device);

  live_->register_module(*state_.model);
  live_->register_optimizer(*state_.optimizer);
  live_->register_state(
      "trainer", [this] { return save_position(); },
      [this](const std::string& bytes) { load_position(bytes); });
  live_->wrap_ddp(*state_.model, o_.ddp);
}

// The scaler's state and the CPU generator, for a joiner.
std::string LiveTrainer::save_position() const {
  std::ostringstream out;
  torch::serialize::OutputArchive a;
  a.write("rng", cpu_rng_state());
  a.write("scale", at::tensor({state_.scaler->is_enabled() ? state_.scaler->get_scale() : 0.0}));
  if (state_.scaler->is_enabled()) {
    const c10::impl::GenericDict sd = state_.scaler->state_dict();
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
  if (state_.scaler->is_enabled() && a.try_read("growth_tracker", tracker)) {
    c10::impl::GenericDict d = state_.scaler->state_dict();
    d.insert_or_assign("scale", scale.item<double>());
    d.insert_or_assign("_growth_tracker", tracker.item<int64_t>());
    state_.scaler->load_state_dict(d);
  }
}

Loader& LiveTrainer::loader_of(int r, int64_t epoch, int64_t batch) {
  DatasetSplits& split = data_[static_cast<size_t>(r)];
  if (!split.train) {
    split = open_logical_rank(o_, state_.device, r, static_cast<int>(data_.size()));
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
  state_.optimizer->zero_grad();
  const bool ok = live_->run_logical([&](int r) {
    Batch b;
    if (!loader_of(r, epoch, batch).next(b)) {
      throw Error(cat("logical rank ", r, ": no batch ", batch, " in epoch ", epoch + 1));
    }
    const at::Tensor loss = train_micro_batch(state_, *s.ddp, b, shapes_.normalize, o_,
                                              obs_ ? obs_->timeline() : nullptr);
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
  scaled_optimizer_step(*state_.optimizer, *state_.scaler, state_.params, lr_, o_.clip_grad_norm);
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
  fill_epoch_metrics(state_, evaluate_epoch(state_, o_, shapes_), &m);
  m.lr = lr_;
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
    for (const auto& p : state_.model->parameters())
      sum += p.detach().to(at::kDouble).sum().item<double>();
    std::ostringstream line;
    line.precision(17);
    line << "live: member " << live_->member() << " finished at step " << live_->step()
         << ", parameter sum " << sum;
    *log_ << line.str() << std::endl;
    // The steady-state cost of live recovery, measured (LiveStats).
    const LiveStats st = live_->stats();
    if (st.committed_steps > 0) {
      std::ostringstream cost;
      cost << std::fixed;
      cost.precision(3);
      cost << "live: member " << live_->member() << ": live protocol "
           << std::chrono::duration<double, std::milli>(st.protocol).count() /
                  static_cast<double>(st.committed_steps)
           << " ms per step, " << st.protocol_share() * 100 << "% of "
           << std::chrono::duration<double>(st.wall).count() << " s over " << st.committed_steps
           << " committed steps; buffer broadcast (plain DDP's too) "
           << std::chrono::duration<double, std::milli>(st.buffers).count() /
                  static_cast<double>(st.committed_steps)
           << " ms per step; forming generations "
           << std::chrono::duration<double>(st.forming).count() << " s";
      *log_ << cost.str() << std::endl;
    }
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
