// The torchrun worker environment (shared/CONTRACTS.md) and the resolution of
// the launcher's options.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <map>
#include <random>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "launch/agent/worker_env.h"

extern char** environ;

namespace dtrain::detail {
namespace {

/// A random id shaped like torchrun's uuid4 run ids.
std::string generate_run_id() {
  std::random_device rd;
  std::string hex = "0123456789abcdef", id;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) id += '-';
    id += hex[rd() % 16];
  }
  return id;
}

/// `base` with `vars` set: entries with the same names are replaced.
std::vector<std::string> set_variables(const std::vector<std::string>& base,
                                       const std::map<std::string, std::string>& vars) {
  std::vector<std::string> env;
  env.reserve(base.size() + vars.size());
  for (const auto& entry : base) {
    auto eq = entry.find('=');
    if (eq != std::string::npos && vars.count(entry.substr(0, eq))) continue;
    env.push_back(entry);
  }
  for (const auto& [key, value] : vars) env.push_back(cat(key, "=", value));
  return env;
}

}  // namespace

LaunchOptions resolve_launch_options(const LaunchOptions& options) {
  LaunchOptions o = options;
  if (o.nproc_per_node < 1) {
    throw InvalidArgument(cat("nproc_per_node must be at least 1, got ", o.nproc_per_node));
  }
  if (o.command.empty() || o.command[0].empty()) {
    throw InvalidArgument("no program to run: give the worker command after '--'");
  }
  if (o.stop_grace_period.count() < 0 || o.monitor_interval.count() < 0) {
    throw InvalidArgument("stop_grace_period and monitor_interval must not be negative");
  }
  if (o.standalone) {
    o.master_addr = "127.0.0.1";
    o.master_port = 0;
    o.rdzv_backend = "static";
    o.rdzv_endpoint.clear();
    o.min_nodes = o.max_nodes = 1;
    o.node_rank = 0;
    if (o.run_id.empty()) o.run_id = generate_run_id();
  }
  if (o.run_id.empty()) o.run_id = "none";
  if (o.master_addr.empty()) throw InvalidArgument("master_addr must not be empty");
  if (o.master_port < 0 || o.master_port > 65535) {
    throw InvalidArgument(cat("master_port ", o.master_port, " is out of range 0-65535"));
  }
  if (o.max_restarts < 0) {
    throw InvalidArgument(cat("--max-restarts must not be negative, got ", o.max_restarts));
  }
  if (o.ps_servers < 0) {
    throw InvalidArgument(cat("--ps-servers must not be negative, got ", o.ps_servers));
  }
  if (o.ps_servers > 0 && o.max_nodes > 1) {
    throw InvalidArgument(
        cat("--ps-servers starts a parameter-server job on one node only, not on ", o.max_nodes,
            " nodes: run `dtrain ps scheduler|server` and the workers with the DMLC_* variables "
            "on each node (or an MXJob)"));
  }
  if (o.min_nodes < 1 || o.max_nodes < o.min_nodes) {
    throw InvalidArgument(cat("--nnodes ", o.min_nodes, ":", o.max_nodes,
                              " is invalid: need 1 <= MIN <= MAX"));
  }
  for (auto& c : o.rdzv_backend) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (o.rdzv_backend == "etcd-v2") o.rdzv_backend = "etcd";
  if (o.rdzv_backend != "static" && o.rdzv_backend != "c10d" && o.rdzv_backend != "etcd") {
    throw InvalidArgument(cat("--rdzv-backend '", o.rdzv_backend,
                              "' is not one of static, c10d, etcd"));
  }
  if (o.rdzv_backend == "static") {
    if (o.min_nodes != o.max_nodes) {
      throw InvalidArgument(cat("--nnodes ", o.min_nodes, ":", o.max_nodes,
                                " needs an elastic rendezvous: add --rdzv-backend c10d (or etcd) "
                                "and --rdzv-endpoint HOST:PORT"));
    }
    if (o.node_rank < 0 || o.node_rank >= o.max_nodes) {
      throw InvalidArgument(cat("--node-rank ", o.node_rank, " is outside [0, ", o.max_nodes,
                                ") for --nnodes ", o.max_nodes));
    }
    if (o.max_nodes > 1 && o.rdzv_endpoint.empty() && o.master_port == 0) {
      throw InvalidArgument(cat("a static run on ", o.max_nodes,
                                " nodes needs --master-addr and --master-port of node 0 "
                                "(the same on every node)"));
    }
  } else if (o.rdzv_endpoint.empty()) {
    throw InvalidArgument(cat("--rdzv-backend ", o.rdzv_backend,
                              " needs --rdzv-endpoint HOST:PORT (the same on every node)"));
  }
  return o;
}

std::optional<std::string> env_value(const std::vector<std::string>& env, const std::string& key) {
  for (const auto& entry : env) {
    if (entry.size() > key.size() && entry[key.size()] == '=' &&
        entry.compare(0, key.size(), key) == 0) {
      return entry.substr(key.size() + 1);
    }
  }
  return std::nullopt;
}

bool sets_omp_num_threads(const std::vector<std::string>& base, int local_world_size) {
  return local_world_size > 1 && !env_value(base, "OMP_NUM_THREADS");
}

std::vector<std::string> worker_environment(const std::vector<std::string>& base,
                                            const WorkerIdentity& worker, const JobInfo& job) {
  std::map<std::string, std::string> vars = {
      {"RANK", std::to_string(worker.rank)},
      {"LOCAL_RANK", std::to_string(worker.local_rank)},
      {"WORLD_SIZE", std::to_string(worker.world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(worker.local_world_size)},
      {"GROUP_RANK", std::to_string(worker.group_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(worker.group_world_size)},
      {"ROLE_RANK", std::to_string(worker.rank)},
      {"ROLE_WORLD_SIZE", std::to_string(worker.world_size)},
      {"ROLE_NAME", worker.role},
      {"MASTER_ADDR", job.master_addr},
      {"MASTER_PORT", std::to_string(job.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(worker.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(worker.max_restarts)},
      {"TORCHELASTIC_RUN_ID", job.run_id},
      // Workers join the launcher's store as clients instead of rank 0 hosting one.
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
  };
  if (sets_omp_num_threads(base, worker.local_world_size)) vars["OMP_NUM_THREADS"] = "1";
  return set_variables(base, vars);
}

std::vector<std::string> ps_environment(const std::vector<std::string>& base, const PsJob& job,
                                        const std::string& role, int rank) {
  std::map<std::string, std::string> vars = {
      {"DMLC_ROLE", role},
      {"DMLC_PS_ROOT_URI", "127.0.0.1"},
      {"DMLC_PS_ROOT_PORT", std::to_string(job.scheduler_port)},
      {"DMLC_NUM_SERVER", std::to_string(job.num_servers)},
      {"DMLC_NUM_WORKER", std::to_string(job.num_workers)},
  };
  if (role == "worker") vars["DMLC_WORKER_ID"] = std::to_string(rank);
  return set_variables(base, vars);
}

int pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error("cannot create a socket to pick a free port for the ps scheduler");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  if (port < 0) throw Error("cannot bind 127.0.0.1:0 to pick a free port for the ps scheduler");
  return port;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  return env;
}

}  // namespace dtrain::detail
