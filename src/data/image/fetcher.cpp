// Note [Fetch ahead]
// A sample read from object storage costs a round trip (10 ms to S3 from a
// cloud VM) and little CPU; decoding it costs CPU and no waiting. When the
// decode threads read their own samples, each spends a round trip per image
// idle, and with as many decode threads as cores the cores are idle that long
// too. So for a remote source the loader hands the reads to a Fetcher: its
// threads read positions of the epoch strictly in the sampler's order, up to
// `max_ahead` positions past the highest one the decoders have taken,
// while the fetched and untaken samples hold less than `max_bytes`. The
// decoders take each position's bytes (waiting, if its read is in flight) and
// never touch the network in steady state.
//
// Bounds: the fetch threads have at most `threads` requests open at a time
// (a decode thread reading inline adds its own one); memory is `max_bytes`
// plus, per thread, the run being read (one sample, or up to max_run
// neighbours: Note [Runs of neighbours]) and one sample kept for reuse
// (Note [Recycled sample buffers]). A decoder that
// reaches a position no fetch thread has started (the fetchers are behind,
// or stopped at a bound) reads it itself, so a decoder never waits on a
// fetch that a bound keeps from starting, and there is no deadlock between
// the two bounds and the loader's slots. A read's failure is kept with its
// position and rethrown to the decoder that takes it, which handles it as
// any unreadable image. Fetch threads hold no lock while they read.

#include "data/image/fetcher.h"

#include <algorithm>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::image {
namespace {

// What a done entry holds against max_bytes: a failed read holds nothing,
// and a decoded sample's byte buffer is a recycled one's stale contents
// (Note [Recycled sample buffers]).
int64_t held_bytes(const SampleData& d, const std::exception_ptr& error) {
  if (error) return 0;
  return static_cast<int64_t>((d.encoded ? d.bytes.size() : 0) + d.image.pixels.size());
}

std::vector<int64_t> joined(std::vector<int64_t> order, const std::vector<int64_t>& then) {
  order.insert(order.end(), then.begin(), then.end());
  return order;
}

}  // namespace

Fetcher::Fetcher(const ImageSource& source, std::vector<int64_t> order, int64_t begin,
                 FetchOptions options, std::vector<int64_t> then, std::vector<Fetched> ready)
    : source_(source),
      order_(joined(std::move(order), then)),
      then_at_(static_cast<int64_t>(order_.size() - then.size())),
      options_(options),
      begin_(begin),
      next_(begin),
      frontier_(begin) {
  const auto n_ready = static_cast<int64_t>(ready.size());
  if (begin < 0 || begin + n_ready > then_at_) {
    throw InvalidArgument(
        cat("Fetcher: ", n_ready, " samples ready from position ", begin, " of ", then_at_));
  }
  for (int64_t k = 0; k < n_ready; ++k) {  // Note [Across the epoch boundary]
    Entry& e = entries_[begin + k];
    e.done = true;
    e.data = std::move(ready[k].data);
    e.error = ready[k].error;
    bytes_ += held_bytes(e.data, e.error);
  }
  next_ = begin + n_ready;
  const int threads = std::max(1, options_.threads);
  threads_.reserve(static_cast<size_t>(threads));
  try {
    for (int t = 0; t < threads; ++t) threads_.emplace_back([this] { run(); });
  } catch (...) {  // no thread left running on a half-made object
    stop_and_join();
    throw;
  }
}

Fetcher::~Fetcher() { stop_and_join(); }

// Note [Across the epoch boundary]
// An epoch's first batch waits for its reads: a round trip and a run's
// bytes, about 30-50 ms at 1 Gbit/s and 10 ms with runs of 16, in which the
// decode threads idle (2-3% of a 1,000-image epoch's time on one core;
// nothing at ImageNet's 1.28 million). So once every read of its epoch
// has ended, a fetcher reads on, within the same window and byte bounds,
// the samples of the next epoch's first batch that the loader named
// (`then`). Ended, not only started (own_in_flight_ counts the fetch
// threads' reads and a decode thread's own): a sample at both this epoch's
// end and the next one's start (an unshuffled order smaller than the
// window) is then not read twice at once, and with a data cache the second
// read finds the copy the first made instead of a GET of its own. The
// loader hands them to the next epoch's fetcher (release_then(), `ready`):
// the longest prefix of them that the new order has at the position it
// starts from (start_epoch of the next epoch, or an unshuffled order again),
// dropping the rest. release_then() waits for those reads in flight, each
// bounded by the source's deadlines, as the fetcher's destructor does.
// A sample's bytes do not depend on the epoch, so the handover is exact; a
// failed read is handed over as a failure, one given up at the stop is not.
std::vector<Fetched> Fetcher::release_then() {
  stop_and_join();
  std::vector<Fetched> out;
  for (int64_t pos = then_at_; pos < static_cast<int64_t>(order_.size()); ++pos) {
    auto it = entries_.find(pos);
    if (it == entries_.end() || !it->second.done || it->second.unread) break;
    out.push_back({std::move(it->second.data), it->second.error});
    entries_.erase(it);
  }
  return out;
}

