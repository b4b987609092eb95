// The workers' environment: torchrun's variables (shared/CONTRACTS.md) and,
// in a parameter-server job, MXNet's DMLC_* ones.

#include "launch/agent/worker_env.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "common/strings.h"
#include "dtrain/errors.h"

extern char** environ;

namespace dtrain::detail {

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

std::vector<std::string> live_environment(const std::vector<std::string>& base, int min_workers,
                                          const std::string& member, bool join,
                                          const std::string& key_prefix) {
  std::map<std::string, std::string> vars{{"DTRAIN_RECOVERY", "live"},
                                          {"DTRAIN_LIVE_MIN_WORKERS", std::to_string(min_workers)},
                                          {"DTRAIN_LIVE_MEMBER", member},
                                          {kLiveJoin, join ? "1" : "0"}};
  if (!key_prefix.empty()) vars["DTRAIN_LIVE_KEY_PREFIX"] = key_prefix;
  // Note [NCCL's watchdog under live recovery] (src/live/live_group.cpp):
  // a user's own value is kept (and checked by the LiveGroup).
  const std::string watchdog = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
  const bool user_set = std::any_of(base.begin(), base.end(), [&](const std::string& kv) {
    return kv.rfind(watchdog + "=", 0) == 0;
  });
  if (!user_set) vars[watchdog] = "0";
  return set_variables(base, vars);
}

std::string live_member_id(int rank) {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    return cat("rank", rank, "@localhost");
  }
  return cat("rank", rank, "@", host);
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
