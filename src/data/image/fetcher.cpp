// Note [Fetch ahead]
// A sample read from object storage costs a round trip (10 ms to S3 from a
// cloud VM) and little CPU; decoding it costs CPU and no waiting. When the
// decode threads read their own samples, each spends a round trip per image
// idle, and with as many decode threads as cores the cores are idle that long
// too. So for a remote source the loader hands the reads to a Fetcher: its
// threads read positions of the epoch strictly in the sampler's order, up to
// `max_ahead` positions past the lowest one the decoders have not taken yet,
// while the fetched and untaken samples hold less than `max_bytes`. The
// decoders take each position's bytes (waiting, if its read is in flight) and
// never touch the network in steady state.
//
// Bounds: at most `threads` requests (and so connections) are open at a
// time; memory is `max_bytes` plus one sample per thread. A decoder that
// reaches a position no fetch thread has started (the fetchers are behind,
// or stopped at a bound) reads it itself, so a decoder never waits on a
// fetch that a bound keeps from starting, and there is no deadlock between
// the two bounds and the loader's slots. A read's failure is kept with its
// position and rethrown to the decoder that takes it, which handles it as
// any unreadable image. Fetch threads hold no lock while they read.

#include "data/image/fetcher.h"

#include <algorithm>

namespace dtrain::image {
namespace {

int64_t held_bytes(const SampleData& d) {
  return static_cast<int64_t>(d.bytes.size() + d.image.pixels.size());
}

}  // namespace

Fetcher::Fetcher(const ImageSource& source, std::vector<int64_t> order, int64_t begin,
                 FetchOptions options)
    : source_(source), order_(std::move(order)), options_(options), next_(begin), frontier_(begin) {
  const int threads = std::max(1, options_.threads);
  threads_.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this] { run(); });
}

Fetcher::~Fetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void Fetcher::run() {
  const int64_t end = static_cast<int64_t>(order_.size());
  while (true) {
    int64_t pos;
    Entry* entry;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || next_ >= end ||
               (next_ < frontier_ + options_.max_ahead && bytes_ < options_.max_bytes);
      });
      if (stop_ || next_ >= end) return;
      pos = next_++;
      entry = &entries_[pos];  // references into an unordered_map stay valid
    }
    SampleData data;
    std::exception_ptr error;
    try {
      source_.read(order_[pos], data);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      entry->data = std::move(data);
      entry->error = error;
      entry->done = true;
      bytes_ += held_bytes(entry->data);
      ++fetched_;
    }
    cv_.notify_all();
  }
}

void Fetcher::take(int64_t pos, SampleData& out) {
  std::unique_lock<std::mutex> lock(mu_);
  frontier_ = std::max(frontier_, pos + 1);
  auto it = entries_.find(pos);
  if (it == entries_.end()) {
    // Not started by a fetch thread: read it here (Note [Fetch ahead]).
    next_ = std::max(next_, pos + 1);
    lock.unlock();
    cv_.notify_all();  // the window moved
    source_.read(order_[pos], out);
    return;
  }
  Entry* waited = &it->second;  // a reference survives rehashing, an iterator does not
  cv_.wait(lock, [&] { return waited->done; });
  Entry entry = std::move(*waited);
  entries_.erase(pos);
  bytes_ -= held_bytes(entry.data);
  lock.unlock();
  cv_.notify_all();
  if (entry.error) std::rethrow_exception(entry.error);
  std::swap(out.bytes, entry.data.bytes);
  out.encoded = entry.data.encoded;
  if (!entry.data.encoded) out.image = std::move(entry.data.image);
}

int64_t Fetcher::fetched() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fetched_;
}

}  // namespace dtrain::image
