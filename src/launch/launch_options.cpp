// LaunchOptions as the agent uses them: validated, with the dependent
// defaults resolved in one place, and the rendezvous settings they imply.

#include "launch/launch_options.h"

#include <stdlib.h>

#include <cctype>
#include <filesystem>
#include <random>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "launch/rendezvous/rendezvous.h"

namespace dtrain::detail {
namespace {

/// A random id shaped like torchrun's uuid4 run ids.
std::string generate_run_id() {
  std::random_device rd;
  std::string hex = "0123456789abcdef", id;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) id += '-';
    id += hex[rd() % 16];
  }
  return id;
}

/// Recovery::kLive's preconditions (LaunchOptions::recovery), after
/// min_nodes and max_nodes were checked.
void check_live(const LaunchOptions& o) {
  if (o.live_min_workers < 1) {
    throw InvalidArgument(
        cat("LaunchOptions::live_min_workers must be at least 1, got ", o.live_min_workers));
  }
  const long long workers = static_cast<long long>(o.max_nodes) * o.nproc_per_node;
  if (workers <= o.live_min_workers) {
    throw InvalidArgument(
        cat("LaunchOptions::Recovery::kLive with LaunchOptions::min_nodes:max_nodes ", o.min_nodes,
            ":", o.max_nodes, " x LaunchOptions::nproc_per_node ", o.nproc_per_node, " = ", workers,
            " worker(s) and LaunchOptions::live_min_workers ", o.live_min_workers,
            " has nothing to survive with: add workers "
            "(LaunchOptions::nproc_per_node, LaunchOptions::max_nodes) or use "
            "LaunchOptions::Recovery::kRestart"));
  }
  if (o.ps_servers > 0) {
    throw InvalidArgument(
        "LaunchOptions::Recovery::kLive does not cover a parameter-server job "
        "(LaunchOptions::ps_servers): PS recovery is its own mechanism (DMLC_PS_SNAPSHOT_DIR, "
        "docs/ps.md); drop LaunchOptions::Recovery::kLive");
  }
  if (o.live_register_timeout.count() < 0) {
    throw InvalidArgument("LaunchOptions::live_register_timeout must not be negative");
  }
}

}  // namespace

LaunchOptions resolve_launch_options(const LaunchOptions& options) {
  LaunchOptions o = options;
  if (o.nproc_per_node < 1) {
    throw InvalidArgument(
        cat("LaunchOptions::nproc_per_node must be at least 1, got ", o.nproc_per_node));
  }
  o.command = program_command(o);
  o.program_mode = LaunchOptions::ProgramMode::kExec;
  if (o.stop_grace_period.count() < 0 || o.monitor_interval.count() < 0 ||
      o.exit_barrier_timeout.count() < 0 || o.linger_timeout.count() < 0) {
    throw InvalidArgument(
        "LaunchOptions' stop_grace_period, monitor_interval, exit_barrier_timeout and "
        "linger_timeout must not be negative");
  }
  if (o.standalone) {
    o.master_addr = "127.0.0.1";
    o.master_port = 0;
    o.rdzv_backend = "static";
    o.rdzv_endpoint.clear();
    o.min_nodes = o.max_nodes = 1;
    o.node_rank = 0;
    if (o.run_id.empty()) o.run_id = generate_run_id();
  }
  if (o.run_id.empty()) o.run_id = "none";
  if (o.role.empty())
    throw InvalidArgument("LaunchOptions::role must not be empty (torchrun's: default)");
  std_streams_for(o.redirects, 0, "LaunchOptions::redirects");  // checks the syntax
  std_streams_for(o.tee, 0, "LaunchOptions::tee");
  if (o.master_addr.empty()) throw InvalidArgument("LaunchOptions::master_addr must not be empty");
  if (o.master_port < 0 || o.master_port > 65535) {
    throw InvalidArgument(
        cat("LaunchOptions::master_port ", o.master_port, " is out of range 0-65535"));
  }
  if (o.max_restarts < 0) {
    throw InvalidArgument(
        cat("LaunchOptions::max_restarts must not be negative, got ", o.max_restarts));
  }
  if (o.ps_servers < 0) {
    throw InvalidArgument(
        cat("LaunchOptions::ps_servers must not be negative, got ", o.ps_servers));
  }
  if (o.ps_worker_per == LaunchOptions::PsWorkerPer::kNode && o.ps_servers == 0) {
    throw InvalidArgument(
        "LaunchOptions::PsWorkerPer::kNode sets what a parameter-server job's DMLC_NUM_WORKER "
        "counts: add LaunchOptions::ps_servers > 0, or drop it");
  }
  if (o.ps_servers > 0 && o.max_nodes > 1) {
    throw InvalidArgument(
        cat("LaunchOptions::ps_servers starts a parameter-server job on one node only, not on ",
            o.max_nodes,
            " nodes: run `dtrain ps scheduler|server` and the workers with the DMLC_* variables "
            "on each node (or an MXJob)"));
  }
  if (o.min_nodes < 1 || o.max_nodes < o.min_nodes) {
    throw InvalidArgument(cat("LaunchOptions::min_nodes:max_nodes ", o.min_nodes, ":", o.max_nodes,
                              " is invalid: need 1 <= MIN <= MAX"));
  }
  if (o.recovery == LaunchOptions::Recovery::kLive) check_live(o);
  for (auto& c : o.rdzv_backend) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (o.rdzv_backend == "etcd-v2") o.rdzv_backend = "etcd";
  if (o.rdzv_backend != "static" && o.rdzv_backend != "c10d" && o.rdzv_backend != "etcd") {
    throw InvalidArgument(
        cat("LaunchOptions::rdzv_backend '", o.rdzv_backend, "' is not one of static, c10d, etcd"));
  }
  if (o.rdzv_backend == "static") {
    if (o.min_nodes != o.max_nodes) {
      throw InvalidArgument(cat("LaunchOptions::min_nodes:max_nodes ", o.min_nodes, ":",
                                o.max_nodes,
                                " needs an elastic rendezvous: add LaunchOptions::rdzv_backend "
                                "c10d (or etcd) and LaunchOptions::rdzv_endpoint HOST:PORT"));
    }
    if (o.node_rank < 0 || o.node_rank >= o.max_nodes) {
      throw InvalidArgument(cat("LaunchOptions::node_rank ", o.node_rank, " is outside [0, ",
                                o.max_nodes, ") for LaunchOptions::max_nodes ", o.max_nodes));
    }
    if (o.max_nodes > 1 && o.rdzv_endpoint.empty() && o.master_port == 0) {
      throw InvalidArgument(
          cat("a static run on ", o.max_nodes,
              " nodes needs LaunchOptions::master_addr and LaunchOptions::master_port of "
              "node 0 "
              "(the same on every node)"));
    }
  } else if (o.rdzv_endpoint.empty()) {
    throw InvalidArgument(cat("LaunchOptions::rdzv_backend ", o.rdzv_backend,
                              " needs LaunchOptions::rdzv_endpoint HOST:PORT (the same on every "
                              "node)"));
  }
  return o;
}

