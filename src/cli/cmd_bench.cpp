// `dtrain bench train|ddp|collective|kvstore|scaling`: benchmarks reported like their peers.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/group.h"
#include "cli/option_flags.h"
#include "cli/powersgd_flags.h"
#include "cli/validators.h"
#include "common/strings.h"
#include "dtrain/bench.h"
#include "dtrain/errors.h"
#include "dtrain/kvstore.h"
#include "dtrain/models.h"

namespace dtrain::cli {
namespace {

// Runs `body` with the process group from the environment, its backend
// chosen from --backend and the rank's device (join_group); errors become
// exit codes (2 for bad arguments, 1 otherwise).
int with_bench_group(const char* name, const std::string& backend, const DeviceChoice& device,
                     const std::function<void(const ProcessGroup&)>& body) {
  try {
    ProcessGroup pg = join_group(backend, device);
    body(pg);
    return 0;
  } catch (const InvalidArgument& e) {
    return report_error(cat("dtrain bench ", name),
                        InvalidArgument(name_flags(e.what(), bench_field_flags())), 2);
  } catch (const std::exception& e) {
    return report_error(cat("dtrain bench ", name), e);
  }
}

void print_ddp(const DdpBenchResult& r) {
  std::printf(
      "dtrain bench ddp: model %s, %d rank(s) x batch %lld, %lldx%lld, %d steps\n"
      "  step %.2f ms (p50 %.2f)  images/sec %.1f\n"
      "  forward %.2f ms  backward %.2f ms  optimizer %.2f ms\n"
      "  no_sync step %.2f ms (p50 %.2f)  backward compute %.2f ms\n"
      "  communication %.2f ms (allreduce %.2f, broadcast %.2f)  exposed %.2f ms  hidden %.0f%%"
      "  (reducer's own overlap %.0f%%)\n"
      "  %zu buckets, %.2f MiB of gradients\n",
      r.options.model.c_str(), r.world_size, static_cast<long long>(r.options.batch_size),
      static_cast<long long>(r.options.image_size), static_cast<long long>(r.options.image_size),
      r.options.steps, r.step_ms, r.step_p50_ms, r.images_per_sec, r.forward_ms, r.backward_ms,
      r.optimizer_ms, r.step_nosync_ms, r.step_nosync_p50_ms, r.backward_compute_ms, r.comm_ms,
      r.allreduce_ms, r.broadcast_ms, r.exposed_comm_ms, r.hidden_fraction * 100,
      r.reducer_overlap_fraction * 100, r.bucket_bytes.size(), r.grad_bytes / 1048576.0);
  if (r.wire_tx_bytes_per_step > 0) {
    std::printf("  on the wire per DDP step: %.3f MB sent, %.3f MB received (%s)\n",
                r.wire_tx_bytes_per_step / 1e6, r.wire_rx_bytes_per_step / 1e6,
                r.options.wire_interface.empty() ? "every interface but lo"
                                                 : r.options.wire_interface.c_str());
  }
}

void add_ddp(CLI::App& bench, int* exit_code) {
  struct Flags {
    DdpBenchOptions o;
    CommHookFlags hook;
    std::string backend = "auto";
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = bench.add_subcommand(
      "ddp", "DDP step time, throughput and hidden communication on synthetic data");
  cmd->add_option("--model", f->o.model, "Model: " + join(model_names(), ", "))
      ->capture_default_str();
  cmd->add_option("--batch-size", f->o.batch_size, "Samples per step per process")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--image-size", f->o.image_size, "Input size (0: 28 for cnn, else 32)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--steps", f->o.steps, "Measured steps of each kind")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--warmup", f->o.warmup, "Warm-up steps")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--threads", f->o.threads, "Intra-op threads per process (0: default)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--bucket-cap-mb", f->o.bucket_cap_mb, "DDP bucket size in MiB")
      ->capture_default_str()
      ->check(positive());
  add_comm_hook_flags(cmd, &f->hook);
  cmd->add_flag("--find-unused-parameters", f->o.find_unused_parameters,
                "DDP searches the graph for unused parameters after each forward");
  cmd->add_option("--timeline", f->o.timeline,
                  "Chrome trace per rank (FILE.rank<r>.json, or {rank} in FILE); join with 'dtrain "
                  "timeline merge'");
  cmd->add_option("--interface", f->o.wire_interface,
                  "Interface whose /proc/net/dev bytes give the bytes on the wire per DDP step "
                  "(empty: all but lo; lo on loopback, shared by every rank of the host)");
  add_backend_flag(cmd, f->backend,
                   "Collective backend: auto or gloo (the model runs on the CPU, so nccl is "
                   "refused)");
  cmd->add_flag("--json", f->json, "Print one JSON object (rank 0)");
  cmd->callback([f, exit_code] {
    *exit_code =
        with_bench_group("ddp", f->backend, DeviceChoice::cpu(), [&](const ProcessGroup& pg) {
          f->o.comm_hook = f->hook.name;
          f->o.powersgd = powersgd_options_from_flags(f->hook);
          DdpBenchResult r = run_ddp_bench(f->o, pg);
          if (pg.rank() != 0) return;
          if (f->json) {
            std::cout << to_json(r) << std::endl;
          } else {
            print_ddp(r);
            // Which of allreduce, fp16/bf16, PowerSGD and the PS this link and
            // model favour (Note [Choosing how gradients travel]).
            if (r.world_size > 1 && r.allreduce_ms > 0) {
              const CommChoiceFigures figures = comm_choice_figures(r);
              std::fputs(format_comm_choices(figures, comm_choices(figures)).c_str(), stdout);
            }
          }
        });
  });
}

void add_train(CLI::App& bench, int* exit_code) {
  struct Flags {
    TrainBenchOptions o;
    std::string amp = "none";     // parsed once, into o.train.amp
    std::string device = "auto";  // parsed once, into o.train.device
    CommHookFlags hook;
    std::string kvstore, kvstore_optimizer = "auto";  // parsed into o.train
    std::string backend = "auto";
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  TrainOptions& t = f->o.train;
  CLI::App* cmd = bench.add_subcommand(
      "train",
      "Training throughput of dtrain train's loop on synthetic data, as tf_cnn_benchmarks (total "
      "images/sec)");
  cmd->add_option("--model", t.model, "Model: " + join(model_names(), ", "))->capture_default_str();
  cmd->add_option("--batch-size", t.batch_size, "Samples per step per process")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--image-size", f->o.image_size, "Input size (0: 28 for cnn, else 224)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--num-classes", f->o.num_classes, "Classes of the model's output")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--threads", t.threads, "Intra-op threads per process (0: default)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--amp", f->amp, "Autocast: none, bf16, fp16 (fp16 needs CUDA)")
      ->capture_default_str();
  cmd->add_flag("--channels-last", t.channels_last, "Weights and inputs in channels_last format");
  cmd->add_option("--steps", f->o.steps, "Timed steps")->capture_default_str()->check(positive());
  cmd->add_option("--warmup-steps", f->o.warmup_steps, "Untimed steps first")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--display-every", f->o.display_every, "Progress line every N steps")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--seed", t.seed, "Seed for initialisation and the synthetic data")
      ->capture_default_str();
  add_device_flag(cmd, f->device);
  add_backend_flag(cmd, f->backend);
  cmd->add_option("--bucket-cap-mb", t.ddp.bucket_cap_mb, "DDP bucket size in MiB")
      ->capture_default_str()
      ->check(positive());
  add_comm_hook_flags(cmd, &f->hook);
  cmd->add_option("--tensorboard", t.tensorboard,
                  "TensorBoard directory (rank 0: dtrain train's train/* scalars)");
  cmd->add_option("--tensorboard-every", t.tensorboard_every, "Scalars every N steps")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--timeline", t.timeline,
                  "Chrome trace per rank (FILE.rank<r>.json, or {rank} in FILE)");
  cmd->add_option(
      "--kvstore,--kv-store", f->kvstore,
      "Gradients through a parameter server instead of allreduce: " + kvstore_type_names() +
          " (start with dtrain run --ps-servers S, and for "
          "dist_device_sync --ps-worker-per node; or run this same command in every "
          "process with DMLC_* set, as an MXJob does)");
  cmd->add_option("--kvstore-optimizer", f->kvstore_optimizer,
                  "With --kvstore: worker (servers sum), server (servers run SGD), auto")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "worker", "server"}));
  cmd->add_option("--metrics-port", t.metrics_port,
                  "Serve Prometheus /metrics on P + local rank (0: a free port, printed; -1: off)")
      ->capture_default_str();
  cmd->add_option("--metrics-host", t.metrics_host, "Address the metrics endpoint binds")
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "Print one JSON object at the end (rank 0), after the lines");
  cmd->callback([f, exit_code] {
    try {
      TrainBenchOptions o = f->o;
      o.train.amp = parse_amp_mode(f->amp);
      o.train.device = parse_device_flag(f->device);
      o.train.ddp.comm_hook = comm_hook_from_flags(f->hook, nullptr);
      o.train.kvstore = parse_kvstore_flag(f->kvstore);
      o.train.kvstore_optimizer = parse_kvstore_optimizer_flag(f->kvstore_optimizer);
      // Bad flags (a CUDA device without a GPU among them) fail before the
      // group forms, naming the flag, as in dtrain train.
      validate(train_options_for(o, 1));
      // Note [One route] in src/ps/job/route.cpp, as cmd_train.cpp.
      TrainingRoute route = open_training_route(o.train.kvstore, o.train.kvstore_options,
                                                group_options(f->backend, o.train.device));
      if (route.served) {  // a ps scheduler or server: the job has ended
        *exit_code = 0;
        return;
      }
      const ProcessGroup& pg = route.pg;
      TrainBenchResult r = run_train_bench(
          o, pg,
          [](const std::string& line) {
            std::printf("%s\n", line.c_str());
            std::fflush(stdout);
          },
          route.kv);
      if (pg.rank() == 0 && f->json) std::cout << to_json(r) << std::endl;
      *exit_code = 0;
    } catch (const InvalidArgument& e) {
      *exit_code = report_error("dtrain bench train",
                                InvalidArgument(name_flags(e.what(), train_field_flags())), 2);
    } catch (const std::exception& e) {
      // A runtime error naming a field (a checkpoint's model) names the flag too.
      *exit_code = report_runtime_error("dtrain bench train", e, train_field_flags());
    }
  });
}

