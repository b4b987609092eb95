// Which way of moving the gradients is fastest for a measured link and model
// (`dtrain bench ddp` prints it).
#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "common/strings.h"
#include "dtrain/bench.h"
#include "dtrain/errors.h"
#include "dtrain/powersgd.h"

namespace dtrain {
namespace {

// Note [Choosing how gradients travel]
// One run of `dtrain bench ddp` measures three things the choice rests on:
// the step with no communication at all (no_sync), the link (the ring
// allreduce of every bucket on its own: one rank's link carries 2(W-1)/W of
// the gradient bytes each way, so bytes over time is what the link moves, as
// nccl-tests' busbw), and how much communication the step hides behind
// backward (what the run's own communication took less what it exposed; when
// it exposed none, at least the backward). Every option is then modelled by
// the bytes its busiest link carries each way per step:
//   allreduce        2(W-1)/W x G (a ring; G the fp32 gradient bytes)
//   fp16/bf16        half of that
//   PowerSGD rank r  2(W-1)/W x 4 x (P and Q of each compressed matrix, the
//                    others whole: powersgd_numel_after_compression)
//   PS, S servers    max(G, W x G / S): a worker pushes G and pulls G, a
//                    server receives and sends W x G / S (issue 20's model:
//                    servers on hosts of their own; with S < W the server
//                    links carry more than a ring's and the PS must lose)
// and its step is compute + max(0, link time + fixed - hideable). It is an
// estimate: PowerSGD's compression compute, its P-then-Q order and its
// accuracy, the servers' CPU and per-message latency are not in it.

double ring_factor(int w) { return 2.0 * (w - 1) / w; }

int64_t grad_numel(const std::vector<std::vector<int64_t>>& shapes) {
  int64_t n = 0;
  for (const auto& s : shapes) {
    int64_t e = 1;
    for (int64_t d : s) e *= d;
    n += e;
  }
  return n;
}

double powersgd_link_bytes(const CommChoiceFigures& f, const PowerSGDOptions& o) {
  return ring_factor(f.world_size) * 4.0 *
         static_cast<double>(powersgd_numel_after_compression(f.grad_shapes, o));
}

CommChoice choice(const CommChoiceFigures& f, std::string name, double link_bytes) {
  CommChoice c;
  c.name = std::move(name);
  c.link_bytes = link_bytes;
  c.comm_ms = link_bytes / f.link_bytes_per_sec * 1000.0 + f.fixed_ms;
  c.step_ms = f.compute_ms + std::max(0.0, c.comm_ms - f.hideable_ms);
  c.images_per_sec = c.step_ms > 0 ? f.world_size * f.batch_size / c.step_ms * 1000.0 : 0;
  return c;
}

// printf into a string, for the table's lines.
__attribute__((format(printf, 1, 2))) std::string line(const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  return buffer;
}

}  // namespace

CommChoiceFigures comm_choice_figures(const DdpBenchResult& r) {
  if (r.world_size < 2 || r.allreduce_ms <= 0 || r.grad_bytes <= 0) {
    throw InvalidArgument(cat("comm_choice_figures: a run of ", r.world_size,
                              " rank(s) measured no link; run bench ddp on 2 or more ranks"));
  }
  CommChoiceFigures f;
  f.world_size = r.world_size;
  f.batch_size = r.options.batch_size;
  f.compute_ms = r.step_nosync_p50_ms;
  f.fixed_ms = r.broadcast_ms;
  f.grad_shapes = r.grad_shapes;
  const double ring_bytes = ring_factor(r.world_size) * static_cast<double>(r.grad_bytes);
  f.link_bytes_per_sec = ring_bytes / (r.allreduce_ms / 1000.0);
  // The run's own hook, in the model's terms.
  double own_bytes = ring_bytes;
  if (r.options.comm_hook == "fp16" || r.options.comm_hook == "bf16") own_bytes /= 2;
  if (r.options.comm_hook == "powersgd") own_bytes = powersgd_link_bytes(f, r.options.powersgd);
  if (r.options.comm_hook == "noop") own_bytes = 0;  // no gradient travels
  const double own_ms = own_bytes / f.link_bytes_per_sec * 1000.0 + f.fixed_ms;
  f.hideable_ms = r.exposed_comm_ms > 0 ? std::max(0.0, own_ms - r.exposed_comm_ms)
                                        : std::max(own_ms, r.backward_compute_ms);
  return f;
}

std::vector<CommChoice> comm_choices(const CommChoiceFigures& f) {
  if (f.world_size < 2 || !(f.link_bytes_per_sec > 0) || f.grad_shapes.empty()) {
    throw InvalidArgument(
        "comm_choices: CommChoiceFigures::world_size must be at least 2, with a positive "
        "link_bytes_per_sec and the gradients' shapes");
  }
  const int w = f.world_size;
  const double g = 4.0 * static_cast<double>(grad_numel(f.grad_shapes));
  const int servers = f.servers > 0 ? f.servers : w;
  std::vector<CommChoice> out;
  out.push_back(choice(f, "allreduce", ring_factor(w) * g));
  out.push_back(choice(f, "fp16/bf16", ring_factor(w) * g / 2));
  for (int64_t rank : f.powersgd_ranks) {
    out.push_back(
        choice(f, cat("powersgd rank ", rank),
               powersgd_link_bytes(f, PowerSGDOptions().set_matrix_approximation_rank(rank))));
  }
  out.push_back(choice(f, cat("ps (", servers, " servers)"),
                       std::max(g, static_cast<double>(w) * g / servers)));
  std::stable_sort(out.begin(), out.end(),
                   [](const CommChoice& a, const CommChoice& b) { return a.step_ms < b.step_ms; });
  return out;
}

std::string format_comm_choices(const CommChoiceFigures& f, const std::vector<CommChoice>& c) {
  std::string s = line(
      "Estimate per way of moving the gradients (modelled from this run, not run each):\n"
      "  link %.3f Gbit/s each way per rank; a step without communication %.2f ms; "
      "%.2f ms of communication hidden behind backward\n",
      f.link_bytes_per_sec * 8 / 1e9, f.compute_ms, f.hideable_ms);
  s += line("  %-20s %14s %10s %10s %10s\n", "way", "MiB/step/link", "comm ms", "step ms",
            "images/s");
  double allreduce = 0;
  for (const CommChoice& x : c) {
    if (x.name == "allreduce") allreduce = x.images_per_sec;
  }
  for (const CommChoice& x : c) {
    s += line("  %-20s %14.3f %10.2f %10.2f %10.1f\n", x.name.c_str(), x.link_bytes / 1048576.0,
              x.comm_ms, x.step_ms, x.images_per_sec);
  }
  s += line("  fastest: %s, an estimated %.2fx allreduce's images/s.\n", c.front().name.c_str(),
            allreduce > 0 ? c.front().images_per_sec / allreduce : 0.0);
  s += "  Not in the estimate: PowerSGD's compression compute and accuracy (measure them with\n"
       "  the powersgd comm hook), the servers' CPU. The PS row has each server on a host of\n"
       "  its own; with fewer servers than workers each server link carries more than a ring's.\n";
  return s;
}

}  // namespace dtrain
