#pragma once
// DMLC_* -> options: the only place the parameter server reads the
// environment (Note [DMLC variables] in env.cpp).

#include <optional>

#include "dtrain/kvstore.h"
#include "ps/membership/node.h"

namespace dtrain::ps {

/// A dist job's configuration from the environment.
struct JobConfig {
  NodeOptions node;
  size_t bigarray_bound = 1000000;
  size_t partition_bytes = 262144;  // KVStoreOptions::partition_bytes
  /// SSP bound for dist_async (KVStoreOptions::staleness); −1: none.
  int staleness = -1;
};

/// Reads DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER,
/// DMLC_NUM_WORKER, DMLC_INTERFACE, DMLC_NODE_HOST, DMLC_WORKER_ID,
/// DMLC_USE_KUBERNETES, DMLC_PS_SNAPSHOT_DIR, PS_HEARTBEAT_INTERVAL,
/// PS_HEARTBEAT_TIMEOUT, PS_RECOVERY_TIMEOUT, PS_FINALIZE_TIMEOUT and
/// MXNET_KVSTORE_BIGARRAY_BOUND over the defaults in `base`; the role is
/// `role`, or ps_role_from_env's when nullopt. Throws InvalidArgument with
/// one line naming the variable, its value and the fix.
JobConfig job_config_from_env(const KVStoreOptions& base, const EnvLookup& env,
                              std::optional<Role> role = std::nullopt);

/// DMLC_ROLE: the only place it is read (resolve_ps_role, Note [One route]
/// in route.cpp). Throws InvalidArgument, one line naming the variable, when
/// it is unset, empty, or not scheduler, server or worker.
PsRole ps_role_from_env(const EnvLookup& env);

/// ps-lite's number for `role` (the wire's Role).
Role wire_role(PsRole role);

/// The real process environment (std::getenv).
EnvLookup process_environment();

/// The IPv4 address of network interface `name`; nullopt when it has none.
std::optional<std::string> interface_address(const std::string& name);

}  // namespace dtrain::ps
