// The environment -> options module: the only place where dtrain reads the
// launchers' and schedulers' variables. Everything else takes options.
//
// Note [Which launcher started us]
// A worker can be started by torchrun / `dtrain run` / a PyTorchJob pod
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), by mpirun (OMPI_COMM_WORLD_*),
// by an MPICH or Intel MPI mpiexec (PMI_RANK, PMI_SIZE), or by srun
// (SLURM_PROCID, SLURM_NTASKS). Schedulers leak their variables into
// everything started below them -- a torchrun inside an sbatch script still
// sees SLURM_PROCID, a torchrun under mpirun sees OMPI_* -- so the most
// specific launcher wins: explicit RANK/WORLD_SIZE, then Open MPI, then PMI,
// then Slurm. A family is chosen by its rank (or size) variable; once chosen,
// its other variables are required and a partial set is an error naming
// what is there and what is missing, never a silent fallback to another
// family or to a single process.
//
// MPI and Slurm do not say where a store is, so MASTER_ADDR/MASTER_PORT come
// from the user (mpirun -x ...) and rank 0 hosts the store; under Slurm the
// first host of the job's node list and port 29500 are the defaults. A world
// of one from a scheduler is the single-process group: `srun -n1 dtrain
// train` needs no store and must not bind a port another job may hold.
#include "comm/env.h"

#include <algorithm>
#include <cstdlib>

#include "common/strings.h"
#include "dtrain/comm.h"
#include "dtrain/errors.h"

