#pragma once
// Fetcher: reads an epoch's samples ahead of the decode threads, in the
// sampler's order, over a bounded number of threads (each one request at a
// time) and a bounded number of bytes (Note [Fetch ahead] in
// fetcher.cpp). The ImageLoader uses one per epoch for remote sources, and
// each reads the next epoch's first batch for the next (Note [Across the
// epoch boundary]).

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dtrain/image.h"

namespace dtrain::image {

struct FetchOptions {
  /// Threads reading ahead (>= 1).
  int threads = 16;
  /// Positions fetched at most this far past the highest one taken.
  int64_t max_ahead = 256;
  /// No new fetch starts while the fetched, untaken samples hold this many
  /// bytes (so memory is bounded by it plus a run and a sample per thread).
  int64_t max_bytes = int64_t{64} << 20;
  /// A thread reads up to this many positions with one request when they
  /// are neighbours in the source (Note [Runs of neighbours]), even past
  /// max_ahead by less than this; >= 1.
  int64_t max_run = 64;
  /// The window at the start: first_window positions, widened by one for
  /// each position taken, up to max_ahead (Note [Window opens with the
  /// epoch]). <= 0: max_ahead from the start.
  int64_t first_window = 0;
};

/// A sample read ahead, or its read's failure, as one Fetcher hands it to
/// the next (Note [Across the epoch boundary] in fetcher.cpp).
struct Fetched {
  SampleData data;
  std::exception_ptr error;
};

class Fetcher {
 public:
  /// Fetches positions [begin, order.size()) of `order` (sample indices of
  /// `source`, which must outlive the fetcher), then, within the same
  /// bounds, the samples `then` (the next epoch's first ones), which only
  /// release_then() hands out. `ready`: positions begin, begin + 1, ...
  /// already read (another fetcher's release_then()); InvalidArgument when
  /// more than the positions.
  Fetcher(const ImageSource& source, std::vector<int64_t> order, int64_t begin,
          FetchOptions options, std::vector<int64_t> then = {}, std::vector<Fetched> ready = {});
  /// Stops the threads and waits for the reads in flight (each bounded by the
  /// source's own deadlines).
  ~Fetcher();
  Fetcher(const Fetcher&) = delete;
  Fetcher& operator=(const Fetcher&) = delete;

  /// The sample at position `pos`, each position taken at most once, in
  /// increasing order per caller: waits for its fetch, or reads it on the
  /// calling thread when no fetch has started it. Throws what the read threw
  /// (DataError and the like), as ImageSource::read would.
  void take(int64_t pos, SampleData& out);

  /// Stops the threads, waiting for the reads in flight, and hands over the
  /// samples of `then` read so far: then[0], then[1], ... in order (fewer or
  /// none when the fetchers had not got there). Nothing is taken after.
  std::vector<Fetched> release_then();

 private:
  struct Entry {
    bool done = false;
    bool unread = false;  // given up when the fetcher stopped: read by nobody
    SampleData data;
    std::exception_ptr error;
  };
  void run();
  void stop_and_join();
  int64_t window() const;               // under mu_: positions fetched past frontier_
  bool can_start() const;               // under mu_: a fetch may start now
  bool stopping();                      // takes mu_: stop_and_join() has begun
  int64_t run_at(int64_t pos) const;    // under mu_: positions a fetch from pos takes
  std::vector<uint8_t> reuse_buffer();  // Note [Recycled sample buffers]
  void keep_buffer(std::vector<uint8_t> buffer);

  const ImageSource& source_;
  const std::vector<int64_t> order_;  // the positions' samples, then `then`
  const int64_t then_at_;             // where `then` starts in order_
  const FetchOptions options_;

  std::mutex mu_;
  std::condition_variable space_cv_;  // fetch threads: room to start one, or stop
  std::condition_variable done_cv_;   // decode threads: an entry done
  std::unordered_map<int64_t, Entry> entries_;
  const int64_t begin_;    // the first position
  int64_t next_ = 0;       // the next position to fetch (or to read inline)
  int64_t frontier_ = 0;   // one past the highest position taken
  int64_t bytes_ = 0;      // bytes of done, untaken entries
  int own_in_flight_ = 0;  // reads running of positions before then_at_
  bool stop_ = false;
  std::vector<std::thread> threads_;
  std::mutex spare_mu_;  // only for spare_: never held with mu_
  std::vector<std::vector<uint8_t>> spare_;
};

}  // namespace dtrain::image
