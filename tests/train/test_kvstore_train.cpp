// dtrain::train() with --kvstore: DDP's buckets through a parameter-server
// job (scheduler, servers and workers as threads of this process, on
// loopback) against DDP's allreduce over the same data; resume under a
// kvstore, with the servers' momentum from the checkpoint; bad --kvstore
// values; and `dtrain train|bench train --kvstore` as an MXJob runs them: the
// same command in every process, with only DMLC_*.
#include <ATen/ATen.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "dtrain/checkpoint.h"
#include "dtrain/errors.h"
#include "dtrain/kvstore.h"
#include "dtrain/kvstore_torch.h"
#include "dtrain/models.h"
#include "dtrain/timeline.h"
#include "dtrain/train.h"
#include "dtrain/weights.h"
#include "ps/cluster.h"
#include "ps/processes.h"
#include "support/ranks.h"
#include "support/shell.h"
#include "train/fixtures.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

class KVStoreTraining : public testing::ScratchDir {
 protected:
  void SetUp() override {
    ScratchDir::SetUp();
    // 96 training samples: 6 steps per epoch on two ranks of batch 8.
    testing::write_tiny_dataset(dir_ / "data", 96, 32);
    // Ranks as threads share LibTorch's generator, so a model initialised
    // from the seed differs from run to run: every run starts from this file.
    ModelOptions mo;
    mo.image_size = 12;
    torch::manual_seed(3);
    save_weights(*make_model("cnn", mo), (dir_ / "init.pt").string());
  }

  TrainOptions options(const std::string& ckpt, int64_t epochs) const {
    TrainOptions o;
    o.model = "cnn";
    o.dataset.name = "mnist";
    o.dataset.data_dir = (dir_ / "data").string();
    o.epochs = epochs;
    o.batch_size = 8;
    o.eval_batch_size = 32;
    o.optimizer.lr = 0.05;
    o.optimizer.momentum = 0.9;
    o.threads = 1;
    o.device = DeviceChoice::cpu();
    o.checkpoint_dir = (dir_ / ckpt).string();
    o.init_weights = (dir_ / "init.pt").string();
    o.progress = TrainOptions::Progress::kNone;
    return o;
  }

  // Trains on `world` ranks (threads) with DDP's allreduce, or with
  // `o.kvstore` through a job of a scheduler and `servers` servers (threads);
  // returns rank 0's log.
  std::string run(TrainOptions o, int world, int servers = 0) {
    std::ostringstream log;
    const int port = testing::free_port();
    // dist_device_sync: the ranks are one node's processes, one PS worker.
    const bool device_sync = o.kvstore == KVStoreType::kDistDeviceSync;
    auto env_for = [&](const std::string& role, int rank) -> EnvLookup {
      std::map<std::string, std::string> vars = {
          {"DMLC_ROLE", role},
          {"DMLC_PS_ROOT_URI", "127.0.0.1"},
          {"DMLC_PS_ROOT_PORT", std::to_string(port)},
          {"DMLC_NUM_SERVER", std::to_string(servers)},
          {"DMLC_NUM_WORKER", std::to_string(device_sync ? 1 : world)},
          {"DMLC_NODE_HOST", "127.0.0.1"},
      };
      if (role == "worker") vars["DMLC_WORKER_ID"] = std::to_string(device_sync ? 0 : rank);
      return [vars](const std::string& name) -> std::optional<std::string> {
        auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
      };
    };
    KVStoreOptions ko = o.kvstore_options;  // a test's bigarray_bound stays
    ko.timeout = std::chrono::seconds(60);
    ko.connect_timeout = std::chrono::seconds(30);
    ko.log = [](const std::string&) {};
    o.kvstore_options = ko;

    const bool ps = o.kvstore.has_value();
    std::vector<std::exception_ptr> errors(ps ? 1 + servers : 0);
    std::vector<std::thread> nodes;
    for (int r = -1; ps && r < servers; ++r) {
      nodes.emplace_back([&, r] {
        try {
          serve_ps_role(r < 0 ? "scheduler" : "server", ko,
                        env_for(r < 0 ? "scheduler" : "server", std::max(r, 0)));
        } catch (...) {
          errors[1 + r] = std::current_exception();
        }
      });
    }
    std::exception_ptr workers;
    try {
      testing::run_ranks(
          world,
          [&](const ProcessGroup& pg) {
            TrainOptions mine = o;
            if (ps) mine.kvstore_env = env_for("worker", pg.rank());
            if (device_sync) mine.kvstore_options.local_group = kv_local_group(pg);
            train(mine, pg, pg.rank() == 0 ? &log : nullptr);
          },
          std::chrono::seconds(120));
    } catch (...) {
      workers = std::current_exception();
    }
    for (auto& t : nodes) t.join();  // bounded by failure detection
    if (workers) std::rethrow_exception(workers);
    for (auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
    return log.str();
  }

  Checkpoint latest(const std::string& ckpt) const {
    auto found = load_latest_checkpoint((dir_ / ckpt).string());
    if (!found) throw Error("no checkpoint in " + ckpt);
    return found->checkpoint;
  }

  // Removes checkpoints after `step`, as if the run had died right after it.
  void crash_after(const std::string& ckpt, int64_t step) const {
    for (const std::string& p : list_checkpoints((dir_ / ckpt).string())) {
      const std::string name = fs::path(p).filename().string();  // checkpoint-00000012.pt
      if (std::stoll(name.substr(11, name.size() - 14)) > step) {
        fs::remove(p);
        fs::remove(p + ".crc32");
      }
    }
  }
};

double max_difference(const NamedTensors& a, const NamedTensors& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    worst = std::max(worst, (a[i].second - b[i].second).abs().max().item<double>());
  }
  return worst;
}

