// The environment -> options module: the only place where dtrain reads the
// launchers' variables for process-group initialisation.
#include <cstdlib>

#include "common/strings.h"
#include "dtrain/comm.h"
#include "dtrain/errors.h"

extern char** environ;

namespace dtrain {
namespace {

// Reads an integer variable; throws naming it when malformed or out of range.
std::optional<long long> int_var(const EnvLookup& env, const std::string& name, long long lo,
                                 long long hi) {
  auto v = env(name);
  if (!v) return std::nullopt;
  long long x = 0;
  if (!parse_int(*v, &x)) {
    throw InvalidArgument(cat("environment variable ", name, "='", *v, "' is not an integer"));
  }
  if (x < lo || x > hi) {
    throw InvalidArgument(
        cat("environment variable ", name, "=", x, " is outside [", lo, ", ", hi, "]"));
  }
  return x;
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

InitOptions resolve_init_options(InitOptions o, const EnvLookup& env) {
  // PyTorch's variable; a comma-separated list there, Gloo here takes the first.
  if (auto ifname = env("GLOO_SOCKET_IFNAME"); ifname && o.gloo_interface.empty()) {
    o.gloo_interface = split(*ifname, ',').front();
  }
  if (auto lr = int_var(env, "LOCAL_RANK", 0, 1 << 20)) o.local_rank = static_cast<int>(*lr);
  if (auto lw = int_var(env, "LOCAL_WORLD_SIZE", 1, 1 << 20)) {
    o.local_world_size = static_cast<int>(*lw);
  }
  if (o.init_method != "env://") {
    // tcp:// and file:// take rank and size from the caller, or else from the
    // environment, like PyTorch.
    if (o.rank < 0) {
      if (auto r = int_var(env, "RANK", 0, 1 << 30)) o.rank = static_cast<int>(*r);
    }
    if (o.world_size < 0) {
      if (auto w = int_var(env, "WORLD_SIZE", 1, 1 << 30)) o.world_size = static_cast<int>(*w);
    }
    if (o.rank < 0 || o.world_size < 1) {
      throw InvalidArgument(cat("init method '", o.init_method,
                                "' needs an explicit rank and world size (or RANK and WORLD_SIZE)"));
    }
    if (o.rank >= o.world_size) {
      throw InvalidArgument(cat("rank ", o.rank, " is outside [0, world size ", o.world_size, ")"));
    }
    return o;
  }

  static const char* const kVars[] = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::string> set, unset;
  for (const char* name : kVars) (env(name) ? set : unset).emplace_back(name);
  if (set.empty()) {
    o.rank = 0;
    o.world_size = 1;
    return o;  // no distributed environment: a single process
  }
  if (!unset.empty()) {
    throw InvalidArgument(cat(join(set, ", "), set.size() == 1 ? " is" : " are", " set but ",
                              join(unset, ", "), unset.size() == 1 ? " is" : " are",
                              " not; set all of RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT "
                              "(or start the program with 'dtrain run')"));
  }
  o.world_size = static_cast<int>(*int_var(env, "WORLD_SIZE", 1, 1 << 30));
  o.rank = static_cast<int>(*int_var(env, "RANK", 0, 1 << 30));
  if (o.rank >= o.world_size) {
    throw InvalidArgument(
        cat("environment variable RANK=", o.rank, " is not below WORLD_SIZE=", o.world_size));
  }
  const std::string addr = *env("MASTER_ADDR");
  if (addr.empty()) throw InvalidArgument("environment variable MASTER_ADDR is empty");
  const long long port = *int_var(env, "MASTER_PORT", 1, 65535);
  o.init_method = cat("tcp://", addr, ":", port);
  if (auto agent = env("TORCHELASTIC_USE_AGENT_STORE")) {
    o.launcher_hosts_store = *agent == "True" || *agent == "true" || *agent == "1";
  }
  return o;
}

}  // namespace dtrain
