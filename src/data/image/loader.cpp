// ImageLoader: worker threads decode and augment samples straight into a ring
// of preallocated batch buffers ("slots").
//
// Note [Slots]
// Batch b lives in slot b % K (K = prefetch_batches). Workers take sample
// positions of the epoch strictly in order; the first worker to reach batch b
// claims its slot, which must be free: the consumer frees a slot when it asks
// for the batch after the one the slot held. So at most K batches are in
// flight, and a slot's tensors are reused only if the consumer dropped every
// reference to them (else fresh ones are allocated). Which thread renders a
// sample never matters: its pixels depend only on (seed, epoch, index).

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>

#include "common/random.h"
#include "common/strings.h"
#include "data/image/fetcher.h"
#include "dtrain/errors.h"
#include "dtrain/image.h"

namespace dtrain {
namespace detail {

// One batch being assembled. In a named namespace: ImageLoader::Impl,
// declared in the public header, holds them (-Wsubobject-linkage).
struct LoaderSlot {
  at::Tensor inputs;   // [B, 3, S, S]
  at::Tensor targets;  // [B]
  int64_t batch = -1;  // the batch it holds, -1 when free
  int64_t remaining = 0;
  std::vector<std::string> errors;  // per row; non-empty: the sample failed
};

}  // namespace detail
namespace {

using Slot = detail::LoaderSlot;

bool unshared(const at::Tensor& t) {
  return t.defined() && t.use_count() == 1 && t.storage().use_count() == 1;
}

}  // namespace

at::Tensor normalize_batch(const at::Tensor& uint8_batch, const TransformOptions& o) {
  auto f = at::TensorOptions().dtype(at::kFloat).device(uint8_batch.device());
  at::Tensor mean = at::tensor({o.mean[0], o.mean[1], o.mean[2]}, f).view({1, 3, 1, 1});
  at::Tensor std = at::tensor({o.std[0], o.std[1], o.std[2]}, f).view({1, 3, 1, 1});
  return uint8_batch.to(at::kFloat).div_(255.0f).sub_(mean).div_(std);
}

class ImageLoader::Impl {
 public:
  Impl(std::shared_ptr<const ImageSource> source, LoaderOptions loader, TransformOptions transform,
       ImageLoaderOptions options)
      : source_(std::move(source)),
        loader_(loader),
        transform_(transform),
        options_(options),
        sampler_(source_ ? source_->size() : 0, sampler_options(loader)) {
    if (!source_) throw InvalidArgument("ImageLoader: source is null");
    if (loader_.batch_size < 1) {
      throw InvalidArgument(cat("batch size must be positive, got ", loader_.batch_size));
    }
    if (loader_.threads < 0) {
      throw InvalidArgument(cat("loader threads must be >= 0, got ", loader_.threads));
    }
    if (transform_.size < 1) {
      throw InvalidArgument(cat("image size must be positive, got ", transform_.size));
    }
    if (options_.fetch_threads < -1 || options_.fetch_threads > kMaxFetchThreads ||
        options_.fetch_bytes < 1) {
      throw InvalidArgument(cat("ImageLoaderOptions: fetch_threads must be in [-1, ",
                                kMaxFetchThreads, "] (got ", options_.fetch_threads,
                                ") and fetch_bytes >= 1 (got ", options_.fetch_bytes, ")"));
    }
    fetch_threads_ = options_.fetch_threads >= 0 ? options_.fetch_threads
                     : source_->remote()         ? kRemoteFetchThreads
                                                 : 0;
    slots_.resize(std::max(1, options_.prefetch_batches));
    pin_ = options_.pin_memory && at::globalContext().hasCUDA();
    seek(0, 0, 0);
  }

  ~Impl() { stop_workers(); }

  int64_t batches_per_epoch() const { return loader_batches(sampler_, loader_); }
  int64_t start_sample() const { return sampler_.start(); }
  int64_t samples_per_epoch() const { return sampler_.num_samples(); }
  int64_t position() const { return next_batch_; }
  int64_t skipped() const { return skipped_; }
  const std::shared_ptr<const ImageSource>& source() const { return source_; }
  int64_t epoch() const { return epoch_; }