TEST_F(KVStoreTraining, DistSyncOnTwoWorkersAndTwoServersEndsWithTheWeightsOfDdpAllreduce) {
  TrainOptions ddp = options("ddp", 2);
  // Small buckets: several keys, spread over both servers.
  ddp.ddp.bucket_cap_mb = 0.02;
  ddp.ddp.first_bucket_cap_mb = 0.01;
  run(ddp, 2);
  TrainOptions kv = ddp;
  kv.checkpoint_dir = (dir_ / "kv").string();
  kv.kvstore = KVStoreType::kDistSync;
  kv.verbose = true;
  const std::string log = run(kv, 2, 2);
  EXPECT_NE(log.find("kvstore dist_sync (2 worker(s)), optimizer on the workers"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("hook kvstore dist_sync"), std::string::npos) << log;
  const Checkpoint a = latest("ddp"), b = latest("kv");
  EXPECT_EQ(b.step, 12);
  const double d = max_difference(a.model, b.model);
  std::printf("dist_sync vs DDP allreduce after 12 steps: max |w difference| %.3g\n", d);
  EXPECT_LE(d, 1e-5);
}

TEST_F(KVStoreTraining, DistDeviceSyncOfOneNodesTwoProcessesEndsWithTheWeightsOfDdpAllreduce) {
  TrainOptions ddp = options("ddp", 1);
  ddp.ddp.bucket_cap_mb = 0.02;
  ddp.ddp.first_bucket_cap_mb = 0.01;
  run(ddp, 2);
  TrainOptions kv = ddp;
  kv.checkpoint_dir = (dir_ / "kv").string();
  kv.kvstore = KVStoreType::kDistDeviceSync;  // the node sums through c10d, one process pushes
  run(kv, 2, 2);
  const Checkpoint a = latest("ddp"), b = latest("kv");
  EXPECT_EQ(b.step, a.step);
  const double d = max_difference(a.model, b.model);
  std::printf("dist_device_sync vs DDP allreduce: max |w difference| %.3g\n", d);
  EXPECT_LE(d, 1e-5);
}

TEST_F(KVStoreTraining, TheTimelineShowsEachBucketsPushPullThroughTheServers) {
  TrainOptions kv = options("kv", 1);
  kv.ddp.bucket_cap_mb = 0.02;
  kv.ddp.first_bucket_cap_mb = 0.01;
  kv.kvstore = KVStoreType::kDistSync;
  kv.timeline = (dir_ / "trace.json").string();
  run(kv, 2, 1);
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(timeline_path_for_rank(kv.timeline, rank, 2));
    ASSERT_TRUE(in) << rank;
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("\"pushpull bucket 0\""), std::string::npos) << rank;
    EXPECT_EQ(text.find("allreduce bucket"), std::string::npos) << rank;
  }
}

