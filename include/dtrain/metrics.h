#pragma once
// A Prometheus endpoint per rank (`dtrain train --metrics-port P` serves
// /metrics on P + local rank), through prometheus-cpp. Every series carries
// the labels rank, node and run_id. Training series (dtrain_*) are updated by
// the training loop; GPU series use NVIDIA dcgm-exporter's names
// (DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED, ...) so existing dashboards
// work, and are read from NVML at each scrape. NVML is loaded at run time
// (dlopen of libnvidia-ml.so.1): without it there are no GPU series and no
// error. See docs/observability.md.
//
/// Example:
/// ```
/// void export_step(int local_rank, int rank, double seconds, double loss) {
///   dtrain::MetricsOptions o;
///   o.port = 9400 + local_rank;  // 0: a free port
///   o.rank = rank;
///   dtrain::MetricsExporter metrics(o);
///   std::printf("metrics on :%d/metrics\n", metrics.port());
///   dtrain::StepMetrics step;
///   step.seconds = seconds;
///   step.samples = 64;
///   step.loss = loss;
///   metrics.record_step(step);
/// }
/// ```
//
// Thread safety: every member may be called from any thread; scrapes are
// served on prometheus-cpp's threads.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/options.h"

namespace dtrain {
namespace detail {
class NvmlCollectable;
}  // namespace detail

struct MetricsOptions {
  /// Port to serve /metrics on; 0 picks a free one (see MetricsExporter::port).
  int port = 0;
  /// Address to bind: all interfaces by default, so Prometheus on another
  /// host can scrape; "127.0.0.1" for this host only.
  std::string host = "0.0.0.0";
  /// Labels of every series.
  int rank = 0;
  std::string node;
  std::string run_id;
  /// GPUs to export, as NVML selectors: an NVML index ("0"), a UUID
  /// ("GPU-8f3..."), or a PCI bus id ("00000000:3B:00.0", the reliable way to
  /// name a CUDA device: NVML numbers devices in PCI order, CUDA may not).
  /// Empty: every device NVML sees.
  std::vector<std::string> gpus;
  /// Read GPUs through NVML at all.
  bool gpu_metrics = true;
  /// Where NVML is looked for (tests point it at a missing library).
  std::string nvml_library = "libnvidia-ml.so.1";

  DTRAIN_SETTER(MetricsOptions, port)
  DTRAIN_SETTER(MetricsOptions, host)
  DTRAIN_SETTER(MetricsOptions, rank)
  DTRAIN_SETTER(MetricsOptions, node)
  DTRAIN_SETTER(MetricsOptions, run_id)
  DTRAIN_SETTER(MetricsOptions, gpus)
  DTRAIN_SETTER(MetricsOptions, gpu_metrics)
  DTRAIN_SETTER(MetricsOptions, nvml_library)
};

/// One training step as the trainer measured it.
struct StepMetrics {
  double seconds = 0;   ///< the whole step
  int64_t samples = 0;  ///< samples this rank processed
  double loss = 0;
  double data_wait_seconds = 0;
  double comm_seconds = 0;  ///< exposed communication time
};

/// Serves one rank's metrics over HTTP for Prometheus.
///
/// Preconditions: host:port is free (port 0 picks a free one); one exporter
/// per port.
class MetricsExporter {
 public:
  /// Binds host:port and starts serving. Throws InvalidArgument naming
  /// host:port and the fix when the port is taken or cannot be bound.
  explicit MetricsExporter(MetricsOptions options);
  ~MetricsExporter();
  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;

  /// The port being served (the one picked when options.port was 0).
  int port() const;
  /// Number of GPUs exported (0 without NVML).
  int gpu_count() const;

  /// dtrain_steps_total, dtrain_samples_total, dtrain_loss,
  /// dtrain_step_seconds (histogram), dtrain_data_wait_seconds_total,
  /// dtrain_comm_seconds_total.
  void record_step(const StepMetrics& step);
  /// dtrain_images_per_second (a window's throughput, as the epoch line shows).
  void set_images_per_second(double value);
  /// dtrain_restarts (TORCHELASTIC_RESTART_COUNT).
  void set_restarts(int64_t restarts);
  /// dtrain_epoch.
  void set_epoch(int64_t epoch);
  /// Live recovery (dtrain/live.h): dtrain_recoveries_total counts the new
  /// generations formed after a loss or to admit a joiner, and
  /// dtrain_world_size is the live workers now.
  void record_recovery(int world_size);
  /// dtrain_world_size alone (at start: the first generation's size).
  void set_world_size(int world_size);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// The NVML selector (MetricsOptions::gpus) of this process's CUDA device
/// `cuda_index`: its entry in CUDA_VISIBLE_DEVICES (an NVML index or a
/// GPU-... UUID) when that is set and has one, else the index itself (which
/// is NVML's under CUDA_DEVICE_ORDER=PCI_BUS_ID and on machines of identical
/// GPUs). Reads the process environment.
std::string nvml_selector_for_cuda_device(int cuda_index);

/// One GPU's utilisation (DCGM_FI_DEV_GPU_UTIL, %) read through NVML at each
/// read(), for a caller that samples it itself (`dtrain train`'s epoch
/// line). Without NVML, or for a selector NVML does not know, read() returns
/// nullopt; nothing throws. Thread-safe.
class GpuUtilizationReader {
 public:
  /// `selector`: as MetricsOptions::gpus (nvml_selector_for_cuda_device).
  explicit GpuUtilizationReader(const std::string& selector,
                                const std::string& nvml_library = "libnvidia-ml.so.1");
  ~GpuUtilizationReader();
  GpuUtilizationReader(const GpuUtilizationReader&) = delete;
  GpuUtilizationReader& operator=(const GpuUtilizationReader&) = delete;

  /// The GPU was found (a read may still fail and return nullopt).
  bool available() const;
  std::optional<double> read() const;

 private:
  std::unique_ptr<detail::NvmlCollectable> nvml_;
};

}  // namespace dtrain
