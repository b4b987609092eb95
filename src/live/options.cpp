// LiveOptions from the worker's environment, and the words for events.
#include <unistd.h>

#include <iomanip>
#include <sstream>

#include "common/net.h"
#include "common/strings.h"
#include "dtrain/live.h"

namespace dtrain {
namespace {

std::optional<long long> env_int(const EnvLookup& env, const std::string& name, long long min) {
  auto v = env(name);
  if (!v || v->empty()) return std::nullopt;
  long long x = 0;
  if (!parse_int(*v, &x) || x < min) {
    throw InvalidArgument(
        cat(name, "='", *v, "' is not an integer >= ", min, " (live recovery, dtrain/live.h)"));
  }
  return x;
}

}  // namespace

std::string to_string(DetectionCause cause) {
  switch (cause) {
    case DetectionCause::kMissedHeartbeats:
      return "missed heartbeats";
    case DetectionCause::kPeerLost:
      return "peer lost";
    case DetectionCause::kStoreLost:
      return "store lost";
    case DetectionCause::kLeftGeneration:
      return "left generation";
  }
  return "unknown";
}

std::string RecoveryEvent::to_string() const {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2);
  out << "live: " << member << ": generation " << generation << " (step " << step << "): ";
  switch (kind) {
    case Kind::kFormed:
      out << "formed with " << world_size << " workers";
      return out.str();
    case Kind::kFenced:
      out << "fenced itself";
      return out.str();
    case Kind::kLost:
    case Kind::kJoined:
      break;
  }
  std::vector<std::string> parts;
  for (const LostMember& l : lost)
    parts.push_back(cat(l.member, " (", dtrain::to_string(l.cause), ")"));
  if (!parts.empty()) out << "lost " << join(parts, ", ") << "; ";
  if (!joined.empty()) out << "joined " << join(joined, ", ") << "; ";
  if (!redo_reason.empty()) out << "step redone (" << redo_reason << "); ";
  out << world_size << " workers (was " << previous_world_size << "); new group "
      << detect_to_group.count() / 1000.0 << " s after detection";
  if (state_transfer.count() > 0)
    out << ", state sent in " << state_transfer.count() / 1000.0 << " s";
  if (communicator_abort_timed_out) {
    out << ", NCCL abort given up after " << communicator_abort.count() / 1000.0 << " s";
  } else if (communicator_abort.count() > 0) {
    out << ", NCCL abort " << communicator_abort.count() / 1000.0 << " s";
  }
  return out.str();
}

DetectionCause detection_cause_from_string(const std::string& text) {
  for (DetectionCause c : {DetectionCause::kMissedHeartbeats, DetectionCause::kPeerLost,
                           DetectionCause::kStoreLost, DetectionCause::kLeftGeneration}) {
    if (to_string(c) == text) return c;
  }
  return DetectionCause::kPeerLost;
}

bool live_recovery_requested(const EnvLookup& env) {
  auto v = env("DTRAIN_RECOVERY");
  return v && *v == "live";
}

std::vector<int> logical_ranks_of(int index, int live_world, int logical_world) {
  if (live_world < 1 || index < 0 || index >= live_world) {
    throw InvalidArgument(
        cat("logical_ranks_of: index ", index, " outside a live world of ", live_world));
  }
  std::vector<int> out;
  for (int r = index; r < logical_world; r += live_world) out.push_back(r);
  return out;
}

LiveOptions LiveOptions::from_env(const EnvLookup& env) {
  LiveOptions o;
  o.join = env("DTRAIN_LIVE_JOIN").value_or("") == "1";
  auto world = env_int(env, "WORLD_SIZE", 1);
  auto rank = env_int(env, "RANK", 0);
  if (!world && !o.join) {
    throw InvalidArgument(
        "live recovery needs WORLD_SIZE (the number of workers that start the job): start the "
        "program under `dtrain run --recovery live` or set WORLD_SIZE, RANK, MASTER_ADDR and "
        "MASTER_PORT");
  }
  o.initial_world_size = world ? static_cast<int>(*world) : 0;
  o.initial_rank = rank ? static_cast<int>(*rank) : 0;
  if (auto w0 = env_int(env, "DTRAIN_LIVE_LOGICAL_WORLD_SIZE", 1)) {
    o.logical_world_size = static_cast<int>(*w0);
  } else if (world) {
    o.logical_world_size = static_cast<int>(*world);
  }
  if (o.join && o.logical_world_size == 0) {
    throw InvalidArgument(
        "DTRAIN_LIVE_JOIN=1 needs WORLD_SIZE or DTRAIN_LIVE_LOGICAL_WORLD_SIZE (the job's W0)");
  }
  auto addr = env("MASTER_ADDR");
  auto port = env_int(env, "MASTER_PORT", 1);
  if (!addr || addr->empty() || !port) {
    throw InvalidArgument(
        "live recovery needs the store's MASTER_ADDR and MASTER_PORT (set by `dtrain run`)");
  }
  o.store_host = *addr;
  o.store_port = static_cast<int>(*port);
  const std::string agent_store = env("TORCHELASTIC_USE_AGENT_STORE").value_or("");
  o.host_store = !o.join && o.initial_rank == 0 && agent_store != "True" && agent_store != "true" &&
                 agent_store != "1";
  if (auto m = env_int(env, "DTRAIN_LIVE_MIN_WORKERS", 1)) o.min_workers = static_cast<int>(*m);
  if (auto l = env_int(env, "LOCAL_RANK", 0)) o.local_rank = static_cast<int>(*l);
  if (auto m = env("DTRAIN_LIVE_MEMBER"); m && !m->empty()) o.member = *m;
  if (auto p = env("DTRAIN_LIVE_KEY_PREFIX"); p && !p->empty()) o.key_prefix = *p;
  if (auto t = env_int(env, "DTRAIN_LIVE_FAILURE_TIMEOUT_MS", 1)) {
    o.failure_timeout = std::chrono::milliseconds(*t);
  }
  if (auto t = env_int(env, "DTRAIN_LIVE_HEARTBEAT_MS", 1)) {
    o.heartbeat_interval = std::chrono::milliseconds(*t);
  }
  return o;
}

namespace live {

std::string default_member_id() { return cat(detail::host_name(), ":", ::getpid()); }

}  // namespace live
}  // namespace dtrain