RendezvousConfig rendezvous_config(const LaunchOptions& o) {
  RendezvousConfig c;
  c.backend = o.rdzv_backend;
  c.endpoint = o.rdzv_endpoint.empty() ? cat(o.master_addr, ":", o.master_port) : o.rdzv_endpoint;
  c.run_id = o.run_id;
  c.min_nodes = o.min_nodes;
  c.max_nodes = o.max_nodes;
  c.node_rank = o.node_rank;
  c.local_world_size = o.nproc_per_node;
  // Nodes that disagree on it start workers that never meet (live members
  // against a plain DDP group): the rendezvous refuses the round instead.
  c.settings = o.recovery == LaunchOptions::Recovery::kLive ? "LaunchOptions::Recovery::kLive"
                                                            : "LaunchOptions::Recovery::kRestart";
  if (o.rdzv_backend == "static") {
    // Every node of a static job is expected: no last call to wait out.
    c.last_call_timeout = std::chrono::milliseconds(0);
  }
  c.apply_conf(o.rdzv_conf);
  if (!o.local_addr.empty()) {
    if (!c.local_addr.empty() && c.local_addr != o.local_addr) {
      throw InvalidArgument(cat("LaunchOptions::local_addr ", o.local_addr,
                                " and LaunchOptions::rdzv_conf local_addr=", c.local_addr,
                                " disagree: give one of them"));
    }
    c.local_addr = o.local_addr;
  }
  return c;
}

int std_streams_for(const std::string& spec, int local_rank, const std::string& field) {
  auto value = [&](const std::string& text) {
    if (text.size() != 1 || text[0] < '0' || text[0] > '3') {
      throw InvalidArgument(cat(field, " '", spec,
                                "' is not a stream set 0-3 (0 none, 1 stdout, 2 stderr, 3 both) "
                                "or LOCAL_RANK:VALUE pairs such as 0:1,1:2"));
    }
    return text[0] - '0';
  };
  if (spec.find(':') == std::string::npos) return value(spec);
  int streams = 0;
  for (const std::string& item : split(spec, ',')) {
    const size_t colon = item.find(':');
    long long rank = -1;
    if (colon == std::string::npos || !parse_int(item.substr(0, colon), &rank) || rank < 0) {
      value("");  // throws, naming the expected form
    }
    const int v = value(item.substr(colon + 1));
    if (rank == local_rank) streams = v;
  }
  return streams;
}

std::optional<std::string> log_dir_for_streams(const LaunchOptions& o) {
  if (o.log_dir) return o.log_dir;
  bool any = false;
  for (int r = 0; r < o.nproc_per_node && !any; ++r) {
    any = std_streams_for(o.redirects, r, "LaunchOptions::redirects") != 0 ||
          std_streams_for(o.tee, r, "LaunchOptions::tee") != 0;
  }
  if (!any) return std::nullopt;
  namespace fs = std::filesystem;
  std::string pattern = (fs::temp_directory_path() / "dtrain-logs-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) {
    throw Error(
        cat("cannot create a directory for the workers' logs (LaunchOptions::redirects/tee) "
            "under ",
            fs::temp_directory_path().string(), ": set TMPDIR or LaunchOptions::log_dir"));
  }
  return pattern;
}

std::vector<std::string> program_command(const LaunchOptions& o) {
  if (o.command.empty() || o.command[0].empty()) {
    throw InvalidArgument("no program to run: give LaunchOptions::command");
  }
  std::vector<std::string> command;
  if (o.program_mode == LaunchOptions::ProgramMode::kRunPath) {
    // torchrun's run_script_path: sys.argv = [script, args...], then runpy.
    command = {o.python, "-c",
               "import runpy, sys; sys.argv = sys.argv[1:]; "
               "runpy.run_path(sys.argv[0], run_name='__main__')"};
  } else if (o.program_mode == LaunchOptions::ProgramMode::kModule) {
    command = {o.python, "-u", "-m"};
  }
  command.insert(command.end(), o.command.begin(), o.command.end());
  return command;
}

}  // namespace dtrain::detail
