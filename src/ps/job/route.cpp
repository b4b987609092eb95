// The one route of a parameter-server process: the store type and the
// process's role resolved once, KVStore::create and serve_ps_role.
//
// Note [One route]
// Every decision about what a process is in a kvstore job is taken here,
// once: the type's name is parsed by parse_kvstore_type (the only place the
// names are spelled), the role by resolve_ps_role (DMLC_ROLE, read by
// dmlc_env.cpp's ps_role_from_env, the only reader of that variable), and
// create() then serves the role or opens the worker's store. Callers take
// the results as values: the CLI parses --kvstore into a KVStoreType, opens
// the store once with create_kvstore (dtrain/kvstore_torch.h) and passes it
// to what uses it (kv_process_group, train()); no options struct carries an
// open store.
//
// Note [Serving from create]
// MXNet runs the same program in every pod of a job: mx.kv.create("dist_sync")
// in a process whose DMLC_ROLE is scheduler or server never returns; it
// serves that role and exits the process when the job ends. Kubeflow's MXJob
// and MXNet's launch.py rely on it. dtrain's create() serves the role the
// same way, but a library never ends the process: it returns a KVStoreOpen
// holding RoleServed, and the program ends with status 0 (`if
// (kv.served()) return 0;`; the dtrain CLI does this for `dtrain train|bench
// train|bench kvstore`). A failure of the role is thrown like any other
// error, so the program exits non-zero through its own error path. Programs
// that want control use serve_ps_role() or `dtrain ps scheduler|server`.
#include <cstdlib>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "ps/device_sync/device_sync.h"
#include "ps/job/dmlc_env.h"
#include "ps/job/run_role.h"
#include "ps/server/ssp.h"

