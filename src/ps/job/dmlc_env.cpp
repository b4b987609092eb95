// Note [DMLC variables]
// MXNet's launchers (tools/launch.py), Kubeflow's MXJob and BytePS set the
// same variables in every process of a job: DMLC_ROLE (scheduler | server |
// worker), DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT (where the scheduler
// listens), DMLC_NUM_SERVER, DMLC_NUM_WORKER. Optional: DMLC_NODE_HOST (the
// address this node advertises; wins over DMLC_INTERFACE), DMLC_INTERFACE
// (advertise that interface's IPv4 address), DMLC_WORKER_ID (a worker's
// rank), DMLC_USE_KUBERNETES=1 (the scheduler binds 0.0.0.0, since a pod
// cannot bind its service's address). With neither host variable, a job
// whose scheduler is on loopback advertises 127.0.0.1, otherwise the first
// non-loopback IPv4 interface (ps-lite's choice). ps-lite's
// PS_HEARTBEAT_INTERVAL / PS_HEARTBEAT_TIMEOUT (seconds; interval 0 turns
// heartbeats off) and MXNet's MXNET_KVSTORE_BIGARRAY_BOUND override the
// options. DMLC_PS_SNAPSHOT_DIR (dtrain's) turns server snapshots and node
// recovery on, PS_RECOVERY_TIMEOUT bounds the wait for a replacement (Note
// [Node recovery]), PS_FINALIZE_TIMEOUT the job's end (Note [Final barrier
// deadline]; both seconds, dtrain's). Every malformed or missing variable is
// one InvalidArgument line naming it.
#include "ps/job/dmlc_env.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdlib>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::ps {
namespace {

std::string required(const EnvLookup& env, const std::string& name, const std::string& fix) {
  auto v = env(name);
  if (!v || v->empty()) {
    throw InvalidArgument(
        cat("environment variable ", name, " is ", v ? "empty" : "not set", "; ", fix));
  }
  return *v;
}

long long integer(const std::string& name, const std::string& value, long long lo, long long hi) {
  long long x = 0;
  if (!parse_int(value, &x)) {
    throw InvalidArgument(cat("environment variable ", name, "='", value, "' is not an integer"));
  }
  if (x < lo || x > hi) {
    throw InvalidArgument(
        cat("environment variable ", name, "=", x, " is outside [", lo, ", ", hi, "]"));
  }
  return x;
}

std::optional<long long> optional_int(const EnvLookup& env, const std::string& name, long long lo,
                                      long long hi) {
  auto v = env(name);
  if (!v) return std::nullopt;
  return integer(name, *v, lo, hi);
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::optional<std::string> first_external_address() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (ifaddrs* a = list; a && !found; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
    if (!is_loopback(buf)) found = buf;
  }
  freeifaddrs(list);
  return found;
}

}  // namespace

std::optional<std::string> interface_address(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (ifaddrs* a = list; a && !found; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || name != a->ifa_name) continue;
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
    found = buf;
  }
  freeifaddrs(list);
  return found;
}

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

Role wire_role(PsRole role) {
  switch (role) {
    case PsRole::kScheduler:
      return Role::kScheduler;
    case PsRole::kServer:
      return Role::kServer;
    case PsRole::kWorker:
      break;
  }
  return Role::kWorker;
}

PsRole ps_role_from_env(const EnvLookup& env) {
  const std::string role =
      required(env, "DMLC_ROLE", "set it as MXNet's launch.py or an MXJob does (docs/ps.md)");
  if (role == "scheduler") return PsRole::kScheduler;
  if (role == "server") return PsRole::kServer;
  if (role == "worker") return PsRole::kWorker;
  throw InvalidArgument(
      cat("environment variable DMLC_ROLE='", role, "' is not scheduler, server or worker"));
}

