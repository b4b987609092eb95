// `dtrain ps`: run a parameter-server role explicitly (docs/ps.md).
//
//   dtrain ps scheduler [--heartbeat-timeout S] ...   with DMLC_* set
//   dtrain ps server    [--heartbeat-timeout S] [--snapshot-dir DIR] ...
//
// --snapshot-dir (DMLC_PS_SNAPSHOT_DIR wins) turns server snapshots and node
// recovery on (docs/ps.md): a server writes its shard there and a restarted
// server takes a dead one's place; given to the scheduler it waits
// --recovery-timeout for that replacement instead of ending the job.
// --finalize-timeout bounds the job's end (Note [Final barrier deadline]).
// The job comes from DMLC_* (DMLC_ROLE is not needed: the subcommand is the
// role). Exit 0 when the job ends, 1 when a node died or the network
// failed, 2 for bad flags or DMLC_* variables.
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/option_flags.h"
#include "common/strings.h"
#include "dtrain/comm.h"
#include "dtrain/errors.h"
#include "dtrain/kvstore.h"
#include "dtrain/kvstore_torch.h"

namespace dtrain::cli {
namespace {

struct PsFlags {
  double heartbeat_interval = 1.0;
  double heartbeat_timeout = 5.0;
  double connect_timeout = 60.0;
  std::string snapshot_dir;
  double recovery_timeout = 60.0;
  double finalize_timeout = 600.0;
};

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0));
}

int serve(const std::string& role, const PsFlags& f) {
  try {
    KVStoreOptions o;
    o.heartbeat_interval = millis(f.heartbeat_interval);
    o.heartbeat_timeout = millis(f.heartbeat_timeout);
    o.connect_timeout = millis(f.connect_timeout);
    o.snapshot_dir = f.snapshot_dir;
    o.recovery_timeout = millis(f.recovery_timeout);
    o.finalize_timeout = millis(f.finalize_timeout);
    serve_ps_role(role, o);
    return 0;
  } catch (const InvalidArgument& e) {
    return report_error("dtrain ps " + role,
                        InvalidArgument(name_flags(e.what(), ps_field_flags())), 2);
  } catch (const std::exception& e) {
    return report_runtime_error("dtrain ps " + role, e, ps_field_flags());
  }
}

}  // namespace

std::optional<KVStoreType> parse_kvstore_flag(const std::string& text) {
  if (text.empty()) return std::nullopt;
  try {
    return parse_kvstore_type(text);
  } catch (const InvalidArgument&) {
    throw InvalidArgument(
        cat("unknown --kvstore '", text, "'; valid types: ", kvstore_type_names()));
  }
}

KVStoreOptimizer parse_kvstore_optimizer_flag(const std::string& text) {
  try {
    return parse_kvstore_optimizer(text);
  } catch (const InvalidArgument&) {
    throw InvalidArgument(
        cat("--kvstore-optimizer '", text, "' is not one of auto, worker, server"));
  }
}

// Note [One route] in src/ps/job/route.cpp: the store is opened once, here,
// and handed to what uses it.
TrainingRoute open_training_route(std::optional<KVStoreType> kvstore,
                                  const KVStoreOptions& kv_options, const InitOptions& init) {
  TrainingRoute route;
  if (kvstore) {
    // A scheduler or server serves its role here until the job ends.
    KVStoreOpen open = create_kvstore(*kvstore, kv_options);
    if (open.served()) {
      route.served = true;
      return route;
    }
    route.kv = open.take();
  }
  if (init.init_method != "env://") {
    route.pg = init_process_group(init);
  } else if (route.kv && is_dist(*kvstore)) {
    // Only DMLC_* (an MXJob pod): the kvstore's scheduler ranks the workers
    // (Note [Workers' group through the kvstore] in
    // src/ps/device_sync/worker_group.cpp).
    route.pg = kv_process_group(*route.kv, init);
  }
  return route;
}

void add_ps_command(CLI::App& root, int* exit_code) {
  auto f = std::make_shared<PsFlags>();
  CLI::App* ps = root.add_subcommand(
      "ps", "Run a parameter-server scheduler or server of a DMLC_* job (MXNet kvstore, ps-lite)");
  ps->require_subcommand(1);
  for (const char* role : {"scheduler", "server"}) {
    CLI::App* sub =
        ps->add_subcommand(role, std::string("Serve as the job's ") + role + " until the job ends");
    sub->add_option("--heartbeat-interval", f->heartbeat_interval,
                    "Seconds between heartbeats; PS_HEARTBEAT_INTERVAL overrides")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    sub->add_option("--heartbeat-timeout", f->heartbeat_timeout,
                    "Seconds of silence after which a node is dead; PS_HEARTBEAT_TIMEOUT overrides")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    sub->add_option("--connect-timeout", f->connect_timeout,
                    "Seconds to wait for every node to register")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    sub->add_option("--snapshot-dir", f->snapshot_dir,
                    "Server snapshots and node recovery: servers write their shards here and a "
                    "restarted server of a dead one's rank reloads them; DMLC_PS_SNAPSHOT_DIR "
                    "overrides; set it for every process of the job");
    sub->add_option("--recovery-timeout", f->recovery_timeout,
                    "With --snapshot-dir: seconds the scheduler waits for a dead server's "
                    "replacement; PS_RECOVERY_TIMEOUT overrides")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    sub->add_option("--finalize-timeout", f->finalize_timeout,
                    "Scheduler: seconds the job's end waits, after the first worker closed, for "
                    "every other node to close before failing naming them; PS_FINALIZE_TIMEOUT "
                    "overrides; workers bound their own wait by PS_FINALIZE_TIMEOUT (default "
                    "600), so give them at least this value")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    const std::string r = role;
    sub->callback([f, exit_code, r] { *exit_code = serve(r, *f); });
  }
}

}  // namespace dtrain::cli