TEST_F(KVStoreTraining, ServerSideSgdWithMomentumAndWeightDecayEndsWithTheWeightsOfDdpSgd) {
  TrainOptions ddp = options("ddp", 1);
  ddp.optimizer.weight_decay = 1e-3;
  run(ddp, 2);
  TrainOptions kv = ddp;
  kv.checkpoint_dir = (dir_ / "kv").string();
  kv.kvstore = KVStoreType::kDistSync;
  kv.kvstore_optimizer = KVStoreOptimizer::kServer;
  const std::string log = run(kv, 2, 1);
  EXPECT_NE(log.find("optimizer on the servers"), std::string::npos) << log;
  const double d = max_difference(latest("ddp").model, latest("kv").model);
  std::printf("server SGD vs DDP SGD after 6 steps: max |w difference| %.3g\n", d);
  EXPECT_LE(d, 1e-5);
}

TEST_F(KVStoreTraining, DistAsyncRunsEveryWorkerToTheEndWithTheServersSgd) {
  TrainOptions o = options("kv", 1);
  o.kvstore = KVStoreType::kDistAsync;
  const std::string log = run(o, 2, 1);
  EXPECT_NE(log.find("kvstore dist_async (2 worker(s)), optimizer on the servers"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("epoch 1/1"), std::string::npos) << log;
  EXPECT_EQ(latest("kv").step, 6);
}

TEST_F(KVStoreTraining, MidEpochResumeUnderDistSyncReproducesTheUninterruptedRun) {
  TrainOptions o = options("run", 2);
  o.kvstore = KVStoreType::kDistSync;
  o.checkpoint_every_steps = 4;  // 6 steps per epoch: 4 and 8 are mid-epoch
  o.keep_checkpoints = 10;
  run(o, 2, 1);
  const Checkpoint uninterrupted = latest("run");
  ASSERT_EQ(uninterrupted.step, 12);

  // A new job (scheduler, servers) continues from rank 0's checkpoint.
  crash_after("run", 8);
  const std::string log = run(o, 2, 1);
  EXPECT_NE(log.find("(epoch 2, step 8)"), std::string::npos) << log;
  EXPECT_NE(log.find("epoch 2 continues at batch 2 of 6"), std::string::npos) << log;
  EXPECT_LE(max_difference(uninterrupted.model, latest("run").model), 1e-6);
}

// --kvstore-optimizer server: the servers' momentum travels in the
// checkpoint (Note [Keys and resume] in src/train/kv_sync.cpp).
TrainOptions server_sgd(TrainOptions o) {
  o.kvstore = KVStoreType::kDistSync;
  o.kvstore_optimizer = KVStoreOptimizer::kServer;
  o.optimizer.weight_decay = 1e-3;  // momentum 0.9: options()
  o.checkpoint_every_steps = 4;     // 6 steps per epoch: 4 and 8 are mid-epoch
  o.keep_checkpoints = 10;
  o.kvstore_options.bigarray_bound = 100;  // the larger parameters split over both servers
  return o;
}

TEST_F(KVStoreTraining,
       ServerSgdResumedMidEpochWithTheCheckpointsMomentumEndsAsTheUninterruptedRun) {
  const TrainOptions o = server_sgd(options("run", 2));
  run(o, 2, 2);
  const Checkpoint uninterrupted = latest("run");
  ASSERT_EQ(uninterrupted.step, 12);
  ASSERT_TRUE(uninterrupted.server_optimizer.has_value());
  const ServerOptimizerState& saved = *uninterrupted.server_optimizer;
  const std::map<std::string, at::Tensor> momentum(saved.momentum.begin(), saved.momentum.end());
  ASSERT_EQ(momentum.size(), uninterrupted.model.size());  // the cnn has no buffers
  for (const auto& [name, w] : uninterrupted.model) {
    ASSERT_TRUE(momentum.count(name)) << name;
    EXPECT_EQ(momentum.at(name).sizes(), w.sizes()) << name;
    EXPECT_GT(momentum.at(name).abs().max().item<double>(), 0) << name;
    EXPECT_EQ(saved.updates.at(name), 12) << name;
  }

  // A new job (scheduler, servers) continues from rank 0's step-8 checkpoint.
  crash_after("run", 8);
  const std::string log = run(o, 2, 2);
  EXPECT_NE(log.find("(epoch 2, step 8)"), std::string::npos) << log;
  EXPECT_EQ(log.find("restarts from zero"), std::string::npos) << log;
  const Checkpoint resumed = latest("run");
  const double d = max_difference(uninterrupted.model, resumed.model);
  std::printf("server SGD resumed at step 8 vs uninterrupted: max |w difference| %.3g\n", d);
  EXPECT_LE(d, 1e-6);
  ASSERT_TRUE(resumed.server_optimizer.has_value());
  EXPECT_LE(max_difference(saved.momentum, resumed.server_optimizer->momentum), 1e-6);
  EXPECT_EQ(resumed.server_optimizer->updates, saved.updates);
}

TEST_F(KVStoreTraining, ACheckpointWithoutTheServersMomentumResumesFromZeroMomentumAndSaysSo) {
  const TrainOptions o = server_sgd(options("run", 1));
  run(o, 2, 1);
  const Checkpoint uninterrupted = latest("run");
  ASSERT_EQ(uninterrupted.step, 6);

  // As a checkpoint written before the servers' state was kept.
  crash_after("run", 4);
  Checkpoint old = latest("run");
  ASSERT_TRUE(old.server_optimizer.has_value());
  old.server_optimizer.reset();
  save_checkpoint(o.checkpoint_dir, old, o.keep_checkpoints);
  const std::string log = run(o, 2, 1);
  EXPECT_NE(log.find("checkpoint-00000004.pt holds no servers' optimizer state (written by a run "
                     "with the optimizer on the workers, or before it was kept): the servers' "
                     "momentum restarts from zero"),
            std::string::npos)
      << log;
  // Momentum matters here: without it the run ends elsewhere.
  EXPECT_GT(max_difference(uninterrupted.model, latest("run").model), 1e-6);
}

TEST_F(KVStoreTraining, AnUnknownKvstoreIsAnInvalidArgumentListingTheTypes) {
  TrainOptions o = options("", 1);
  o.checkpoint_dir.clear();
  // Types are parsed once (Note [One route] in src/ps/job/route.cpp).
  const std::string message = testing::error_of([&] { parse_kvstore_type("dist_foo"); });
  EXPECT_EQ(message,
            "unknown kvstore type 'dist_foo'; valid types: local, dist_sync, dist_async, "
            "dist_device_sync");
  o.kvstore = KVStoreType::kDistAsync;
  o.kvstore_optimizer = KVStoreOptimizer::kWorker;
  EXPECT_NE(
      testing::error_of([&] { validate(o); }).find("needs TrainOptions::kvstore_optimizer server"),
      std::string::npos);
  o.kvstore_optimizer = KVStoreOptimizer::kServer;
  o.optimizer.type = OptimizerType::kAdamW;
  EXPECT_NE(testing::error_of([&] { validate(o); }).find("OptimizerOptions::type adamw is not sgd"),
            std::string::npos);
}

// The store reaches train() as an argument (Note [One route] in
// src/ps/job/route.cpp); it must be of the type the options name.
TEST_F(KVStoreTraining, AStorePassedToTrainMustBeOfTheTypeTheOptionsName) {
  TrainOptions o = options("", 1);
  o.checkpoint_dir.clear();
  o.kvstore = KVStoreType::kDistSync;
  const ProcessGroup pg;  // one process
  EXPECT_EQ(testing::error_of([&] {
              train(o, pg, std::shared_ptr<KVStore>(KVStore::create("local").take()), nullptr);
            }),
            "the kvstore passed is a local store but TrainOptions::kvstore is dist_sync; pass one "
            "of the same type");
  o.kvstore.reset();
  EXPECT_EQ(testing::error_of([&] {
              train(o, pg, std::shared_ptr<KVStore>(KVStore::create("local").take()), nullptr);
            }),
            "a local kvstore was passed to train() but TrainOptions::kvstore is not set; set it to "
            "the store's type");
  // The local store through the overload trains as train(options, pg, log) would.
  o.kvstore = KVStoreType::kLocal;
  std::ostringstream log;
  EXPECT_EQ(train(o, pg, KVStore::create(KVStoreType::kLocal).take(), &log).size(), 1u);
  EXPECT_NE(log.str().find("kvstore local (1 worker(s)), optimizer on the workers"),
            std::string::npos)
      << log.str();
}

TEST_F(KVStoreTraining, ACompressingCommHookWithAKvstoreIsAnInvalidArgumentNotIgnored) {
  TrainOptions o = options("", 1);
  o.checkpoint_dir.clear();
  o.kvstore = KVStoreType::kDistSync;
  o.ddp.comm_hook = comm_hook_by_name("fp16");
  EXPECT_EQ(testing::error_of([&] { validate(o); }),
            "TrainOptions::ddp.comm_hook fp16 cannot be combined with TrainOptions::kvstore: the "
            "kvstore's push and pull are the comm hook; drop one of them");
  o.ddp.comm_hook = comm_hook_by_name("none");  // allreduce: what the CLI passes by default
  EXPECT_EQ(testing::error_of([&] { validate(o); }), "");
}

// An MXJob: a scheduler, `servers` servers and `workers` workers, each
// running `dtrain ARGS` with only MXNet's variables (no RANK, WORLD_SIZE,
// MASTER_ADDR, DMLC_WORKER_ID). Returns the workers' output, after checking
// that every process exited 0 within the time limit.
std::string run_mxjob(const std::vector<std::string>& args, int servers, int workers) {
  const int port = testing::free_port();
  testing::Job job;
  for (int i = 0; i < 1 + servers + workers; ++i) {
    const std::string role = i == 0 ? "scheduler" : i <= servers ? "server" : "worker";
    testing::Env env = testing::job_env(role, port, servers, workers);
    env["PS_HEARTBEAT_TIMEOUT"] = "30";  // a loaded 2-core machine starves processes
    job.spawn(role + std::to_string(i), env, DTRAIN_BINARY_DIR "/dtrain", args);
  }
  const bool ended = job.wait_all(std::chrono::seconds(240));
  std::string workers_output;
  for (const testing::Child& c : job.children()) {
    const std::string out = testing::read_file(c.log);
    EXPECT_TRUE(c.reaped) << c.name << " still ran after 240 s:\n" << out;
    EXPECT_TRUE(c.reaped && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0)
        << c.name << " ended with status " << c.status << ":\n"
        << out;
    if (c.name.rfind("worker", 0) == 0) workers_output += out;
  }
  EXPECT_TRUE(ended);
  return workers_output;
}

TEST_F(KVStoreTraining, TheSameDtrainTrainCommandInEveryProcessWithOnlyDmlcVariablesEndsAsDdp) {
  TrainOptions ddp = options("ddp", 2);
  run(ddp, 2);
  // Exactly ddp's options, as flags.
  const std::string output = run_mxjob({"train",
                                        "--kvstore",
                                        "dist_sync",
                                        "--model",
                                        "cnn",
                                        "--dataset",
                                        "mnist",
                                        "--data-dir",
                                        (dir_ / "data").string(),
                                        "--epochs",
                                        "2",
                                        "--batch-size",
                                        "8",
                                        "--eval-batch-size",
                                        "32",
                                        "--lr",
                                        "0.05",
                                        "--momentum",
                                        "0.9",
                                        "--threads",
                                        "1",
                                        "--device",
                                        "cpu",
                                        "--checkpoint-dir",
                                        (dir_ / "kv").string(),
                                        "--init-weights",
                                        (dir_ / "init.pt").string(),
                                        "-q"},
                                       /*servers=*/2, /*workers=*/2);
  EXPECT_NE(output.find("2 rank(s)"), std::string::npos) << output;
  EXPECT_NE(output.find("kvstore dist_sync (2 worker(s)), optimizer on the workers"),
            std::string::npos)
      << output;
  const Checkpoint a = latest("ddp"), b = latest("kv");
  EXPECT_EQ(b.step, 12);
  const double d = max_difference(a.model, b.model);
  std::printf("DMLC_*-only dtrain train processes vs DDP allreduce: max |w difference| %.3g\n", d);
  EXPECT_LE(d, 1e-5);
}

TEST_F(KVStoreTraining, TheSameDtrainBenchTrainCommandInEveryProcessWithOnlyDmlcVariablesRuns) {
  const std::string output =
      run_mxjob({"bench", "train", "--kvstore", "dist_sync", "--model", "cnn", "--device", "cpu",
                 "--batch-size", "4", "--steps", "2", "--warmup-steps", "1", "--display-every", "1",
                 "--threads", "1"},
                /*servers=*/1, /*workers=*/2);
  EXPECT_NE(output.find("Processes:   2 (gloo)"), std::string::npos) << output;
  EXPECT_NE(output.find("Gradients:   kvstore dist_sync (2 worker(s)), optimizer on the workers"),
            std::string::npos)
      << output;
}

TEST_F(KVStoreTraining, CliUnknownKvStoreIsAOneLineUsageErrorListingTheTypes) {
  for (const char* flag : {"--kvstore", "--kv-store"}) {
    const testing::ShellRun r = testing::run_shell(
        std::string("timeout -k 5 120 " DTRAIN_BINARY_DIR "/dtrain train --data-dir ") +
        (dir_ / "data").string() + " --dataset mnist " + flag + " dist_foo 2>&1");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(r.output,
              "dtrain train: error: unknown --kvstore 'dist_foo'; valid types: local, dist_sync, "
              "dist_async, dist_device_sync\n")
        << flag;
  }
}

// `dtrain run --ps-servers 1 --nproc-per-node 2 [run_flags] -- dtrain train
// --kvstore <kvstore>` on the tiny dataset, 2 epochs (12 steps), small
// buckets; checkpoints in dir_/<ckpt>.
testing::ShellRun run_cli(const fs::path& dir, const std::string& run_flags,
                          const std::string& kvstore, const std::string& ckpt) {
  const std::string dtrain = DTRAIN_BINARY_DIR "/dtrain";
  // `timeout` bounds the job; the launcher stops every role it started.
  return testing::run_shell(
      "PS_HEARTBEAT_TIMEOUT=30 timeout -k 10 300 " + dtrain +
      " run --ps-servers 1 --nproc-per-node 2 " + run_flags + " -- " + dtrain +
      " train --kvstore " + kvstore + " --model cnn --dataset mnist --data-dir " +
      (dir / "data").string() + " --init-weights " + (dir / "init.pt").string() +
      " --threads 1 --device cpu --batch-size 8 --epochs 2 --lr 0.05 --momentum 0.9 "
      "--bucket-cap-mb 0.02 --quiet --checkpoint-dir " +
      (dir / ckpt).string() + " 2>&1");
}

TEST_F(KVStoreTraining, CliDistDeviceSyncUnderDtrainRunPsWorkerPerNodeEndsWithDistSyncsWeights) {
  const testing::ShellRun sync = run_cli(dir_, "", "dist_sync", "sync");
  ASSERT_EQ(sync.code, 0) << sync.output;
  const testing::ShellRun device = run_cli(dir_, "--ps-worker-per node", "dist_device_sync", "dev");
  ASSERT_EQ(device.code, 0) << device.output;
  EXPECT_NE(device.output.find("kvstore dist_device_sync (2 worker(s)), optimizer on the workers"),
            std::string::npos)
      << device.output;
  const Checkpoint a = latest("sync"), b = latest("dev");
  EXPECT_EQ(a.step, 12);
  EXPECT_EQ(b.step, 12);
  const double d = max_difference(a.model, b.model);
  std::printf(
      "dtrain run: dist_device_sync (one ps worker) vs dist_sync (two): max |w diff| %.3g\n", d);
  EXPECT_LE(d, 1e-5);
}

TEST_F(KVStoreTraining,
       CliDistDeviceSyncUnderDtrainRunCountingProcessesFailsNamingPsWorkerPerNode) {
  // Without the check the scheduler would wait for a second ps worker until
  // the workers' connect timeout.
  const testing::ShellRun r = run_cli(dir_, "", "dist_device_sync", "dev");
  EXPECT_EQ(r.code, 1) << r.output;
  const std::string line =
      "dtrain train: error: dist_device_sync has one ps worker per node, but DMLC_NUM_WORKER=2 "
      "counts processes (WORLD_SIZE=2, LOCAL_WORLD_SIZE=2): start the job with `dtrain run "
      "--ps-servers S --ps-worker-per node`, or set DMLC_NUM_WORKER to the number of nodes (1) "
      "and DMLC_WORKER_ID to the node's rank\n";
  EXPECT_NE(r.output.find("]: " + line), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("dtrain run: root cause: worker rank "), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dtrain
