// The per-rank Prometheus endpoint. See dtrain/metrics.h.
#include "dtrain/metrics.h"

#include <cstdlib>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "observe/nvml.h"
#include "observe/thread_stack.h"

namespace dtrain {

struct MetricsExporter::Impl {
  std::unique_ptr<prometheus::Exposer> exposer;
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::shared_ptr<detail::NvmlCollectable> gpus;
  prometheus::Counter* steps = nullptr;
  prometheus::Counter* samples = nullptr;
  prometheus::Counter* data_wait = nullptr;
  prometheus::Counter* comm = nullptr;
  prometheus::Gauge* loss = nullptr;
  prometheus::Gauge* images_per_second = nullptr;
  prometheus::Gauge* restarts = nullptr;
  prometheus::Gauge* epoch = nullptr;
  prometheus::Counter* recoveries = nullptr;
  prometheus::Gauge* world_size = nullptr;
  prometheus::Histogram* step_seconds = nullptr;
  int port = 0;
};

namespace {

prometheus::Counter& counter(prometheus::Registry& r, const std::string& name,
                             const std::string& help,
                             const std::map<std::string, std::string>& labels) {
  return prometheus::BuildCounter().Name(name).Help(help).Labels(labels).Register(r).Add({});
}

prometheus::Gauge& gauge(prometheus::Registry& r, const std::string& name, const std::string& help,
                         const std::map<std::string, std::string>& labels) {
  return prometheus::BuildGauge().Name(name).Help(help).Labels(labels).Register(r).Add({});
}

}  // namespace

MetricsExporter::MetricsExporter(MetricsOptions o) : impl_(std::make_unique<Impl>()) {
  if (o.port < 0 || o.port > 65535) {
    throw InvalidArgument(
        cat("metrics port ", o.port, " is out of range; pass 0 (a free port) to 65535"));
  }
  const std::map<std::string, std::string> labels = {
      {"rank", std::to_string(o.rank)}, {"node", o.node}, {"run_id", o.run_id}};
  auto& r = *impl_->registry;
  impl_->steps = &counter(r, "dtrain_steps_total", "Training steps completed.", labels);
  impl_->samples = &counter(r, "dtrain_samples_total", "Samples processed by this rank.", labels);
  impl_->data_wait = &counter(r, "dtrain_data_wait_seconds_total",
                              "Time the training loop waited for input batches.", labels);
  impl_->comm = &counter(r, "dtrain_comm_seconds_total",
                         "Communication time not hidden behind computation.", labels);
  impl_->loss = &gauge(r, "dtrain_loss", "Loss of the last step.", labels);
  impl_->images_per_second =
      &gauge(r, "dtrain_images_per_second", "Throughput of this rank.", labels);
  impl_->restarts = &gauge(r, "dtrain_restarts", "Restarts of the worker group so far.", labels);
  impl_->epoch = &gauge(r, "dtrain_epoch", "Current epoch.", labels);
  impl_->recoveries =
      &counter(r, "dtrain_recoveries_total",
               "Live recoveries: generations formed after a loss or a join.", labels);
  impl_->world_size = &gauge(r, "dtrain_world_size", "Workers in the job now.", labels);
  impl_->step_seconds = &prometheus::BuildHistogram()
                             .Name("dtrain_step_seconds")
                             .Help("Duration of a training step.")
                             .Labels(labels)
                             .Register(r)
                             .Add({}, prometheus::Histogram::BucketBoundaries{
                                          0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
  const std::string address = cat(o.host, ":", o.port);
  try {
    impl_->exposer = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& e) {
    // Note [Thread stacks and static TLS]: civetweb's threads fail to start,
    // which it reports as a binding problem, when the program does not use
    // dtrain's pthread_attr_setstacksize and the static TLS is large.
    if (!detail::thread_stacks_leave_room_for_tls() &&
        detail::static_tls_stack_overhead() > 64 * 1024) {
      throw DistError(cat("metrics endpoint ", address, " cannot be served (", first_line(e.what()),
                          "): civetweb's threads cannot fit this process's ",
                          detail::static_tls_stack_overhead(),
                          " bytes of static TLS; link the program with dtrain::dtrain's link "
                          "options, which export pthread_attr_setstacksize"));
    }
    throw InvalidArgument(cat(
        "metrics endpoint ", address, " cannot be served: the port is in use or cannot be bound (",
        first_line(e.what()), "); pass another MetricsOptions::port, or 0 to pick a free one"));
  }
  const std::vector<int> ports = impl_->exposer->GetListeningPorts();
  impl_->port = ports.empty() ? o.port : ports.front();
  impl_->exposer->RegisterCollectable(impl_->registry);
  if (o.gpu_metrics) {
    std::vector<std::pair<std::string, std::string>> l(labels.begin(), labels.end());
    impl_->gpus = std::make_shared<detail::NvmlCollectable>(o.nvml_library, o.gpus, l);
    if (impl_->gpus->device_count() > 0) impl_->exposer->RegisterCollectable(impl_->gpus);
  }
}

MetricsExporter::~MetricsExporter() = default;

int MetricsExporter::port() const { return impl_->port; }

int MetricsExporter::gpu_count() const { return impl_->gpus ? impl_->gpus->device_count() : 0; }

void MetricsExporter::record_step(const StepMetrics& s) {
  impl_->steps->Increment();
  impl_->samples->Increment(static_cast<double>(s.samples));
  impl_->data_wait->Increment(std::max(0.0, s.data_wait_seconds));
  impl_->comm->Increment(std::max(0.0, s.comm_seconds));
  impl_->loss->Set(s.loss);
  impl_->step_seconds->Observe(s.seconds);
}

void MetricsExporter::set_images_per_second(double value) { impl_->images_per_second->Set(value); }

void MetricsExporter::set_restarts(int64_t restarts) {
  impl_->restarts->Set(static_cast<double>(restarts));
}

void MetricsExporter::set_epoch(int64_t epoch) { impl_->epoch->Set(static_cast<double>(epoch)); }

void MetricsExporter::record_recovery(int world_size) {
  impl_->recoveries->Increment();
  impl_->world_size->Set(world_size);
}

void MetricsExporter::set_world_size(int world_size) { impl_->world_size->Set(world_size); }

// Note [GPU of a rank for NVML]
// NVML numbers every GPU of the machine; CUDA numbers the visible ones. With
// CUDA_VISIBLE_DEVICES set, its entry for the CUDA index (an NVML index or a
// GPU-... UUID, both NVML selectors) names the device; without it, the CUDA
// index is taken as the NVML index, which holds under
// CUDA_DEVICE_ORDER=PCI_BUS_ID and on machines of identical GPUs (CUDA's
// default order puts the fastest first). A selector NVML does not know
// yields no readings, never an error.
std::string nvml_selector_for_cuda_device(int cuda_index) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr && *visible != '\0') {
    const std::vector<std::string> entries = split(visible, ',');
    if (cuda_index >= 0 && static_cast<size_t>(cuda_index) < entries.size()) {
      return entries[static_cast<size_t>(cuda_index)];
    }
  }
  return std::to_string(cuda_index);
}

GpuUtilizationReader::GpuUtilizationReader(const std::string& selector,
                                           const std::string& nvml_library)
    : nvml_(std::make_unique<detail::NvmlCollectable>(
          nvml_library, std::vector<std::string>{selector},
          std::vector<std::pair<std::string, std::string>>{})) {}

GpuUtilizationReader::~GpuUtilizationReader() = default;

bool GpuUtilizationReader::available() const { return nvml_->device_count() > 0; }

std::optional<double> GpuUtilizationReader::read() const {
  if (!available()) return std::nullopt;
  for (const prometheus::MetricFamily& f : nvml_->Collect()) {
    if (f.name == "DCGM_FI_DEV_GPU_UTIL" && !f.metric.empty()) return f.metric.front().gauge.value;
  }
  return std::nullopt;
}

}  // namespace dtrain
