// dtrain run: torchrun's command line over dtrain::launch().
//
//   dtrain run --nproc-per-node 2 [--nnodes N|MIN:MAX] [--standalone]
//              [--rdzv-backend static|c10d|etcd] [--rdzv-endpoint HOST:PORT]
//              [--rdzv-id ID] [--rdzv-conf K=V,...] [--max-restarts K]
//              [--node-rank R] [--master-addr A] [--master-port P]
//              [--log-dir DIR] [--monitor-interval S] [--ps-servers S]
//              [--ps-worker-per process|node] [--recovery restart|live]
//              [--live-min-workers N] [--live-register-timeout S]
//              [--exit-barrier-timeout S] [--linger-timeout S]
//              [--role ROLE] [--local-addr ADDR] [-r|--redirects 0-3|R:V,...]
//              [-t|--tee 0-3|R:V,...] [--start-method spawn|fork|forkserver]
//              [--no-python | -m|--module | --run-path]
//              -- PROGRAM [ARGS...]
//
// torchrun's spellings are accepted (--nproc_per_node, --master_port, ...), as
// is every flag's PET_* environment variable (PET_NPROC_PER_NODE, ...: the
// flag's name in capitals, '-' as '_'; Kubeflow configures torchrun so). The
// program may also follow the flags without '--'; everything from it on is
// passed through.

#include <torch/cuda.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/option_flags.h"
#include "cli/validators.h"
#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/launch.h"

namespace dtrain::cli {
namespace {

struct RunFlags {
  LaunchOptions options;
  /// torchrun's --nproc-per-node: a number, "auto", "gpu" or "cpu". Checked
  /// when `run` runs: Kubeflow sets PET_NPROC_PER_NODE=auto in every pod, and
  /// CLI11 reads the variable even for `dtrain train`.
  std::string nproc_per_node = "1";
  std::string nnodes = "1";
  double monitor_interval_s = 0.1;
  double exit_barrier_timeout_s = 300;  // LaunchOptions' defaults
  double linger_timeout_s = 60;
  std::string log_dir;
  std::string ps_worker_per = "process";  // LaunchOptions::ps_worker_per
  std::string recovery = "restart";       // LaunchOptions::recovery
  double live_register_timeout_s = 300;
  /// torchrun's; checked when `run` runs (see nproc_per_node), then unused.
  std::string start_method = "spawn";
  bool no_python = false;  // torchrun's program modes, see LaunchOptions::program_mode
  bool module = false;
  bool run_path = false;
  /// Never filled: declared so that CLI11 keeps "--" and what follows for
  /// remaining() instead of handing it back to the root app (see below).
  std::vector<std::string> program;
};

/// CLI11 check: a whole number of at least `min`.
CLI::Validator at_least(long long min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        long long v = 0;
        if (!parse_int(text, &v) || v < min)
          return cat("must be a whole number >= ", min, ", got '", text, "'");
        return "";
      },
      min == 1 ? std::string("POSITIVE") : cat(">=", min));
}

/// The worker command from what CLI11 left over: everything after "--", or
/// everything from the first positional on. A leading "-x" is an unknown flag.
std::vector<std::string> worker_command(std::vector<std::string> rest) {
  if (!rest.empty() && rest.front() == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && !rest.front().empty() && rest.front()[0] == '-') {
    throw CLI::ExtrasError({rest.front()});
  }
  if (rest.empty()) throw CLI::RequiredError("PROGRAM (the worker command, after '--')");
  return rest;
}

/// --nproc-per-node: N >= 1, or torchrun's auto (GPUs when there are any,
/// else CPUs), gpu, cpu.
int parse_nproc(const std::string& text) {
  const int cpus = std::max(1u, std::thread::hardware_concurrency());
  const int gpus = static_cast<int>(torch::cuda::device_count());
  long long n = 0;
  if (text == "cpu") return cpus;
  if (text == "auto") return gpus > 0 ? gpus : cpus;
  if (text == "gpu") {
    if (gpus > 0) return gpus;
    throw CLI::ValidationError("--nproc-per-node", "'gpu': no CUDA device is visible here");
  }
  if (!parse_int(text, &n) || n < 1 || n > 4096) {
    throw CLI::ValidationError(
        "--nproc-per-node",
        cat("must be a whole number >= 1, or auto, gpu, cpu; got '", text, "'"));
  }
  return static_cast<int>(n);
}