void Fetcher::stop_and_join() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  space_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

// Note [Window opens with the epoch]
// Every fetch of the window shares one link. Opened whole at the start of an
// epoch, the window's 16 requests (with shuffle blocks, 16 runs of 1.4 MB)
// share the link until nearly all are done, so the first batch waits for
// the whole window: about 190 ms a epoch at 1 Gbit/s, which was 6% of the
// one decode core's time with 1,000-image epochs (the core idle, the
// fetchers not behind in steady state). So the window opens at
// first_window positions (the loader's batch) and widens by one for each
// position taken, to max_ahead: the first batch's reads share the link only
// with each other, and the steady state is as before.
int64_t Fetcher::window() const {
  if (options_.first_window <= 0) return options_.max_ahead;
  return std::min(options_.max_ahead, options_.first_window + (frontier_ - begin_));
}

bool Fetcher::stopping() {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

bool Fetcher::can_start() const {
  return next_ < static_cast<int64_t>(order_.size()) && next_ < frontier_ + window() &&
         bytes_ < options_.max_bytes &&
         (next_ < then_at_ || own_in_flight_ == 0);  // Note [Across the epoch boundary]
}

void Fetcher::run() {
  // Reused from one fetch to the next (a sample a fetch with one object
  // per image): cleared, not allocated again.
  std::vector<SampleData> run;
  std::vector<Entry*> entries;
  std::vector<std::exception_ptr> errors;
  std::vector<char> unread;
  while (true) {
    int64_t pos, count;
    entries.clear();
    {
      std::unique_lock<std::mutex> lock(mu_);
      space_cv_.wait(lock, [&] {
        return stop_ || next_ >= static_cast<int64_t>(order_.size()) || can_start();
      });
      if (stop_ || !can_start()) return;  // stopped, or every position started
      pos = next_;
      count = run_at(pos);
      next_ += count;
      if (pos < then_at_) ++own_in_flight_;
      for (int64_t k = 0; k < count; ++k) {
        entries.push_back(&entries_[pos + k]);  // references into an unordered_map stay valid
      }
      // Note [One wake-up a position]: room for more wakes one more fetcher.
      if (can_start()) space_cv_.notify_one();
    }
    run.resize(static_cast<size_t>(count));
    errors.assign(static_cast<size_t>(count), nullptr);
    unread.assign(static_cast<size_t>(count), 0);
    for (SampleData& d : run) d.bytes = reuse_buffer();
    if (count == 1) {
      try {
        source_.read(order_[pos], run[0]);
      } catch (...) {
        errors[0] = std::current_exception();
      }
    } else {
      try {
        source_.read_run(order_[pos], count, run.data());  // Note [Runs of neighbours]
      } catch (...) {
        // Each sample alone, so that a bad one is named and the good ones
        // are kept (the corrupt-data policy applies per sample).
        for (int64_t k = 0; k < count; ++k) {
          if (stopping()) {  // the rest fail as stopped; nobody takes them
            errors[k] = std::make_exception_ptr(DataError("fetch stopped"));
            unread[k] = 1;
            continue;
          }
          try {
            source_.read(order_[pos + k], run[k]);
          } catch (...) {
            errors[k] = std::current_exception();
          }
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int64_t k = 0; k < count; ++k) {
        Entry* entry = entries[k];
        entry->data = std::move(run[k]);
        entry->error = errors[k];
        entry->unread = unread[k] != 0;
        entry->done = true;
        bytes_ += held_bytes(entry->data, entry->error);
      }
      // The last of the epoch's own reads lets the next epoch's start.
      if (pos < then_at_ && --own_in_flight_ == 0 && can_start()) space_cv_.notify_one();
    }
    done_cv_.notify_all();  // only decode threads wait there
  }
}

// Note [Runs of neighbours] (the fetcher's side; the sources' is in
// runs.h): with a block order (Note [Block order] in dtrain/sampler.h)
// consecutive positions of a rank's order are often consecutive samples
// that lie back to back in one shard. A fetch thread then takes them all
// -- up to max_run positions -- and reads them with
// one request (ImageSource::read_run): a request's fixed cost (its round
// trip, the kernel's and libcurl's work per transfer) is paid once per run
// instead of once per sample.
int64_t Fetcher::run_at(int64_t pos) const {
  // Not cut at the window's edge: the window moves a position per take, so
  // a run cut there would mostly be one sample. A run may end past the edge
  // by less than max_run positions.
  const int64_t limit = std::min(options_.max_run, static_cast<int64_t>(order_.size()) - pos);
  int64_t n = 1;
  while (n < limit && order_[pos + n] == order_[pos] + n) ++n;
  return n == 1 ? 1 : std::max<int64_t>(1, source_.run_length(order_[pos], n));
}

// Note [One wake-up a position]
// A take() frees room for about one more fetch (the window moves by one
// position; one sample's bytes are released), so it wakes one fetch thread,
// and a fetch thread that finds room for more than its own wakes the next.
// Waking them all at every take (and every decoder at every completed fetch,
// on one condition variable) cost 16 context switches a sample: with the
// decode thread on the same core, a fifth of an image's CPU time at 600
// images/s. Decode threads wait on done_cv_, fetch threads on space_cv_.
void Fetcher::take(int64_t pos, SampleData& out) {
  std::unique_lock<std::mutex> lock(mu_);
  frontier_ = std::max(frontier_, pos + 1);
  auto it = entries_.find(pos);
  if (it == entries_.end()) {
    // Not started by a fetch thread: read it here (Note [Fetch ahead]),
    // counted as one of the epoch's reads in flight (Note [Across the epoch
    // boundary]).
    next_ = std::max(next_, pos + 1);
    ++own_in_flight_;
    const bool room = can_start();
    lock.unlock();
    if (room) space_cv_.notify_one();
    std::exception_ptr error;
    try {
      source_.read(order_[pos], out);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    const bool last = --own_in_flight_ == 0 && can_start();
    lock.unlock();
    if (last) space_cv_.notify_one();
    if (error) std::rethrow_exception(error);
    return;
  }
  Entry* waited = &it->second;  // a reference survives rehashing, an iterator does not
  if (!waited->done && can_start()) space_cv_.notify_one();  // the window moved meanwhile
  done_cv_.wait(lock, [&] { return waited->done; });
  Entry entry = std::move(*waited);
  entries_.erase(pos);
  bytes_ -= held_bytes(entry.data, entry.error);
  const bool room = can_start();
  lock.unlock();
  if (room) space_cv_.notify_one();
  if (entry.error) std::rethrow_exception(entry.error);
  std::swap(out.bytes, entry.data.bytes);
  out.encoded = entry.data.encoded;
  if (!entry.data.encoded) out.image = std::move(entry.data.image);
  keep_buffer(std::move(entry.data.bytes));  // the caller's last sample's
}

// Note [Recycled sample buffers]
// Each fetch fills a buffer of an image's size (about 88 KB for ImageNet),
// and each take() hands the caller's previous one back. Freed and allocated
// again per sample, they cost malloc's consolidation work and fresh pages
// (page faults, zeroing by the kernel) on the core the decoder uses; kept
// in a small pool (at most one a fetch thread) they are reused warm, and an
// S3 GET fills one without reallocating (S3Client::get_object into a
// vector keeps its capacity). They are kept at their size, not cleared: a
// read that resizes one (a packed or tar sample, each sample of a run)
// zero-fills only the bytes it grows by before writing over them.
std::vector<uint8_t> Fetcher::reuse_buffer() {
  std::lock_guard<std::mutex> lock(spare_mu_);
  if (spare_.empty()) return {};
  std::vector<uint8_t> b = std::move(spare_.back());
  spare_.pop_back();
  return b;
}

void Fetcher::keep_buffer(std::vector<uint8_t> buffer) {
  if (buffer.capacity() == 0) return;
  // Not cleared: a read that resizes it then zero-fills only what grows.
  std::lock_guard<std::mutex> lock(spare_mu_);
  if (spare_.size() < static_cast<size_t>(std::max(1, options_.threads))) {
    spare_.push_back(std::move(buffer));
  }
}

}  // namespace dtrain::image
