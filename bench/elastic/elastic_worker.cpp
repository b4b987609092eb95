// dtrain's worker for the recovery-time benchmark (issue 4 (a)); its PyTorch
// twin is bench/peer/elastic_worker.py. A data-parallel training loop as a
// user would write it over the public library, started by an elastic launcher
// (`dtrain run --max-restarts K ...` or torchrun):
//
//   elastic_bench_worker DIR [--steps N] [--checkpoint-every K] [--batch-size B]
//                            [--batches M] [--seed S] [--threads T]
//
//  * writes its pid to DIR/pid.<restart>.<rank> (temp file + rename) first, so
//    the benchmark can SIGKILL a chosen rank;
//  * init_process_group() from the torchrun environment, the zoo's `cnn`
//    (1x28x28, 10 classes) in DistributedDataParallel, SGD (lr 0.01,
//    momentum 0.9);
//  * resumes from DIR/ckpt.pt (model, optimizer, step) when it exists; rank 0
//    writes it every K steps with torch::save to a temp file + rename;
//  * trains on M synthetic in-memory batches of B (seeded per rank), cycling,
//    for N steps in all (0: until killed).
//
// stdout, one line each, flushed (times are CLOCK_REALTIME in ns, so the
// benchmark can compare them with `date +%s%N`):
//   START <restart> <rank> <ns> <spawn ns>
//                                   first thing in main(); <spawn ns> is when the
//                                   process was forked (/proc/self/stat, 10 ms
//                                   ticks), so it separates the launcher's share
//                                   from the loading of LibTorch before main()
//   READY <restart> <rank> <ns>     process group formed, model and checkpoint
//                                   loaded, DDP built
//   STEP <restart> <rank> <step> <ns>  after every completed optimizer step
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dtrain/comm.h"
#include "dtrain/ddp.h"
#include "dtrain/models.h"

namespace {

struct Args {
  std::string dir;
  int64_t steps = 0;
  int64_t checkpoint_every = 10;
  int64_t batch_size = 64;
  int64_t batches = 16;
  uint64_t seed = 0;
  int threads = 1;
};

int64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// When this process was forked, as CLOCK_REALTIME: /proc/self/stat's start
// time (clock ticks since boot) moved by the current realtime - boottime.
int64_t spawn_realtime_ns() {
  std::ifstream f("/proc/self/stat");
  std::string stat;
  std::getline(f, stat);
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream fields(stat.substr(paren + 2));  // from field 3 (state) on
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
  }
  const long long ticks = std::atoll(field.c_str());
  timespec boot{};
  clock_gettime(CLOCK_BOOTTIME, &boot);
  const int64_t boot_ns = static_cast<int64_t>(boot.tv_sec) * 1000000000 + boot.tv_nsec;
  const int64_t start_ns = ticks * (1000000000 / sysconf(_SC_CLK_TCK));
  return realtime_ns() - (boot_ns - start_ns);
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

bool parse_args(int argc, char** argv, Args* a) {
  if (argc < 2 || argv[1][0] == '-') return false;
  a->dir = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const char* value = argv[++i];
    if (flag == "--steps")
      a->steps = std::atoll(value);
    else if (flag == "--checkpoint-every")
      a->checkpoint_every = std::atoll(value);
    else if (flag == "--batch-size")
      a->batch_size = std::atoll(value);
    else if (flag == "--batches")
      a->batches = std::atoll(value);
    else if (flag == "--seed")
      a->seed = std::strtoull(value, nullptr, 10);
    else if (flag == "--threads")
      a->threads = std::atoi(value);
    else
      return false;
  }
  return a->steps >= 0 && a->checkpoint_every > 0 && a->batch_size > 0 && a->batches > 0 &&
         a->threads > 0;
}

// Written to a temp file and renamed, so a reader never sees half a file.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp);
    f << text << "\n";
  }
  std::rename(tmp.c_str(), path.c_str());
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void save_checkpoint(const std::string& path, torch::nn::Module& model,
                     torch::optim::Optimizer& opt, int64_t step) {
  torch::serialize::OutputArchive root, m, o;
  model.save(m);
  opt.save(o);
  root.write("model", m);
  root.write("optim", o);
  root.write("step", torch::tensor(step));
  const std::string tmp = path + ".tmp";
  root.save_to(tmp);
  std::rename(tmp.c_str(), path.c_str());
}

int64_t load_checkpoint(const std::string& path, torch::nn::Module& model,
                        torch::optim::Optimizer& opt) {
  torch::serialize::InputArchive root, m, o;
  root.load_from(path);
  root.read("model", m);
  model.load(m);
  root.read("optim", o);
  opt.load(o);
  torch::Tensor step;
  root.read("step", step);
  return step.item<int64_t>();
}

int run(const Args& a) {
  const int restart = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  const int env_rank = env_int("RANK", 0);
  std::printf("START %d %d %lld %lld\n", restart, env_rank, static_cast<long long>(realtime_ns()),
              static_cast<long long>(spawn_realtime_ns()));
  std::fflush(stdout);
  write_atomically(a.dir + "/pid." + std::to_string(restart) + "." + std::to_string(env_rank),
                   std::to_string(getpid()));

  torch::set_num_threads(a.threads);
  torch::manual_seed(a.seed);
  dtrain::ProcessGroup pg = dtrain::init_process_group();
  const int rank = pg.rank();

  auto model = dtrain::make_model("cnn", dtrain::ModelOptions{});
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  const std::string ckpt = a.dir + "/ckpt.pt";
  int64_t step = 0;
  if (file_exists(ckpt)) step = load_checkpoint(ckpt, *model, opt);
  dtrain::DistributedDataParallel<dtrain::ImageClassifier> ddp(model, pg);

  torch::Generator gen = at::detail::createCPUGenerator(a.seed + 1000 + rank);
  std::vector<torch::Tensor> xs, ys;
  for (int64_t i = 0; i < a.batches; ++i) {
    xs.push_back(at::randn({a.batch_size, 1, 28, 28}, gen));
    ys.push_back(at::randint(0, 10, {a.batch_size}, gen));
  }
  std::printf("READY %d %d %lld\n", restart, rank, static_cast<long long>(realtime_ns()));
  std::fflush(stdout);

  while (a.steps == 0 || step < a.steps) {
    const auto& x = xs[step % a.batches];
    const auto& y = ys[step % a.batches];
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(ddp.forward(x), y);
    loss.backward();
    opt.step();
    ++step;
    std::printf("STEP %d %d %lld %lld\n", restart, rank, static_cast<long long>(step),
                static_cast<long long>(realtime_ns()));
    std::fflush(stdout);
    if (rank == 0 && step % a.checkpoint_every == 0) save_checkpoint(ckpt, *model, opt, step);
  }
  pg.barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse_args(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: %s DIR [--steps N] [--checkpoint-every K] [--batch-size B] "
                 "[--batches M] [--seed S] [--threads T]\n",
                 argv[0]);
    return 2;
  }
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_bench_worker: %s\n", e.what());
    return 1;
  }
}