/// --nnodes "N" or "MIN:MAX" into min and max.
void parse_nnodes(const std::string& text, int* min_nodes, int* max_nodes) {
  std::vector<std::string> parts = split(text, ':');
  long long lo = 0, hi = 0;
  bool ok = (parts.size() == 1 || parts.size() == 2) && parse_int(parts.front(), &lo) &&
            parse_int(parts.back(), &hi) && lo >= 1 && hi >= lo && hi <= (1 << 20);
  if (!ok) {
    throw CLI::ValidationError("--nnodes",
                               cat("'", text, "' is not N or MIN:MAX with 1 <= MIN <= MAX"));
  }
  *min_nodes = static_cast<int>(lo);
  *max_nodes = static_cast<int>(hi);
}

/// launch()'s result or error, with flags for the LaunchOptions fields it
/// names (a failure another node recorded may name them too).
int run_launcher(const LaunchOptions& options) {
  const FieldFlags& fields = launch_field_flags();
  try {
    LaunchResult result = launch(options);
    for (const auto& line : result.summary()) {
      std::cerr << "dtrain run: " << name_flags(line, fields) << "\n";
    }
    return result.exit_code();
  } catch (const InvalidArgument& e) {
    std::cerr << "dtrain run: error: " << name_flags(first_line(e.what()), fields) << "\n";
    return 2;  // a usage error, like a bad flag
  } catch (const std::exception& e) {
    std::cerr << "dtrain run: error: " << name_flags(first_line(e.what()), fields) << "\n";
    return 1;
  }
}

}  // namespace