  // Stops the workers, positions the epoch at `batch` counted from global
  // position `start` (Loader::resume_at) and restarts them.
  void seek(int64_t epoch, int64_t batch, int64_t start) {
    if (start != sampler_.start() || epoch != sampler_.epoch()) {
      stop_workers();
      sampler_.set_epoch(epoch);
      sampler_.set_start(start);  // throws outside [0, N]
      started_ = false;
    }
    if (batch < 0 || batch > batches_per_epoch()) {
      throw InvalidArgument(
          cat("ImageLoader: batch ", batch, " is outside [0, ", batches_per_epoch(), "]"));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (started_ && epoch == epoch_ && batch == next_batch_ && handed_ < 0 && !error_) {
        return;  // already there and nothing handed out: keep the prefetched work
      }
    }
    stop_workers();
    started_ = true;
    epoch_ = epoch;
    order_ = sampler_.indices();
    end_pos_ = std::min<int64_t>(static_cast<int64_t>(order_.size()),
                                 batches_per_epoch() * loader_.batch_size);
    next_pos_ = batch * loader_.batch_size;
    next_batch_ = batch;
    handed_ = -1;
    for (Slot& s : slots_) s.batch = -1;
    stop_ = false;
    error_ = nullptr;
    if (fetch_threads_ > 0 && next_pos_ < end_pos_) {  // Note [Fetch ahead]
      image::FetchOptions f;
      f.threads = fetch_threads_;
      f.max_ahead = static_cast<int64_t>(slots_.size()) * loader_.batch_size;
      f.max_bytes = options_.fetch_bytes;
      f.first_window = loader_.batch_size;  // Note [Window opens with the epoch]
      // Note [Across the epoch boundary] (fetcher.cpp): the samples the last
      // fetcher read for this epoch's first positions, where they are this
      // order's; and this epoch's fetcher reads the next one's first batch.
      size_t n = 0;
      while (n < carried_.size() && next_pos_ + static_cast<int64_t>(n) < end_pos_ &&
             carried_for_[n] == order_[next_pos_ + n]) {
        ++n;
      }
      carried_.resize(n);
      std::vector<int64_t> then = next_epoch_head();
      fetcher_ = std::make_unique<image::Fetcher>(
          *source_, std::vector<int64_t>(order_.begin(), order_.begin() + end_pos_), next_pos_, f,
          then, std::move(carried_));
      fetching_then_ = std::move(then);
    }
    carried_.clear();
    carried_for_.clear();
    for (int t = 0; t < loader_.threads; ++t) workers_.emplace_back([this] { work(); });
  }

  bool next(Batch& out) {
    const int64_t b = next_batch_;
    Slot& slot = slots_[b % slots_.size()];
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (handed_ >= 0) slots_[handed_ % slots_.size()].batch = -1;  // Note [Slots]
      handed_ = -1;
      work_cv_.notify_all();
      if (b >= batches_per_epoch()) return false;
      if (batch_rows(b) == 0) {  // an exact loader's rank with nothing left this step
        ++next_batch_;
        const auto dtype = transform_.uint8_output ? at::kByte : at::kFloat;
        out.inputs = at::empty({0, 3, transform_.size, transform_.size}, at::dtype(dtype));
        out.targets = at::empty({0}, at::kLong);
        return true;
      }
      if (loader_.threads == 0) {
        lock.unlock();
        fill_inline(b);
        lock.lock();
      }
      const bool ready = done_cv_.wait_for(lock, options_.timeout, [&] {
        return error_ || (slot.batch == b && slot.remaining == 0);
      });
      if (error_) std::rethrow_exception(error_);
      if (!ready) {
        throw TimeoutError(
            cat("image loader: batch ", b, " of epoch ", epoch_, " not ready after ",
                options_.timeout.count(), " ms (", loader_.threads,
                " threads); is the data directory on a stalled filesystem or object store?"));
      }
      handed_ = b;
    }
    ++next_batch_;
    repair(slot, b);
    const int64_t rows = batch_rows(b);
    out.inputs = rows == loader_.batch_size ? slot.inputs : slot.inputs.narrow(0, 0, rows);
    out.targets = rows == loader_.batch_size ? slot.targets : slot.targets.narrow(0, 0, rows);
    return true;
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    if (fetcher_) {  // after the workers: none is waiting on it
      carried_ = fetcher_->release_then();
      carried_for_ = std::move(fetching_then_);
      fetcher_.reset();
    }
  }