JobConfig job_config_from_env(const KVStoreOptions& base, const EnvLookup& env,
                              std::optional<Role> role) {
  JobConfig c;
  NodeOptions& n = c.node;
  n.heartbeat_interval = base.heartbeat_interval;
  n.heartbeat_timeout = base.heartbeat_timeout;
  n.connect_timeout = base.connect_timeout;
  n.log = base.log;
  n.snapshot_dir = base.snapshot_dir;
  n.recovery_timeout = base.recovery_timeout;
  n.finalize_timeout = base.finalize_timeout;
  c.bigarray_bound = base.bigarray_bound;
  c.partition_bytes = base.partition_bytes;
  n.send_buffer_bytes = base.send_buffer_bytes;

  const std::string launch_fix = "set it as MXNet's launch.py or an MXJob does (docs/ps.md)";
  if (role) {
    n.role = *role;
  } else {
    n.role = wire_role(ps_role_from_env(env));
  }
  n.scheduler_host = required(env, "DMLC_PS_ROOT_URI", launch_fix);
  n.scheduler_port = static_cast<int>(
      integer("DMLC_PS_ROOT_PORT", required(env, "DMLC_PS_ROOT_PORT", launch_fix), 1, 65535));
  n.num_servers = static_cast<int>(
      integer("DMLC_NUM_SERVER", required(env, "DMLC_NUM_SERVER", launch_fix), 0, 1 << 14));
  if (n.num_servers == 0) {
    throw InvalidArgument(
        "environment variable DMLC_NUM_SERVER=0: a dist kvstore needs at least one server "
        "(use the 'local' kvstore for a single process)");
  }
  n.num_workers = static_cast<int>(
      integer("DMLC_NUM_WORKER", required(env, "DMLC_NUM_WORKER", launch_fix), 1, 1 << 14));
  if (auto id = optional_int(env, "DMLC_WORKER_ID", 0, n.num_workers - 1)) {
    n.worker_id = static_cast<int>(*id);
  }
  if (auto k8s = env("DMLC_USE_KUBERNETES")) {
    if (*k8s != "0" && *k8s != "1") {
      throw InvalidArgument(
          cat("environment variable DMLC_USE_KUBERNETES='", *k8s, "' is not 0 or 1"));
    }
    n.bind_any = *k8s == "1";
  }
  if (auto host = env("DMLC_NODE_HOST"); host && !host->empty()) {
    n.host = *host;
  } else if (auto itf = env("DMLC_INTERFACE"); itf && !itf->empty()) {
    auto addr = interface_address(*itf);
    if (!addr) {
      throw InvalidArgument(cat("environment variable DMLC_INTERFACE='", *itf,
                                "' names no network interface with an IPv4 address here; see "
                                "'ip -4 addr' or set DMLC_NODE_HOST"));
    }
    n.host = *addr;
  } else if (is_loopback(n.scheduler_host)) {
    n.host = "127.0.0.1";
  } else {
    n.host = first_external_address().value_or("127.0.0.1");
  }
  if (auto s = optional_int(env, "PS_HEARTBEAT_INTERVAL", 0, 3600)) {
    n.heartbeat_interval = std::chrono::seconds(*s);
  }
  if (auto s = optional_int(env, "PS_HEARTBEAT_TIMEOUT", 1, 86400)) {
    n.heartbeat_timeout = std::chrono::seconds(*s);
  }
  if (auto dir = env("DMLC_PS_SNAPSHOT_DIR"); dir && !dir->empty()) n.snapshot_dir = *dir;
  if (auto s = optional_int(env, "PS_RECOVERY_TIMEOUT", 1, 86400)) {
    n.recovery_timeout = std::chrono::seconds(*s);
  }
  if (auto s = optional_int(env, "PS_FINALIZE_TIMEOUT", 1, 86400)) {
    n.finalize_timeout = std::chrono::seconds(*s);
  }
  if (auto b = optional_int(env, "MXNET_KVSTORE_BIGARRAY_BOUND", 1, 1LL << 40)) {
    c.bigarray_bound = static_cast<size_t>(*b);
  }
  if (auto b = optional_int(env, "DTRAIN_KVSTORE_PARTITION_BYTES", 0, 1LL << 40)) {
    c.partition_bytes = static_cast<size_t>(*b);
  }
  if (auto b = optional_int(env, "DTRAIN_PS_SEND_BUFFER", 0, 1 << 30)) {
    n.send_buffer_bytes = static_cast<int>(*b);
  }
  return c;
}

}  // namespace dtrain::ps