namespace dtrain {
namespace {

constexpr long long kMaxRanks = 1 << 30;
constexpr int kSlurmDefaultPort = 29500;
// Bounds the expansion of a host list, so a typo like "n[0-999999999]" is an
// error rather than an allocation of gigabytes.
constexpr size_t kMaxHosts = 1 << 20;

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

// "A, B are set but C is not; <advice>".
std::string partial_set(const std::vector<std::string>& set, const std::vector<std::string>& unset,
                        const std::string& advice) {
  return cat(join(set, ", "), set.size() == 1 ? " is" : " are", " set but ", join(unset, ", "),
             unset.size() == 1 ? " is" : " are", " not; ", advice);
}

// Throws the partial-set error unless every one of `names` is set.
void require_all(const EnvLookup& env, const std::vector<std::string>& names,
                 const std::string& advice) {
  std::vector<std::string> set, unset;
  for (const auto& name : names) (env(name) ? set : unset).push_back(name);
  if (!unset.empty()) throw InvalidArgument(partial_set(set, unset, advice));
}

void set_store_address(InitOptions& o, const std::string& addr_var, const std::string& addr,
                       long long port) {
  if (addr.empty()) throw InvalidArgument(cat("environment variable ", addr_var, " is empty"));
  o.init_method = cat("tcp://", addr, ":", port);
}

// torchrun, `dtrain run`, PyTorchJob and hand-made env:// launches.
InitOptions from_torchrun(InitOptions o, const EnvLookup& env) {
  static const std::vector<std::string> kVars = {"RANK", "WORLD_SIZE", "MASTER_ADDR",
                                                 "MASTER_PORT"};
  if (std::none_of(kVars.begin(), kVars.end(), [&](const auto& v) { return env(v).has_value(); })) {
    o.rank = 0;
    o.world_size = 1;
    return o;  // no distributed environment: a single process
  }
  require_all(env, kVars,
              "set all of RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT "
              "(or start the program with 'dtrain run')");
  o.world_size = static_cast<int>(*int_var(env, "WORLD_SIZE", 1, kMaxRanks));
  o.rank = static_cast<int>(*int_var(env, "RANK", 0, kMaxRanks));
  if (o.rank >= o.world_size) {
    throw InvalidArgument(
        cat("environment variable RANK=", o.rank, " is not below WORLD_SIZE=", o.world_size));
  }
  set_store_address(o, "MASTER_ADDR", *env("MASTER_ADDR"), *int_var(env, "MASTER_PORT", 1, 65535));
  if (auto agent = env("TORCHELASTIC_USE_AGENT_STORE")) {
    o.launcher_hosts_store = *agent == "True" || *agent == "true" || *agent == "1";
  }
  return o;
}

// A scheduler that numbers its processes but knows nothing of stores.
struct Scheduler {
  const char* launcher;  // as the user typed it, for messages
  const char* rank_var;
  const char* size_var;
  const char* local_rank_var;
  const char* local_size_var;   // null: derived (Slurm)
  const char* pass_store;       // how to give every rank MASTER_ADDR/MASTER_PORT
  bool store_defaults = false;  // the job's first host and port 29500 (Slurm)
};

const Scheduler kOpenMpi = {"mpirun (Open MPI)",
                            "OMPI_COMM_WORLD_RANK",
                            "OMPI_COMM_WORLD_SIZE",
                            "OMPI_COMM_WORLD_LOCAL_RANK",
                            "OMPI_COMM_WORLD_LOCAL_SIZE",
                            "mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=29500 ..."};
const Scheduler kPmi = {"mpiexec (MPICH, Intel MPI)",
                        "PMI_RANK",
                        "PMI_SIZE",
                        "MPI_LOCALRANKID",
                        "MPI_LOCALNRANKS",
                        "mpiexec -genv MASTER_ADDR <host of rank 0> -genv MASTER_PORT 29500 ..."};
const Scheduler kSlurm = {"srun (Slurm)",
                          "SLURM_PROCID",
                          "SLURM_NTASKS",
                          "SLURM_LOCALID",
                          nullptr,
                          "export MASTER_ADDR=<host of rank 0> MASTER_PORT=29500 before srun",
                          /*store_defaults=*/true};

// Slurm's tasks on this node: SLURM_NTASKS_PER_NODE when the job asked for
// a fixed count, else this node's entry of SLURM_TASKS_PER_NODE.
std::optional<int> slurm_local_size(const EnvLookup& env) {
  if (auto n = int_var(env, "SLURM_NTASKS_PER_NODE", 1, kMaxRanks)) return static_cast<int>(*n);
  auto spec = env("SLURM_TASKS_PER_NODE");
  if (!spec) return std::nullopt;
  std::vector<int> counts;
  try {
    counts = detail::expand_tasks_per_node(*spec);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(cat("environment variable SLURM_TASKS_PER_NODE=", e.what()));
  }
  const long long node = int_var(env, "SLURM_NODEID", 0, kMaxRanks).value_or(0);
  return node < static_cast<long long>(counts.size()) ? counts[node] : counts.front();
}

// MASTER_ADDR, else (Slurm) the first host of the job; MASTER_PORT, else
// (Slurm) 29500. Throws naming what is missing and how to pass it.
void scheduler_store(InitOptions& o, const Scheduler& s, const EnvLookup& env) {
  const bool slurm = s.store_defaults;
  std::optional<std::string> addr = env("MASTER_ADDR");
  std::string addr_var = "MASTER_ADDR";
  if (!addr && slurm) {
    for (const char* list_var : {"SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
      auto list = env(list_var);
      if (!list) continue;
      try {
        addr = detail::expand_nodelist(*list).front();
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(cat("environment variable ", list_var, "=", e.what()));
      }
      addr_var = list_var;
      break;
    }
  }
  std::optional<long long> port = int_var(env, "MASTER_PORT", 1, 65535);
  if (!port && slurm) port = kSlurmDefaultPort;
  std::vector<std::string> missing;
  if (!addr) missing.push_back(slurm ? "MASTER_ADDR (or SLURM_JOB_NODELIST)" : "MASTER_ADDR");
  if (!port) missing.push_back("MASTER_PORT");
  if (!missing.empty()) {
    throw InvalidArgument(
        cat(s.launcher, " started this process (", s.rank_var, "=", o.rank, ", ", s.size_var, "=",
            o.world_size, ") but ", join(missing, ", "), missing.size() == 1 ? " is" : " are",
            " not set; every rank must know where rank 0 hosts the store: ", s.pass_store));
  }
  set_store_address(o, addr_var, *addr, *port);
  o.launcher_hosts_store = false;  // nobody but rank 0 can host it
}

InitOptions from_scheduler(InitOptions o, const Scheduler& s, const EnvLookup& env) {
  require_all(env, {s.rank_var, s.size_var},
              cat("both are set by ", s.launcher, " for every process it starts"));
  o.world_size = static_cast<int>(*int_var(env, s.size_var, 1, kMaxRanks));
  o.rank = static_cast<int>(*int_var(env, s.rank_var, 0, kMaxRanks));
  if (o.rank >= o.world_size) {
    throw InvalidArgument(cat("environment variable ", s.rank_var, "=", o.rank, " is not below ",
                              s.size_var, "=", o.world_size));
  }
  if (auto lr = int_var(env, s.local_rank_var, 0, kMaxRanks)) o.local_rank = static_cast<int>(*lr);
  std::optional<int> local_size;
  if (s.local_size_var) {
    if (auto ls = int_var(env, s.local_size_var, 1, kMaxRanks)) local_size = static_cast<int>(*ls);
  } else {
    local_size = slurm_local_size(env);
  }
  if (local_size) o.local_world_size = *local_size;
  if (o.world_size == 1) return o;  // see Note [Which launcher started us]
  scheduler_store(o, s, env);
  return o;
}

// Lenient integer for error reports: the process is already failing, and a
// malformed RANK has been reported by resolve_init_options if it mattered.
int int_or(const EnvLookup& env, std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names) {
    auto v = env(name);
    long long x = 0;
    if (v && parse_int(*v, &x) && x >= 0 && x <= kMaxRanks) return static_cast<int>(x);
  }
  return fallback;
}

InvalidArgument bad_list(std::string_view list, std::string_view why) {
  return InvalidArgument(cat("'", list, "' is not a Slurm host list: ", why));
}

// Expands one comma-free-at-depth-0 host name with bracket groups.
void expand_host(std::string_view list, std::string_view name, const std::string& prefix,
                 std::vector<std::string>* out) {
  const size_t open = name.find('[');
  if (open == std::string_view::npos) {
    if (name.find(']') != std::string_view::npos) throw bad_list(list, "unmatched ']'");
    if (out->size() >= kMaxHosts) throw bad_list(list, "too many hosts");
    out->push_back(prefix + std::string(name));
    return;
  }
  const size_t close = name.find(']', open);
  if (close == std::string_view::npos) throw bad_list(list, "unclosed '['");
  const std::string head = prefix + std::string(name.substr(0, open));
  const std::string_view rest = name.substr(close + 1);
  const std::string_view inside = name.substr(open + 1, close - open - 1);
  if (inside.empty()) throw bad_list(list, "empty '[]'");
  for (const std::string& range : split(inside, ',')) {
    const size_t dash = range.find('-');
    const std::string lo_text = range.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? lo_text : range.substr(dash + 1);
    long long lo = 0, hi = 0;
    const auto digits = [](const std::string& t) {
      return !t.empty() && t.find_first_not_of("0123456789") == std::string::npos;
    };
    if (!digits(lo_text) || !digits(hi_text) || !parse_int(lo_text, &lo) ||
        !parse_int(hi_text, &hi)) {
      throw bad_list(list, cat("'", range, "' is not a number or a range N-M"));
    }
    if (hi < lo) throw bad_list(list, cat("range '", range, "' is descending"));
    if (static_cast<unsigned long long>(hi - lo) >= kMaxHosts) {
      throw bad_list(list, "too many hosts");
    }
    for (long long i = lo; i <= hi; ++i) {
      std::string number = std::to_string(i);
      if (number.size() < lo_text.size()) number.insert(0, lo_text.size() - number.size(), '0');
      expand_host(list, rest, head + number, out);
    }
  }
}

}  // namespace

namespace detail {

std::vector<std::string> expand_nodelist(std::string_view list) {
  std::vector<std::string> hosts;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    // Commas separate hosts only outside brackets: "n[1,3],m"; the end of
    // the list ends the last host even inside an unclosed bracket.
    const bool end = i == list.size();
    if (!end && list[i] == '[') ++depth;
    if (!end && list[i] == ']') --depth;
    if (!end && (list[i] != ',' || depth > 0)) continue;
    const std::string_view name = list.substr(start, i - start);
    if (name.empty()) throw bad_list(list, "empty host name");
    expand_host(list, name, "", &hosts);
    start = i + 1;
  }
  return hosts;
}

std::vector<int> expand_tasks_per_node(std::string_view spec) {
  std::vector<int> counts;
  for (const std::string& item : split(spec, ',')) {
    // "N" or "N(xM)": N tasks on each of M nodes.
    const size_t paren = item.find("(x");
    long long n = 0, times = 1;
    const bool ok = paren == std::string::npos
                        ? parse_int(item, &n)
                        : item.back() == ')' && parse_int(item.substr(0, paren), &n) &&
                              parse_int(item.substr(paren + 2, item.size() - paren - 3), &times);
    if (!ok || n < 1 || times < 1 || times > static_cast<long long>(kMaxHosts)) {
      throw InvalidArgument(
          cat("'", spec, "' is not a Slurm task count list: '", item, "' is not N or N(xM)"));
    }
    counts.insert(counts.end(), static_cast<size_t>(times), static_cast<int>(n));
  }
  return counts;
}

}  // namespace detail

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
  // Absent (a PyTorchJob pod runs one process): the defaults, rank 0 of 1.
  if (auto lr = int_var(env, "LOCAL_RANK", 0, 1 << 20)) o.local_rank = static_cast<int>(*lr);
  if (auto lw = int_var(env, "LOCAL_WORLD_SIZE", 1, 1 << 20)) {
    o.local_world_size = static_cast<int>(*lw);
  }
  if (o.init_method != "env://") {
    // tcp:// and file:// take rank and size from the caller, or else from the
    // environment, like PyTorch.
    if (o.rank < 0) {
      if (auto r = int_var(env, "RANK", 0, kMaxRanks)) o.rank = static_cast<int>(*r);
    }
    if (o.world_size < 0) {
      if (auto w = int_var(env, "WORLD_SIZE", 1, kMaxRanks)) o.world_size = static_cast<int>(*w);
    }
    if (o.rank < 0 || o.world_size < 1) {
      throw InvalidArgument(
          cat("init method '", o.init_method,
              "' needs an explicit rank and world size (or RANK and WORLD_SIZE)"));
    }
    if (o.rank >= o.world_size) {
      throw InvalidArgument(cat("rank ", o.rank, " is outside [0, world size ", o.world_size, ")"));
    }
    return o;
  }
  // Precedence: Note [Which launcher started us].
  if (env("RANK") || env("WORLD_SIZE")) return from_torchrun(o, env);
  for (const Scheduler* s : {&kOpenMpi, &kPmi}) {
    if (env(s->rank_var) || env(s->size_var)) return from_scheduler(o, *s, env);
  }
  if (env(kSlurm.rank_var)) return from_scheduler(o, kSlurm, env);
  return from_torchrun(o, env);  // a stray MASTER_ADDR is a partial set; nothing: one process
}

ErrorFileOptions resolve_error_file(const EnvLookup& env) {
  ErrorFileOptions o;
  o.path = env("TORCHELASTIC_ERROR_FILE").value_or("");
  // The same precedence as resolve_init_options.
  o.rank = int_or(env, {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, -1);
  o.local_rank = int_or(
      env, {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, -1);
  return o;
}

}  // namespace dtrain
