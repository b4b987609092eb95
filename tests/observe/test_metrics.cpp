// The Prometheus endpoint, checked by Prometheus' own tools: promtool's
// linter on the scraped text and a real prometheus server scraping it on
// loopback.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "dtrain/errors.h"
#include "dtrain/metrics.h"
#include "observe/observe_test_util.h"
#include "support/http.h"

extern char** environ;

namespace dtrain {
namespace {

using testing::ObserveTempDir;
using testing::run_command;

using testing::free_port;
using testing::http_get;

MetricsOptions loopback_options() {
  MetricsOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.rank = 3;
  o.node = "node-a";
  o.run_id = "job7";
  return o;
}

void record_two_steps(MetricsExporter& m) {
  m.record_step({0.12, 64, 2.25, 0.01, 0.02});
  m.record_step({0.08, 64, 2.0, 0.01, 0.02});
  m.set_images_per_second(640);
  m.set_epoch(1);
}

TEST(Metrics, PortZeroPicksAFreePortThatServesMetrics) {
  MetricsExporter m(loopback_options());
  ASSERT_GT(m.port(), 0);
  record_two_steps(m);
  const std::string text = http_get(m.port(), "/metrics");
  EXPECT_NE(text.find(R"(dtrain_steps_total{node="node-a",rank="3",run_id="job7"} 2)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(dtrain_samples_total{node="node-a",rank="3",run_id="job7"} 128)"),
            std::string::npos);
  EXPECT_NE(text.find("dtrain_step_seconds_count"), std::string::npos);
}

TEST(Metrics, ScrapedTextPassesPromtoolCheckMetrics) {
  if (!std::filesystem::exists("/usr/bin/promtool"))
    GTEST_SKIP() << "promtool missing (Debian: prometheus)";
  ObserveTempDir dir;
  MetricsExporter m(loopback_options());
  record_two_steps(m);
  { std::ofstream(dir.file("scrape.txt")) << http_get(m.port(), "/metrics"); }
  std::string out;
  const int rc =
      run_command("/usr/bin/promtool check metrics < " + dir.file("scrape.txt") + " 2>&1", &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "") << out;
}

TEST(Metrics, PortInUseIsAnErrorNamingHostPortAndTheHint) {
  MetricsExporter first(loopback_options());
  MetricsOptions o = loopback_options();
  o.port = first.port();
  try {
    MetricsExporter second(o);
    FAIL() << "second exporter bound port " << o.port;
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("127.0.0.1:" + std::to_string(o.port)), std::string::npos) << m;
    EXPECT_NE(m.find("pass another MetricsOptions::port, or 0 to pick a free one"),
              std::string::npos)
        << m;
  }
}

TEST(Metrics, WithoutNvmlThereAreNoGpuSeriesAndNoError) {
  MetricsOptions o = loopback_options();
  o.nvml_library = "libnvidia-ml-absent.so.1";
  MetricsExporter m(o);
  EXPECT_EQ(m.gpu_count(), 0);
  EXPECT_EQ(http_get(m.port(), "/metrics").find("DCGM_FI_DEV"), std::string::npos);
}

TEST(GpuUtilizationReader, WithoutNvmlReadsNothingAndDoesNotThrow) {
  GpuUtilizationReader gpu("0", "libnvidia-ml-absent.so.1");
  EXPECT_FALSE(gpu.available());
  EXPECT_FALSE(gpu.read().has_value());
}

// Note [GPU of a rank for NVML]: the CUDA_VISIBLE_DEVICES entry names the
// device NVML knows; without one the CUDA index is taken as NVML's.
TEST(NvmlSelectorForCudaDevice, IsTheVisibleDevicesEntryElseTheIndex) {
  const char* saved = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string restore = saved != nullptr ? saved : "";
  ::setenv("CUDA_VISIBLE_DEVICES", "3,GPU-8f3a", 1);
  EXPECT_EQ(nvml_selector_for_cuda_device(0), "3");
  EXPECT_EQ(nvml_selector_for_cuda_device(1), "GPU-8f3a");
  EXPECT_EQ(nvml_selector_for_cuda_device(2), "2");
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(nvml_selector_for_cuda_device(1), "1");
  if (saved != nullptr) ::setenv("CUDA_VISIBLE_DEVICES", restore.c_str(), 1);
}

// A real prometheus server on loopback scrapes the endpoint every 500 ms;
// its query API must return the series with our labels. Bounded: 60 s.
TEST(Metrics, ARealPrometheusServerScrapesTheSeries) {
  if (!std::filesystem::exists("/usr/bin/prometheus"))
    GTEST_SKIP() << "prometheus missing (Debian: prometheus)";
  ObserveTempDir dir;
  MetricsExporter m(loopback_options());
  record_two_steps(m);
  const int web = free_port();
  {
    std::ofstream cfg(dir.file("prometheus.yml"));
    cfg << "global:\n  scrape_interval: 500ms\n  evaluation_interval: 1s\n"
        << "scrape_configs:\n  - job_name: dtrain\n    static_configs:\n"
        << "      - targets: ['127.0.0.1:" << m.port() << "']\n";
  }
  std::vector<std::string> args = {
      "/usr/bin/prometheus", "--config.file=" + dir.file("prometheus.yml"),
      "--storage.tsdb.path=" + dir.file("data"),
      "--web.listen-address=127.0.0.1:" + std::to_string(web), "--log.level=error"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  std::string value;
  nlohmann::json series;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && value.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto reply = nlohmann::json::parse(http_get(web, "/api/v1/query?query=dtrain_steps_total"),
                                       nullptr, false);
    if (reply.is_discarded() || reply.value("status", "") != "success") continue;
    const auto& result = reply["data"]["result"];
    if (result.empty()) continue;
    series = result[0]["metric"];
    value = result[0]["value"][1];
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  for (int i = 0; i < 100 && ::waitpid(pid, &status, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (::waitpid(pid, &status, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ASSERT_EQ(value, "2") << "prometheus did not return the series within 60 s";
  EXPECT_EQ(series["rank"], "3");
  EXPECT_EQ(series["node"], "node-a");
  EXPECT_EQ(series["run_id"], "job7");
  EXPECT_EQ(series["job"], "dtrain");
}

}  // namespace
}  // namespace dtrain
