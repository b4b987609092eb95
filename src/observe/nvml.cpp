#include "observe/nvml.h"

#include <dlfcn.h>

#include <cctype>

namespace dtrain::detail {
namespace {

// NVML's C ABI (nvml.h), declared here so nothing is needed at build time.
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
constexpr nvmlReturn_t kSuccess = 0;
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
constexpr int kTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
constexpr int kClockSm = 1;         // NVML_CLOCK_SM

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

struct NvmlCollectable::Api {
  void* handle = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*count)(unsigned int*) = nullptr;
  nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*by_pci)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*index)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int*) = nullptr;

  template <typename F>
  bool load(F& f, const char* symbol) {
    f = reinterpret_cast<F>(::dlsym(handle, symbol));
    return f != nullptr;
  }
  bool open(const std::string& library) {
    handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return false;
    bool ok =
        load(init, "nvmlInit_v2") && load(shutdown, "nvmlShutdown") &&
        load(count, "nvmlDeviceGetCount_v2") && load(by_index, "nvmlDeviceGetHandleByIndex_v2") &&
        load(by_uuid, "nvmlDeviceGetHandleByUUID") &&
        load(by_pci, "nvmlDeviceGetHandleByPciBusId_v2") && load(index, "nvmlDeviceGetIndex") &&
        load(uuid, "nvmlDeviceGetUUID") && load(name, "nvmlDeviceGetName") &&
        load(utilization, "nvmlDeviceGetUtilizationRates") &&
        load(memory, "nvmlDeviceGetMemoryInfo") && load(power, "nvmlDeviceGetPowerUsage") &&
        load(temperature, "nvmlDeviceGetTemperature") && load(clock, "nvmlDeviceGetClockInfo");
    if (!ok || init() != kSuccess) {
      ::dlclose(handle);
      handle = nullptr;
      return false;
    }
    return true;
  }
  ~Api() {
    if (handle != nullptr) {
      shutdown();
      ::dlclose(handle);
    }
  }
};

NvmlCollectable::NvmlCollectable(const std::string& library,
                                 const std::vector<std::string>& selectors,
                                 std::vector<std::pair<std::string, std::string>> labels)
    : api_(std::make_unique<Api>()) {
  if (!api_->open(library)) return;  // no NVML: no GPU series
  std::vector<nvmlDevice_t> found;
  if (selectors.empty()) {
    unsigned int n = 0;
    if (api_->count(&n) != kSuccess) n = 0;
    for (unsigned int i = 0; i < n; ++i) {
      nvmlDevice_t d = nullptr;
      if (api_->by_index(i, &d) == kSuccess) found.push_back(d);
    }
  } else {
    for (const std::string& s : selectors) {
      nvmlDevice_t d = nullptr;
      nvmlReturn_t rc = all_digits(s)             ? api_->by_index(std::stoul(s), &d)
                        : s.rfind("GPU-", 0) == 0 ? api_->by_uuid(s.c_str(), &d)
                                                  : api_->by_pci(s.c_str(), &d);
      if (rc == kSuccess) found.push_back(d);
    }
  }
  for (nvmlDevice_t d : found) {
    unsigned int index = 0;
    char uuid[96] = {}, name[96] = {};
    api_->index(d, &index);
    api_->uuid(d, uuid, sizeof uuid);
    api_->name(d, name, sizeof name);
    // dcgm-exporter's labels, then ours.
    std::vector<prometheus::ClientMetric::Label> l = {{"gpu", std::to_string(index)},
                                                      {"UUID", uuid},
                                                      {"device", "nvidia" + std::to_string(index)},
                                                      {"modelName", name}};
    for (const auto& [k, v] : labels) l.push_back({k, v});
    devices_.push_back(d);
    device_labels_.push_back(std::move(l));
  }
}

NvmlCollectable::~NvmlCollectable() = default;

int NvmlCollectable::device_count() const { return static_cast<int>(devices_.size()); }

std::vector<prometheus::MetricFamily> NvmlCollectable::Collect() const {
  using prometheus::MetricFamily;
  using prometheus::MetricType;
  std::vector<MetricFamily> families = {
      {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", MetricType::Gauge, {}},
      {"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", MetricType::Gauge, {}},
      {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", MetricType::Gauge, {}},
      {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", MetricType::Gauge, {}},
      {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", MetricType::Gauge, {}},
      {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", MetricType::Gauge, {}},
      {"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", MetricType::Gauge, {}},
  };
  if (devices_.empty()) return {};
  auto add = [&](size_t family, size_t device, double value) {
    prometheus::ClientMetric m;
    m.label = device_labels_[device];
    m.gauge.value = value;
    families[family].metric.push_back(std::move(m));
  };
  for (size_t i = 0; i < devices_.size(); ++i) {
    nvmlDevice_t d = devices_[i];
    nvmlUtilization_t u{};
    if (api_->utilization(d, &u) == kSuccess) {
      add(0, i, u.gpu);
      add(1, i, u.memory);
    }
    nvmlMemory_t mem{};
    if (api_->memory(d, &mem) == kSuccess) {
      add(2, i, static_cast<double>(mem.used >> 20));
      add(3, i, static_cast<double>(mem.free >> 20));
    }
    unsigned int v = 0;
    if (api_->power(d, &v) == kSuccess) add(4, i, v / 1000.0);  // mW -> W
    if (api_->temperature(d, kTemperatureGpu, &v) == kSuccess) add(5, i, v);
    if (api_->clock(d, kClockSm, &v) == kSuccess) add(6, i, v);
  }
  std::vector<MetricFamily> out;
  for (auto& f : families) {
    if (!f.metric.empty()) out.push_back(std::move(f));
  }
  return out;
}

}  // namespace dtrain::detail