 private:
  int64_t batch_rows(int64_t b) const {
    return std::clamp<int64_t>(end_pos_ - b * loader_.batch_size, 0, loader_.batch_size);
  }

  // The first batch of the epoch after this one, started at its beginning.
  std::vector<int64_t> next_epoch_head() const {
    DistributedSampler next = sampler_;
    next.set_epoch(epoch_ + 1);
    next.set_start(0);
    std::vector<int64_t> order = next.indices();
    order.resize(std::min(order.size(), static_cast<size_t>(loader_.batch_size)));
    return order;
  }

  // Under mu_: the slot batch b goes to, claimed (buffers ready) if free; null
  // while it still holds an earlier batch.
  Slot* claim(int64_t b) {
    Slot& s = slots_[b % slots_.size()];
    if (s.batch == b) return &s;
    if (s.batch != -1) return nullptr;
    const int64_t n = loader_.batch_size, size = transform_.size;
    if (!unshared(s.inputs) || !unshared(s.targets)) {
      const auto dtype = transform_.uint8_output ? at::kByte : at::kFloat;
      s.inputs =
          at::empty({n, 3, size, size}, at::TensorOptions().dtype(dtype).pinned_memory(pin_));
      s.targets = at::empty({n}, at::TensorOptions().dtype(at::kLong).pinned_memory(pin_));
    }
    s.batch = b;
    s.remaining = batch_rows(b);
    s.errors.assign(n, std::string());
    return &s;
  }

  void work() {
    try {
      while (true) {
        int64_t pos;
        Slot* slot;
        {
          std::unique_lock<std::mutex> lock(mu_);
          work_cv_.wait(lock, [&] {
            return stop_ || next_pos_ >= end_pos_ || claim(next_pos_ / loader_.batch_size);
          });
          if (stop_ || next_pos_ >= end_pos_) return;
          pos = next_pos_++;
          slot = claim(pos / loader_.batch_size);
        }
        render(pos, *slot);
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (--slot->remaining == 0) done_cv_.notify_all();
        }
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      done_cv_.notify_all();
    }
  }

  void fill_inline(int64_t b) {
    Slot* slot;
    {
      std::lock_guard<std::mutex> lock(mu_);
      slot = claim(b);
    }
    for (int64_t pos = b * loader_.batch_size; pos < b * loader_.batch_size + batch_rows(b);
         ++pos) {
      render(pos, *slot);
    }
    std::lock_guard<std::mutex> lock(mu_);
    slot->remaining = 0;
  }

  // Renders the sample at epoch position `pos` into its row; a failure is
  // recorded in the slot for repair() (Note [Slots]).
  void render(int64_t pos, Slot& slot) {
    thread_local SampleData data;
    thread_local Image decoded;
    const int64_t row = pos % loader_.batch_size;
    const int64_t index = order_[pos];
    const size_t row_bytes = slot.inputs.nbytes() / loader_.batch_size;
    void* dst = static_cast<char*>(slot.inputs.data_ptr()) + row * row_bytes;
    try {
      if (fetcher_) {
        fetcher_->take(pos, data);
      } else {
        source_->read(index, data);
      }
      const uint64_t seed =
          mix_seed(loader_.seed, static_cast<uint64_t>(epoch_), static_cast<uint64_t>(index));
      if (data.encoded) {
        const ImageInfo info = probe_image(data.bytes.data(), data.bytes.size());
        const SamplePlan plan = plan_sample(info.width, info.height, seed, transform_);
        const CropBox roi = sample_footprint(plan);
        const DecodedRegion where = decode_image(data.bytes.data(), data.bytes.size(), decoded,
                                                 min_decode_scale(plan, transform_),
                                                 transform_.region_decode ? &roi : nullptr);
        render_sample(decoded, where, plan, transform_, dst);
      } else {
        const Image& im = data.image;
        render_sample(im, {}, plan_sample(im.width, im.height, seed, transform_), transform_, dst);
      }
      slot.targets.data_ptr<int64_t>()[row] = source_->label(index);
    } catch (const std::exception& e) {  // DataError, or bad_alloc for absurd sizes
      slot.errors[row] = cat(source_->name(index), ": ", first_line(e.what()));
    }
  }