void add_collective(CLI::App& bench, int* exit_code) {
  struct Flags {
    CollectiveBenchOptions o;
    std::string min_bytes = "8", max_bytes = "64M";
    // Parsed once, into o.
    std::string op = "allreduce", dtype = "float", redop = "sum";
    int check = 1;
    std::string backend = "auto";
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = bench.add_subcommand(
      "collective", "Collective bandwidth per message size, nccl-tests' flags and table");
  cmd->add_option("collective", f->op, join(collective_bench_ops(), ", "))->capture_default_str();
  cmd->add_option("-b,--minbytes", f->min_bytes, "Smallest size (bytes; K, M, G suffixes)")
      ->capture_default_str();
  cmd->add_option("-e,--maxbytes", f->max_bytes, "Largest size")->capture_default_str();
  cmd->add_option("-f,--stepfactor", f->o.step_factor, "Size multiplier")->capture_default_str();
  cmd->add_option("-n,--iters", f->o.iterations, "Timed iterations per size")
      ->capture_default_str();
  cmd->add_option("-w,--warmup_iters", f->o.warmup, "Warm-up iterations")->capture_default_str();
  cmd->add_option("-c,--check", f->check, "Check results (0/1)")->capture_default_str();
  cmd->add_option("-d,--datatype", f->dtype, "float, double, int32, int64")->capture_default_str();
  cmd->add_option("-o,--op", f->redop, "Reduction: sum, prod, min, max")->capture_default_str();
  cmd->add_option("-r,--root", f->o.root, "Root of broadcast and reduce")->capture_default_str();
  // nccl (auto on a GPU): buffers on cuda:<local rank>; gloo: on the CPU.
  add_backend_flag(cmd, f->backend);
  cmd->callback([f, exit_code] {
    try {
      f->o.min_bytes = parse_byte_size(f->min_bytes);
      f->o.max_bytes = parse_byte_size(f->max_bytes);
      f->o.op = parse_collective_op(f->op);
      f->o.dtype = parse_collective_dtype(f->dtype);
      f->o.redop = parse_collective_reduce_op(f->redop);
    } catch (const InvalidArgument& e) {
      *exit_code = report_error("dtrain bench collective", e, 2);
      return;
    }
    f->o.check = f->check != 0;
    *exit_code = with_bench_group(
        "collective", f->backend, DeviceChoice::automatic(), [&](const ProcessGroup& pg) {
          auto rows = run_collective_bench(f->o, pg);
          if (pg.rank() == 0) {
            std::fputs(format_collective_table(f->o, rows, pg.size(), pg.backend_name()).c_str(),
                       stdout);
            std::fflush(stdout);
          }
          // As nccl-tests, a wrong result fails the run (every rank knows the sum).
          int64_t wrong = 0;
          for (const auto& r : rows)
            wrong +=
                std::max<int64_t>(r.out_of_place.wrong, 0) + std::max<int64_t>(r.in_place.wrong, 0);
          if (wrong > 0)
            throw Error(cat(to_string(f->o.op), ": ", wrong,
                            " result element(s) differ from the expected values"));
        });
  });
}

void add_kvstore(CLI::App& bench, int* exit_code) {
  struct Flags {
    KVStoreBenchOptions o;
    std::string min_bytes = "8", max_bytes = "64M";
    int check = 1;
    double timeout_s = 300;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = bench.add_subcommand(
      "kvstore",
      "Parameter-server push-pull bandwidth and bytes on the wire (a worker of a DMLC_* job; "
      "with DMLC_ROLE=scheduler|server it serves that role)");
  cmd->add_option("-b,--minbytes", f->min_bytes, "Smallest size (bytes; K, M, G suffixes)")
      ->capture_default_str();
  cmd->add_option("-e,--maxbytes", f->max_bytes, "Largest size")->capture_default_str();
  cmd->add_option("-f,--stepfactor", f->o.step_factor, "Size multiplier")->capture_default_str();
  cmd->add_option(
      "--model", f->o.model,
      "Instead of the sweep: one row pushing and pulling every parameter tensor of this model "
      "(one key each): " +
          join(model_names(), ", "));
  cmd->add_option("--num-classes", f->o.num_classes, "Classes of --model")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("-n,--iters", f->o.iterations, "Timed iterations per row")->capture_default_str();
  cmd->add_option("-w,--warmup_iters", f->o.warmup, "Warm-up iterations")->capture_default_str();
  cmd->add_option("-c,--check", f->check, "Check the pulled sums (0/1)")->capture_default_str();
  cmd->add_option("--interface", f->o.interface,
                  "Interface whose /proc/net/dev bytes are counted (empty: all but lo)");
  cmd->add_option("--timeout", f->timeout_s, "Seconds allowed per push-pull, barrier and init")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", f->json, "Print one JSON object (rank 0) after the table");
  cmd->callback([f, exit_code] {
    try {
      f->o.min_bytes = parse_byte_size(f->min_bytes);
      f->o.max_bytes = parse_byte_size(f->max_bytes);
      f->o.check = f->check != 0;
      check_kvstore_bench_options(f->o);  // before waiting for the scheduler
      KVStoreOptions ko;
      ko.timeout = std::chrono::milliseconds(static_cast<long long>(f->timeout_s * 1000));
      // DMLC_ROLE=scheduler or server: create() serves that role, then exit 0.
      KVStoreOpen kv = KVStore::create(KVStoreType::kDistSync, ko);
      if (kv.served()) {
        *exit_code = 0;
        return;
      }
      KVStoreBenchResult r = run_kvstore_bench(f->o, *kv);
      const char* servers_env = std::getenv("DMLC_NUM_SERVER");
      long long servers = 0;
      if (servers_env == nullptr || !parse_int(servers_env, &servers)) servers = 0;
      if (kv->rank() == 0) {
        std::fputs(format_kvstore_table(r, static_cast<int>(servers)).c_str(), stdout);
        if (f->json) std::printf("%s\n", to_json(r, static_cast<int>(servers)).c_str());
        std::fflush(stdout);
      }
      kv->close();
      int64_t wrong = 0;
      for (const auto& row : r.rows) wrong += std::max<int64_t>(row.wrong, 0);
      if (wrong > 0)
        throw Error(cat("pushpull: ", wrong, " pulled element(s) differ from the workers' sum"));
      *exit_code = 0;
    } catch (const InvalidArgument& e) {
      *exit_code = report_error("dtrain bench kvstore", e, 2);
    } catch (const std::exception& e) {
      *exit_code = report_error("dtrain bench kvstore", e);
    }
  });
}

// The last line of `text` holding a JSON object (launcher tags such as
// "[rank0]: " before it are dropped); "" when there is none.
std::string last_json_object(const std::string& text) {
  std::string found;
  for (const std::string& line : split(text, '\n')) {
    const size_t brace = line.find('{');
    if (brace != std::string::npos && line.find("world_size") != std::string::npos)
      found = line.substr(brace);
  }
  return found;
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, n) : "dtrain";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(cat("bench scaling: cannot read '", path, "'; check the path"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void add_scaling(CLI::App& bench, int* exit_code) {
  struct Flags {
    TrainBenchOptions o;
    std::string backend = "auto";
    std::string procs = "1,2";
    std::vector<std::string> from;
    std::string output_dir = "scaling";
    int64_t epoch_samples = 60000;
    int timeout_s = 600;
  };
  auto f = std::make_shared<Flags>();
  f->o.train.model = "cnn";
  f->o.steps = 20;
  f->o.warmup_steps = 3;
  f->o.train.threads = 1;
  CLI::App* cmd = bench.add_subcommand(
      "scaling",
      "Images/sec and epoch time against processes: runs 'bench train' per world size; JSON + SVG");
  cmd->add_option("--model", f->o.train.model, "Model: " + join(model_names(), ", "))
      ->capture_default_str();
  cmd->add_option("--procs", f->procs, "World sizes on this node, comma-separated")
      ->capture_default_str();
  cmd->add_option("--batch-size", f->o.train.batch_size, "Samples per step per process")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--image-size", f->o.image_size, "Input size (0: 28 for cnn, else 224)")
      ->capture_default_str()
      ->check(non_negative());
  cmd->add_option("--steps", f->o.steps, "Measured steps per run")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("--threads", f->o.train.threads, "Intra-op threads per process")
      ->capture_default_str()
      ->check(non_negative());
  add_backend_flag(cmd, f->backend);  // passed on to each 'bench train'
  cmd->add_option("--from", f->from,
                  "'dtrain bench train --json' (or 'bench ddp --json') result files (a cluster's "
                  "runs) instead of running");
  cmd->add_option("--epoch-samples", f->epoch_samples, "Samples per epoch for the epoch-time panel")
      ->capture_default_str()
      ->check(positive());
  cmd->add_option("-o,--output-dir", f->output_dir, "Where scaling.json and scaling.svg go")
      ->capture_default_str();
  cmd->add_option("--timeout", f->timeout_s, "Seconds allowed per run")
      ->capture_default_str()
      ->check(positive());
  cmd->callback([f, exit_code] {
    try {
      std::vector<std::string> results;
      for (const std::string& path : f->from) {
        std::string json = last_json_object(read_text(path));
        if (json.empty())
          throw InvalidArgument(
              cat("bench scaling: '", path,
                  "' holds no 'bench train --json' or 'bench ddp --json' result"));
        results.push_back(json);
      }
      if (f->from.empty()) {
        const std::string self = self_path();
        for (const std::string& p : split(f->procs, ',')) {
          long long n = 0;
          if (!parse_int(p, &n) || n < 1) {
            throw InvalidArgument(
                cat("bench scaling: bad --procs entry '", p, "'; use e.g. 1,2,4"));
          }
          const std::string command =
              cat("timeout -k 5 ", f->timeout_s, " '", self, "' run --nproc-per-node ", n, " -- '",
                  self, "' bench train --json --model ", f->o.train.model, " --batch-size ",
                  f->o.train.batch_size, " --image-size ", f->o.image_size, " --steps ", f->o.steps,
                  " --warmup-steps ", f->o.warmup_steps, " --display-every ", f->o.steps,
                  " --threads ", f->o.train.threads, " --backend '", f->backend, "' 2>&1");
          std::fprintf(stderr, "dtrain bench scaling: %lld process(es)...\n", n);
          std::string out;
          FILE* pipe = ::popen(command.c_str(), "r");
          char buf[4096];
          size_t got = 0;
          while (pipe && (got = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, got);
          const int status = pipe ? ::pclose(pipe) : -1;
          std::string json = last_json_object(out);
          if (status != 0 || json.empty()) {
            throw Error(cat("bench scaling: the run with ", n, " process(es) failed (", command,
                            "): ", first_line(out)));
          }
          results.push_back(json);
        }
      }
      ScalingTable table = scaling_table_from_results(results, f->epoch_samples);
      std::filesystem::create_directories(f->output_dir);
      const std::string json_path = f->output_dir + "/scaling.json";
      const std::string svg_path = f->output_dir + "/scaling.svg";
      std::ofstream(json_path) << to_json(table) << "\n";
      std::ofstream(svg_path) << scaling_svg(table);
      std::printf("# model %s, batch %lld per process\n#%6s %14s %14s %11s %12s\n",
                  table.model.c_str(), static_cast<long long>(table.batch_size), "procs",
                  "images/sec", "ideal", "efficiency", "epoch (s)");
      for (const auto& p : table.points) {
        std::printf(" %6d %14.1f %14.1f %10.0f%% %12.2f\n", p.procs, p.images_per_sec,
                    table.ideal_images_per_sec(p), table.efficiency(p) * 100,
                    table.epoch_seconds(p));
      }
      std::printf("wrote %s and %s\n", json_path.c_str(), svg_path.c_str());
      *exit_code = 0;
    } catch (const InvalidArgument& e) {
      *exit_code = report_error("dtrain bench scaling", e, 2);
    } catch (const std::exception& e) {
      *exit_code = report_error("dtrain bench scaling", e);
    }
  });
}

}  // namespace

void add_bench_command(CLI::App& root, int* exit_code) {
  CLI::App* bench = root.add_subcommand("bench", "Benchmarks (start under 'dtrain run')");
  bench->require_subcommand(1);
  add_train(*bench, exit_code);
  add_ddp(*bench, exit_code);
  add_collective(*bench, exit_code);
  add_kvstore(*bench, exit_code);
  add_scaling(*bench, exit_code);
}

}  // namespace dtrain::cli
