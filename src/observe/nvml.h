#pragma once
// GPU readings through NVML loaded at run time (no build-time dependency),
// exported under NVIDIA dcgm-exporter's metric names.

#include <memory>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace dtrain::detail {

/// Samples the selected GPUs at every Collect() (each scrape). When the
/// library cannot be loaded, NVML fails to initialise, or a selector names
/// no device, the affected GPUs are simply absent: Collect() returns nothing
/// for them and nothing throws. Thread-safe (NVML is).
class NvmlCollectable : public prometheus::Collectable {
 public:
  /// `selectors`: NVML index, UUID or PCI bus id per GPU; empty: all.
  /// `labels`: added to every series (rank, node, run_id).
  NvmlCollectable(const std::string& library, const std::vector<std::string>& selectors,
                  std::vector<std::pair<std::string, std::string>> labels);
  ~NvmlCollectable() override;

  int device_count() const;
  std::vector<prometheus::MetricFamily> Collect() const override;

  struct Api;

 private:
  std::unique_ptr<Api> api_;
  std::vector<void*> devices_;  // nvmlDevice_t
  std::vector<std::vector<prometheus::ClientMetric::Label>> device_labels_;
};

}  // namespace dtrain::detail
