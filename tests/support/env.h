#pragma once
// The environment a test hands to code that reads it through an EnvLookup
// (dtrain/comm.h, dtrain/kvstore.h, dtrain/object_store.h): a fixed set of
// variables, every other name unset.

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace dtrain::testing {

inline std::function<std::optional<std::string>(const std::string&)> env_of(
    std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace dtrain::testing