void add_run_command(CLI::App& root, int* exit_code) {
  auto flags = std::make_shared<RunFlags>();
  LaunchOptions& o = flags->options;
  CLI::App* cmd = root.add_subcommand(
      "run", "Start worker processes with the torchrun environment and watch them (torchrun)");
  cmd->add_option("--nproc-per-node,--nproc_per_node", flags->nproc_per_node,
                  "Worker processes on this node: N, or auto (one per GPU, else one per CPU), "
                  "gpu, cpu")
      ->envname("PET_NPROC_PER_NODE")
      ->capture_default_str();
  cmd->add_option("--nnodes", flags->nnodes, "Nodes: N, or MIN:MAX for an elastic job")
      ->envname("PET_NNODES")
      ->capture_default_str();
  cmd->add_option("--rdzv-backend,--rdzv_backend", o.rdzv_backend,
                  "Rendezvous: static (fixed --node-rank), c10d (store hosted by the agent on "
                  "the endpoint's host) or etcd")
      ->envname("PET_RDZV_BACKEND")
      ->capture_default_str();
  cmd->add_option("--rdzv-endpoint,--rdzv_endpoint", o.rdzv_endpoint,
                  "HOST:PORT of the rendezvous (c10d store or etcd); the same on every node")
      ->envname("PET_RDZV_ENDPOINT");
  cmd->add_option("--rdzv-conf,--rdzv_conf", o.rdzv_conf,
                  "K=V,... : join_timeout, last_call_timeout, heartbeat_interval, "
                  "missed_heartbeats, timeout, is_host, local_addr, etcd_prefix")
      ->envname("PET_RDZV_CONF");
  cmd->add_option("--max-restarts,--max_restarts", o.max_restarts,
                  "Group restarts after a worker failure before giving up")
      ->check(at_least(0))
      ->envname("PET_MAX_RESTARTS")
      ->capture_default_str();
  cmd->add_option("--node-rank,--node_rank", o.node_rank,
                  "This node's rank (static rendezvous only)")
      ->check(at_least(0))
      ->envname("PET_NODE_RANK")
      ->capture_default_str();
  cmd->add_flag("--standalone", o.standalone,
                "Host the store on 127.0.0.1 at a free port with a generated run id")
      ->envname("PET_STANDALONE");
  cmd->add_option("--master-addr,--master_addr", o.master_addr,
                  "Static rendezvous: node 0's address, where its agent hosts the rendezvous "
                  "store. Workers are not sent here: each round node 0's agent starts a fresh "
                  "store for them on a free port and gives them its address in MASTER_ADDR/"
                  "MASTER_PORT")
      ->envname("PET_MASTER_ADDR")
      ->capture_default_str();
  cmd->add_option("--master-port,--master_port", o.master_port,
                  "Static rendezvous: the port of node 0's rendezvous store (not the "
                  "workers' MASTER_PORT); 0 picks a free one (one node only)")
      ->check(CLI::Range(0, 65535))
      ->envname("PET_MASTER_PORT")
      ->capture_default_str();
  cmd->add_option("--rdzv-id,--rdzv_id,--run-id", o.run_id,
                  "Run id (TORCHELASTIC_RUN_ID); default 'none', generated with --standalone")
      ->envname("PET_RDZV_ID");
  cmd->add_option("--monitor-interval,--monitor_interval", flags->monitor_interval_s,
                  "Seconds between checks of the workers")
      ->check(non_negative())
      ->envname("PET_MONITOR_INTERVAL")
      ->capture_default_str();
  cmd->add_option("--exit-barrier-timeout,--exit_barrier_timeout", flags->exit_barrier_timeout_s,
                  "Seconds a node whose workers succeeded waits for the other nodes to finish "
                  "(torchrun's agent: 300, not a flag there)")
      ->check(non_negative())
      ->envname("PET_EXIT_BARRIER_TIMEOUT")
      ->capture_default_str();
  cmd->add_option("--linger-timeout,--linger_timeout", flags->linger_timeout_s,
                  "Seconds the node hosting the rendezvous store keeps it up after the run "
                  "for the other agents to read its end")
      ->check(non_negative())
      ->envname("PET_LINGER_TIMEOUT")
      ->capture_default_str();
  cmd->add_option("--log-dir,--log_dir", flags->log_dir,
                  "Also write each worker's output and error record to "
                  "DIR/<run id>/attempt_<n>/<local rank>/")
      ->envname("PET_LOG_DIR");
  cmd->add_option("--ps-servers,--ps_servers", o.ps_servers,
                  "Parameter-server job on this node (MXNet's launch.py --launcher local): also "
                  "start a scheduler and S servers running PROGRAM with DMLC_ROLE, "
                  "DMLC_PS_ROOT_URI/PORT, DMLC_NUM_SERVER/WORKER set; 0: none")
      ->check(at_least(0))
      ->envname("PET_PS_SERVERS")
      ->capture_default_str();
  cmd->add_option("--ps-worker-per,--ps_worker_per", flags->ps_worker_per,
                  "With --ps-servers: what DMLC_NUM_WORKER counts and DMLC_WORKER_ID numbers. "
                  "process: every worker process (dist_sync, dist_async); node: one worker per "
                  "node, its rank the node's (dist_device_sync)")
      ->check(CLI::IsMember({"process", "node"}))
      ->envname("PET_PS_WORKER_PER")
      ->capture_default_str();
  cmd->add_option("--recovery", flags->recovery,
                  "What a worker failure costs. restart: stop the group and restart it from the "
                  "last checkpoint (torchrun's); live: the others keep training in-process and "
                  "the failed worker is replaced alone (up to --max-restarts); the program must "
                  "use dtrain/live.h (docs/live_recovery.md)")
      ->check(CLI::IsMember({"restart", "live"}))
      ->envname("PET_RECOVERY")
      ->capture_default_str();
  cmd->add_option("--live-min-workers,--live_min_workers", o.live_min_workers,
                  "With --recovery live: the fewest live workers the job trains with; below "
                  "it the job ends naming the lost ranks")
      ->check(at_least(1))
      ->envname("PET_LIVE_MIN_WORKERS")
      ->capture_default_str();
  cmd->add_option("--live-register-timeout,--live_register_timeout", flags->live_register_timeout_s,
                  "With --recovery live: seconds node 0 waits for a worker to register with "
                  "dtrain/live.h before it ends the run as a program without the per-step API; "
                  "0: not checked")
      ->check(non_negative())
      ->envname("PET_LIVE_REGISTER_TIMEOUT")
      ->capture_default_str();
  cmd->add_option("--role", o.role, "The workers' role (their ROLE_NAME)")
      ->envname("PET_ROLE")
      ->capture_default_str();
  cmd->add_option("--local-addr,--local_addr", o.local_addr,
                  "The address other nodes reach this node at (where they find the workers' "
                  "store when this node hosts it); default: the local address of the route "
                  "to the rendezvous endpoint. Same as --rdzv-conf local_addr=")
      ->envname("PET_LOCAL_ADDR");
  cmd->add_option("-r,--redirects", o.redirects,
                  "Worker streams written to their log files only, not to this terminal: 0 "
                  "none, 1 stdout, 2 stderr, 3 both, or per local rank (0:1,1:2). The files: "
                  "--log-dir, else a new directory under $TMPDIR (its path is printed)")
      ->envname("PET_REDIRECTS")
      ->capture_default_str();
  cmd->add_option("-t,--tee", o.tee,
                  "Worker streams written to their log files and to this terminal (values as "
                  "--redirects); with --log-dir every stream already is")
      ->envname("PET_TEE")
      ->capture_default_str();
  cmd->add_option("--start-method,--start_method", flags->start_method,
                  "Accepted for torchrun's command lines (spawn, fork, forkserver) and "
                  "ignored: workers are always new processes running PROGRAM (fork + exec)")
      ->envname("PET_START_METHOD")
      ->capture_default_str();
  cmd->add_flag("--no-python,--no_python", flags->no_python,
                "Run PROGRAM directly (what dtrain run always does unless -m or --run-path "
                "is given; torchrun's default is python PROGRAM)")
      ->envname("PET_NO_PYTHON");
  cmd->add_flag("-m,--module", flags->module,
                "PROGRAM is a Python module: workers run `python3 -u -m PROGRAM ARGS` "
                "($PYTHON_EXEC instead of python3 when set)")
      ->envname("PET_MODULE");
  cmd->add_flag("--run-path,--run_path", flags->run_path,
                "PROGRAM is a Python file run with runpy.run_path as __main__ "
                "(`python3 -c ...`, $PYTHON_EXEC when set); wins over --no-python")
      ->envname("PET_RUN_PATH");
  // CLI11 (2.1) hands "--" back to the parent app unless a positional is still
  // open; this one rejects every value, so it never consumes an argument and
  // prefix_command() leaves "--" and the program in remaining().
  cmd->add_option("PROGRAM", flags->program, "The worker program and its arguments")
      ->expected(1)
      ->check(CLI::Validator([](std::string&) { return std::string("passed through"); }, "", ""));
  cmd->validate_positionals();
  cmd->prefix_command();

  cmd->callback([cmd, flags, exit_code] {
    LaunchOptions options = flags->options;
    options.nproc_per_node = parse_nproc(flags->nproc_per_node);
    parse_nnodes(flags->nnodes, &options.min_nodes, &options.max_nodes);
    if (flags->start_method != "spawn" && flags->start_method != "fork" &&
        flags->start_method != "forkserver") {
      throw CLI::ValidationError("--start-method", cat("'", flags->start_method,
                                                       "' is not one of spawn, fork, forkserver"));
    }
    options.command = worker_command(cmd->remaining());
    if (flags->run_path) {  // wins over --no-python, as in torchrun
      options.program_mode = LaunchOptions::ProgramMode::kRunPath;
    } else if (flags->module && flags->no_python) {
      throw CLI::ValidationError("--module",
                                 "--no-python and -m/--module cannot be used together (as in "
                                 "torchrun): drop one");
    } else if (flags->module) {
      options.program_mode = LaunchOptions::ProgramMode::kModule;
    }
    const char* python = std::getenv("PYTHON_EXEC");  // torchrun's variable
    if (python != nullptr && *python != '\0') options.python = python;
    options.monitor_interval =
        std::chrono::milliseconds(static_cast<long long>(flags->monitor_interval_s * 1000));
    options.exit_barrier_timeout =
        std::chrono::milliseconds(static_cast<long long>(flags->exit_barrier_timeout_s * 1000));
    options.linger_timeout =
        std::chrono::milliseconds(static_cast<long long>(flags->linger_timeout_s * 1000));
    if (!flags->log_dir.empty()) options.log_dir = flags->log_dir;
    if (flags->recovery == "live") options.recovery = LaunchOptions::Recovery::kLive;
    options.live_register_timeout =
        std::chrono::milliseconds(static_cast<long long>(flags->live_register_timeout_s * 1000));
    if (flags->ps_worker_per == "node") {
      options.ps_worker_per = LaunchOptions::PsWorkerPer::kNode;
    }
    *exit_code = run_launcher(options);
  });
}

}  // namespace dtrain::cli
