// The first-batch latency of an ImageFolder in S3 (issue 18): seconds from
// this process's start to its first training batch, and how much of it was
// opening the dataset (the probes and listings of train and val). Run as 1 to
// 4 ranks by listing_first_batch.sh with torchrun's variables (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT); without them, one rank.
//
//   bench_listing_first_batch DATA_DIR [--alone] [--batch-size B] [--threads T]
//
// With a group, the ranks open together (open_dataset(options, pg)): rank 0
// lists for all of them (Note [Shared listing]). --alone: each rank opens
// with its own share (open_dataset(options)) and lists by itself, as every
// rank did before. Prints one line a rank:
//   rank R of W: open S s, first batch S s (after the process's exec);
//   training split: <its fingerprint: samples, classes, CRCs of names, sizes, ETags>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>

#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/errors.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Seconds since this process was exec'd (LibTorch's loading included):
// /proc/self/stat's starttime (field 22, clock ticks after boot) against
// CLOCK_BOOTTIME; 10 ms resolution.
double seconds_since_exec() {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  std::getline(stat, line);
  std::istringstream fields(line.substr(line.rfind(')') + 2));  // from field 3
  std::string skip;
  for (int field = 3; field < 22; ++field) fields >> skip;
  unsigned long long start_ticks = 0;
  fields >> start_ticks;
  timespec now{};
  clock_gettime(CLOCK_BOOTTIME, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9 -
         static_cast<double>(start_ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DATA_DIR [--alone] [--batch-size B] [--threads T]\n", argv[0]);
    return 2;
  }
  dtrain::DatasetOptions o;
  o.name = "imagefolder";
  o.data_dir = argv[1];
  o.train = dtrain::LoaderOptions().set_batch_size(32).set_threads(2);
  o.test = dtrain::LoaderOptions::evaluation().set_batch_size(32);
  bool alone = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--alone") {
      alone = true;
    } else if (a == "--batch-size") {
      o.train.batch_size = value();
    } else if (a == "--threads") {
      o.train.threads = value();
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  try {
    const char* world = std::getenv("WORLD_SIZE");
    dtrain::ProcessGroup pg =
        world && std::atoi(world) > 1 ? dtrain::init_process_group() : dtrain::ProcessGroup();
    const Clock::time_point open_start = Clock::now();
    dtrain::DatasetSplits s;
    if (alone) {
      o.train.set_rank(pg.rank()).set_world_size(pg.size());
      o.test.set_rank(pg.rank()).set_world_size(pg.size());
      s = dtrain::open_dataset(o);
    } else {
      s = dtrain::open_dataset(o, pg);
    }
    const double open = seconds_since(open_start);
    s.train->start_epoch(0);
    dtrain::Batch b;
    if (!s.train->next(b)) throw dtrain::DataError("the training split gave no batch");
    const double first = seconds_since_exec();
    std::printf("rank %d of %d: open %.2f s, first batch %.2f s; training split: %s\n", pg.rank(),
                pg.size(), open, first, s.train->fingerprint().str().c_str());
    pg.barrier();  // no rank leaves while another still reads its group
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