  // On the consumer thread, once batch b is complete: a failed row is an error
  // (strict) or replaced by the next good row of the batch, so batches stay full.
  void repair(Slot& slot, int64_t b) {
    const int64_t rows = batch_rows(b);
    const size_t row_bytes = slot.inputs.nbytes() / loader_.batch_size;
    auto* base = static_cast<char*>(slot.inputs.data_ptr());
    int64_t* targets = slot.targets.data_ptr<int64_t>();
    for (int64_t r = 0; r < rows; ++r) {
      if (slot.errors[r].empty()) continue;
      if (options_.strict) {
        throw DataError(cat("unreadable image ", slot.errors[r],
                            " (run without DatasetOptions::strict to skip bad images)"));
      }
      std::cerr << "dtrain: warning: skipping unreadable image " << slot.errors[r] << "\n";
      ++skipped_;
      int64_t good = -1;
      for (int64_t k = 1; k < rows && good < 0; ++k) {
        if (slot.errors[(r + k) % rows].empty()) good = (r + k) % rows;
      }
      if (good < 0) {
        throw DataError(cat("every image of batch ", b, " of epoch ", epoch_,
                            " is unreadable, e.g. ", slot.errors[r]));
      }
      std::memcpy(base + r * row_bytes, base + good * row_bytes, row_bytes);
      targets[r] = targets[good];
    }
    // Replaced rows stay marked so a later row does not copy from them first;
    // clear them now that the batch is whole.
    for (int64_t r = 0; r < rows; ++r) slot.errors[r].clear();
  }

  std::shared_ptr<const ImageSource> source_;
  LoaderOptions loader_;
  TransformOptions transform_;
  ImageLoaderOptions options_;
  DistributedSampler sampler_;
  bool pin_ = false;
  static constexpr int kRemoteFetchThreads = 16;  // ImageLoaderOptions::fetch_threads
  static constexpr int kMaxFetchThreads = 256;
  int fetch_threads_ = 0;
  std::unique_ptr<image::Fetcher> fetcher_;  // this epoch's, when fetch_threads_ > 0
  std::vector<int64_t> fetching_then_;       // the samples fetcher_ reads for the next epoch
  std::vector<image::Fetched> carried_;      // read by the last fetcher (Note [Across the
  std::vector<int64_t> carried_for_;         // epoch boundary]): these samples' data

  int64_t epoch_ = 0;
  std::vector<int64_t> order_;  // this rank's sample indices for the epoch
  int64_t end_pos_ = 0;         // positions [0, end_pos_) are loaded
  int64_t next_batch_ = 0;      // the batch next() returns
  int64_t handed_ = -1;         // the batch the consumer holds, -1 none
  int64_t skipped_ = 0;
  bool started_ = false;  // seek() ran once

  std::mutex mu_;  // guards the members below and every Slot's batch/remaining
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::vector<Slot> slots_;
  int64_t next_pos_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
};

ImageLoader::ImageLoader(std::shared_ptr<const ImageSource> source, LoaderOptions loader,
                         TransformOptions transform, ImageLoaderOptions options)
    : impl_(std::make_unique<Impl>(std::move(source), loader, transform, options)) {}
ImageLoader::~ImageLoader() = default;
void ImageLoader::start_epoch(int64_t epoch) { impl_->seek(epoch, 0, 0); }
void ImageLoader::resume_at(int64_t consumed) { impl_->seek(impl_->epoch(), 0, consumed); }
int64_t ImageLoader::start_sample() const { return impl_->start_sample(); }
bool ImageLoader::next(Batch& batch) { return impl_->next(batch); }
int64_t ImageLoader::batches_per_epoch() const { return impl_->batches_per_epoch(); }
int64_t ImageLoader::samples_per_epoch() const { return impl_->samples_per_epoch(); }
void ImageLoader::skip_to(int64_t batch_index) {
  impl_->seek(impl_->epoch(), batch_index, impl_->start_sample());
}
int64_t ImageLoader::position() const { return impl_->position(); }
int64_t ImageLoader::skipped_samples() const { return impl_->skipped(); }
DataFingerprint ImageLoader::fingerprint() const { return impl_->source()->fingerprint(); }

}  // namespace dtrain