namespace dtrain {
namespace {

struct TypeName {
  KVStoreType type;
  const char* name;
};
// The order of the messages and the help.
constexpr TypeName kTypes[] = {{KVStoreType::kLocal, "local"},
                               {KVStoreType::kDistSync, "dist_sync"},
                               {KVStoreType::kDistAsync, "dist_async"},
                               {KVStoreType::kDistDeviceSync, "dist_device_sync"}};

}  // namespace

const char* kvstore_type_name(KVStoreType type) {
  for (const TypeName& t : kTypes) {
    if (t.type == type) return t.name;
  }
  return "?";
}

std::string kvstore_type_names() {
  std::string out;
  for (const TypeName& t : kTypes) out += cat(out.empty() ? "" : ", ", t.name);
  return out;
}

KVStoreType parse_kvstore_type(std::string_view name) {
  for (const TypeName& t : kTypes) {
    if (name == t.name) return t.type;
  }
  throw InvalidArgument(
      cat("unknown kvstore type '", name, "'; valid types: ", kvstore_type_names()));
}

bool is_dist(KVStoreType type) { return type != KVStoreType::kLocal; }

const char* kvstore_optimizer_name(KVStoreOptimizer where) {
  switch (where) {
    case KVStoreOptimizer::kAuto:
      return "auto";
    case KVStoreOptimizer::kWorker:
      return "worker";
    case KVStoreOptimizer::kServer:
      break;
  }
  return "server";
}

KVStoreOptimizer parse_kvstore_optimizer(std::string_view name) {
  for (KVStoreOptimizer w :
       {KVStoreOptimizer::kAuto, KVStoreOptimizer::kWorker, KVStoreOptimizer::kServer}) {
    if (name == kvstore_optimizer_name(w)) return w;
  }
  throw InvalidArgument(cat("kvstore optimizer '", name, "' is not one of auto, worker, server"));
}

const char* ps_role_name(PsRole role) {
  switch (role) {
    case PsRole::kScheduler:
      return "scheduler";
    case PsRole::kServer:
      return "server";
    case PsRole::kWorker:
      break;
  }
  return "worker";
}

PsRole parse_ps_role(std::string_view name) {
  for (PsRole r : {PsRole::kScheduler, PsRole::kServer, PsRole::kWorker}) {
    if (name == ps_role_name(r)) return r;
  }
  throw InvalidArgument(cat("'", name, "' is not a role; use scheduler, server or worker"));
}

PsRole resolve_ps_role(KVStoreType type, const EnvLookup& env) {
  if (!is_dist(type)) return PsRole::kWorker;
  return ps::ps_role_from_env(env ? env : ps::process_environment());
}

KVStoreOpen::KVStoreOpen(std::unique_ptr<KVStore> store)
    : store_(std::move(store)), role_(PsRole::kWorker) {
  if (!store_) throw InvalidArgument("KVStoreOpen: the store is null");
}
KVStoreOpen::KVStoreOpen(RoleServed served) : role_(served.role) {}
KVStoreOpen::KVStoreOpen(KVStoreOpen&&) noexcept = default;
KVStoreOpen& KVStoreOpen::operator=(KVStoreOpen&&) noexcept = default;
KVStoreOpen::~KVStoreOpen() = default;

KVStore& KVStoreOpen::get() const {
  if (!store_) {
    throw InvalidArgument(
        role_ == PsRole::kWorker
            ? std::string("the kvstore was taken out of its KVStoreOpen")
            : cat("this process served the job's ", ps_role_name(role_),
                  " (DMLC_ROLE) and holds no kvstore: end the program when served() is true"));
  }
  return *store_;
}

std::unique_ptr<KVStore> KVStoreOpen::take() {
  get();
  return std::move(store_);
}

uint64_t KVStore::pull_optimizer_state(int key, Values) {
  throw InvalidArgument(cat("pull_optimizer_state of key ", key, ": this ", type(),
                            " kvstore keeps no optimizer state on servers"));
}

void KVStore::push_optimizer_state(int key, ConstValues, uint64_t) {
  throw InvalidArgument(cat("push_optimizer_state of key ", key, ": this ", type(),
                            " kvstore keeps no optimizer state on servers"));
}

KVStoreOpen KVStore::create(const std::string& type, KVStoreOptions options, const EnvLookup& env) {
  return create(parse_kvstore_type(type), std::move(options), env);
}

// Note [One route], Note [Serving from create].
KVStoreOpen KVStore::create(KVStoreType type, KVStoreOptions options, const EnvLookup& env) {
  if (type == KVStoreType::kLocal) return KVStoreOpen(ps::make_local_store(options.timeout));
  const EnvLookup lookup = env ? env : ps::process_environment();
  const PsRole role = resolve_ps_role(type, lookup);
  ps::JobConfig config = ps::job_config_from_env(options, lookup, ps::wire_role(role));
  config.staleness = ps::resolve_staleness(options, lookup);
  switch (role) {
    case PsRole::kScheduler:
      ps::run_scheduler(config.node);
      return KVStoreOpen(RoleServed{role});
    case PsRole::kServer:
      ps::run_server(config.node);
      return KVStoreOpen(RoleServed{role});
    case PsRole::kWorker:
      break;
  }
  ps::check_worker_count(type, lookup);  // Note [Workers per node or per process]
  if (type == KVStoreType::kDistDeviceSync) {
    return KVStoreOpen(ps::make_device_sync_store(config, options.local_group, options.timeout));
  }
  return KVStoreOpen(ps::connect_worker(config, type == KVStoreType::kDistSync, options.timeout));
}

void serve_ps_role(PsRole role, KVStoreOptions options, const EnvLookup& env) {
  if (role == PsRole::kWorker) {
    throw InvalidArgument("'worker' is not a role to serve; use scheduler or server");
  }
  const EnvLookup lookup = env ? env : ps::process_environment();
  const ps::JobConfig config = ps::job_config_from_env(options, lookup, ps::wire_role(role));
  if (role == PsRole::kScheduler) {
    ps::run_scheduler(config.node);
  } else {
    ps::run_server(config.node);
  }
}

void serve_ps_role(const std::string& role, KVStoreOptions options, const EnvLookup& env) {
  if (role != "scheduler" && role != "server") {
    throw InvalidArgument(cat("'", role, "' is not a role to serve; use scheduler or server"));
  }
  serve_ps_role(parse_ps_role(role), std::move(options), env);
}

}  // namespace dtrain
