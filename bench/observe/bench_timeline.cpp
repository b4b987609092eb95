// The cost of one timeline span, off (null timeline) and on (written to a
// file), and of one TensorBoard scalar. Multiplied by the events of a step
// and divided by the step time it gives the overhead without the noise of
// timing whole steps on a shared machine.
//
//   build/bench/observe/bench_timeline [spans]    prints one JSON object
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <filesystem>

#include "dtrain/summary.h"
#include "dtrain/timeline.h"

namespace {

double ns_per_span(dtrain::Timeline* tl, long n) {
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) dtrain::TimelineSpan s(tl, "forward");
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
             .count() /
         n;
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 1000000;
  const std::string path = "/tmp/dtrain-bench-timeline-" + std::to_string(::getpid()) + ".json";
  double off = 0, on = 0;
  {
    off = ns_per_span(nullptr, n);
    dtrain::Timeline tl(path);
    on = ns_per_span(&tl, n);
  }
  std::remove(path.c_str());
  double scalar = 0;
  {
    const std::string dir = path + ".tb";
    {
      dtrain::SummaryWriter tb(dir);
      const auto start = std::chrono::steady_clock::now();
      for (long i = 0; i < n; ++i) tb.add_scalar("train/loss", 1.0 / (i + 1), i);
      tb.flush();
      scalar = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
                   .count() /
               n;
    }
    std::filesystem::remove_all(dir);
  }
  std::printf(
      "{\"spans\": %ld, \"ns_per_span_off\": %.2f, \"ns_per_span_on\": %.1f, \"ns_per_scalar\": "
      "%.1f}\n",
      n, off, on, scalar);
  return 0;
}
