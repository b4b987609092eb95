#include "common/error_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "common/fd.h"
#include "common/strings.h"

namespace dtrain::detail {
namespace {

using nlohmann::json;

// Exception texts may carry file names in any encoding; replacing invalid
// UTF-8 keeps dump() from throwing while the process is already failing.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// torchelastic writes the timestamp as a string of whole seconds; accept
// numbers too, as hand-written or future files may use them.
double timestamp_of(const json& v) {
  if (v.is_number()) return v.get<double>();
  double t = 0;
  if (v.is_string() && parse_double(v.get<std::string>(), &t)) return t;
  return 0;
}

template <typename T>
T field_or(const json& object, const char* key, T fallback) {
  auto it = object.find(key);
  if (it == object.end()) return fallback;
  if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->template get<std::string>() : fallback;
  } else {
    // Only a whole number T can hold: nlohmann's get<int>() of 1e78 is a
    // float-to-int conversion out of range (undefined behaviour; found by
    // fuzz/error_file.cpp), and of 2^40 a silent truncation.
    static_assert(std::is_integral_v<T>);
    if (it->is_number_unsigned()) {
      const auto v = it->template get<uint64_t>();
      return v <= static_cast<uint64_t>(std::numeric_limits<T>::max()) ? static_cast<T>(v)
                                                                       : fallback;
    }
    if (it->is_number_integer()) {
      const auto v = it->template get<int64_t>();
      return v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max()
                 ? static_cast<T>(v)
                 : fallback;
    }
    return fallback;
  }
}

// A dtrain-written file: every field is in the "dtrain" object.
ErrorRecord from_dtrain(const json& d, const ErrorRecord& torch_view) {
  ErrorRecord r;
  r.message = field_or<std::string>(d, "message", torch_view.message);
  r.error_type = field_or<std::string>(d, "error_type", "");
  r.rank = field_or<int>(d, "rank", -1);
  r.local_rank = field_or<int>(d, "local_rank", -1);
  r.host = field_or<std::string>(d, "host", "");
  r.pid = field_or<int>(d, "pid", 0);
  r.timestamp = d.contains("timestamp") ? timestamp_of(d["timestamp"]) : torch_view.timestamp;
  return r;
}

// torchelastic's string of whole seconds; "0" for a time no long long holds
// (NaN, infinities, beyond year 292 billion: the cast would be undefined).
std::string whole_seconds(double t) {
  const double floor_t = std::floor(t);
  if (!(floor_t >= -9.2e18 && floor_t <= 9.2e18)) return "0";
  return std::to_string(static_cast<long long>(floor_t));
}

}  // namespace

std::string to_json(const ErrorRecord& r) {
  const std::string torch_message =
      r.error_type.empty() ? r.message : cat(r.error_type, ": ", r.message);
  json j;
  j["message"] = {{"message", torch_message},
                  {"extraInfo", {{"py_callstack", ""}, {"timestamp", whole_seconds(r.timestamp)}}}};
  j["dtrain"] = {{"rank", r.rank},
                 {"local_rank", r.local_rank},
                 {"host", r.host},
                 {"pid", r.pid},
                 {"error_type", r.error_type},
                 {"message", r.message},
                 {"timestamp", r.timestamp}};
  return dump(j);
}

bool write_error_file(const std::string& path, const ErrorRecord& record) {
  if (path.empty()) return false;
  try {
    namespace fs = std::filesystem;
    const fs::path target(path);
    std::error_code ec;
    if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
    // The temporary lives next to the target so rename() stays on one
    // filesystem and is atomic: a launcher never reads half a record.
    const std::string tmp = cat(path, ".tmp.", ::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    const bool written = write_all(fd, to_json(record) + "\n");
    const bool closed = ::close(fd) == 0;
    if (!written || !closed || ::rename(tmp.c_str(), path.c_str()) != 0) {
      ::unlink(tmp.c_str());
      return false;
    }
    return true;
  } catch (...) {
    return false;  // bad_alloc or a filesystem error while already failing
  }
}

std::optional<ErrorRecord> read_error_file(const std::string& path) {
  try {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("message")) return std::nullopt;

    // torchelastic's two shapes (ProcessFailure._get_error_data).
    ErrorRecord torch_view;
    const json& m = j["message"];
    if (m.is_string()) {
      torch_view.message = m.get<std::string>();
      if (j.contains("timestamp")) torch_view.timestamp = timestamp_of(j["timestamp"]);
    } else if (m.is_object()) {
      torch_view.message = field_or<std::string>(m, "message", "");
      if (auto info = m.find("extraInfo"); info != m.end() && info->is_object()) {
        if (info->contains("timestamp")) torch_view.timestamp = timestamp_of((*info)["timestamp"]);
      }
    } else {
      return std::nullopt;
    }
    if (auto d = j.find("dtrain"); d != j.end() && d->is_object())
      return from_dtrain(*d, torch_view);
    return torch_view;
  } catch (...) {
    return std::nullopt;  // a field of the wrong type or out of range
  }
}

}  // namespace dtrain::detail
