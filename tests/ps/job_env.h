#pragma once
// The DMLC_* of a one-server, one-worker job on 127.0.0.1:`port` as `role`
// sees them: an EnvLookup for KVStore::create and create_kvstore.

#include <map>
#include <optional>
#include <string>

#include "dtrain/kvstore.h"

namespace dtrain::testing {

inline EnvLookup job_env(const std::string& role, int port) {
  const std::map<std::string, std::string> vars = {
      {"DMLC_ROLE", role},
      {"DMLC_PS_ROOT_URI", "127.0.0.1"},
      {"DMLC_PS_ROOT_PORT", std::to_string(port)},
      {"DMLC_NUM_SERVER", "1"},
      {"DMLC_NUM_WORKER", "1"},
      {"DMLC_NODE_HOST", "127.0.0.1"},
  };
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace dtrain::testing
