// `dtrain train` and `dtrain eval` from the command line: bad flags are one
// line naming the fix (exit 2), progress lines (by steps, by time, redrawn in
// place under `dtrain run` on a terminal) and --quiet, eval over a
// checkpoint, --image-size on every dataset (resizing as torchvision's Resize
// does). channels-last (library) gives NCHW's results, on the CPU and a GPU.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <torch/utils.h>

#include "dtrain/bench.h"
#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/errors.h"
#include "dtrain/kvstore.h"
#include "dtrain/models.h"
#include "dtrain/optim.h"
#include "dtrain/train.h"
#include "support/ranks.h"
#include "support/shell.h"
#include "train/fixtures.h"
#include "train/python.h"

namespace dtrain {
namespace {

using Shell = testing::ShellRun;

Shell dtrain_cli(const std::string& args) {
  return testing::run_shell("timeout -k 5 120 " DTRAIN_BINARY_DIR "/dtrain " + args + " 2>&1");
}

class TrainCli : public testing::ScratchDir {
 protected:
  void SetUp() override {
    ScratchDir::SetUp();
    testing::write_tiny_dataset(dir_ / "data", 96, 32);  // 12 steps of 8
    data_ = "--dataset mnist --data-dir " + (dir_ / "data").string() +
            " --threads 1 --device cpu --batch-size 8";
  }
  std::string data_;
};

TEST_F(TrainCli, UnknownOptimizerOrScheduleOrFp16OnCpuIsAOneLineUsageError) {
  Shell r = dtrain_cli("train " + data_ + " --optimizer lamb");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "dtrain train: error: unknown optimizer 'lamb'; valid optimizers: sgd, adamw\n");
  r = dtrain_cli("train " + data_ + " --lr-schedule onecycle");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "dtrain train: error: unknown lr schedule 'onecycle'; valid schedules: constant, step, "
            "multistep, cosine\n");
  r = dtrain_cli("train " + data_ + " --amp fp16");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "dtrain train: error: --amp fp16 needs a CUDA device; use --amp bf16 on the CPU\n");
  r = dtrain_cli("train " + data_ + " --lr-schedule multistep --lr-milestones 3,x");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--lr-milestones '3,x' is not a list of epochs"), std::string::npos)
      << r.output;
}

// Library users set fields, CLI users flags: the same mistake is told in the
// words of each (the CLI maps the field to its flag, cli/option_flags.h).
TEST_F(TrainCli, ABadOptionNamesTheFieldInTheLibraryAndTheFlagOnTheCommandLine) {
  TrainOptions o;
  o.label_smoothing = 1.5;
  EXPECT_EQ(testing::error_of([&] { validate(o); }),
            "TrainOptions::label_smoothing must be in [0, 1), got 1.5");
  Shell r = dtrain_cli("train " + data_ + " --label-smoothing 1.5");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output, "dtrain train: error: --label-smoothing must be in [0, 1), got 1.5\n");

  o = TrainOptions();
  o.lr_warmup_epochs = 1;
  o.lr_warmup_steps = 1;
  EXPECT_EQ(testing::error_of([&] { validate(o); }),
            "TrainOptions::lr_warmup_epochs and TrainOptions::lr_warmup_steps are both set; the "
            "warm-up takes epochs or steps, not both");
  r = dtrain_cli("train " + data_ + " --lr-warmup-epochs 1 --lr-warmup-steps 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "dtrain train: error: --lr-warmup-epochs and --lr-warmup-steps are both set; the "
            "warm-up takes epochs or steps, not both\n");

  o = TrainOptions();
  o.batch_size = 12;
  o.dataset.train.shuffle_block = 8;
  EXPECT_EQ(testing::error_of([&] { validate(o); }),
            "TrainOptions::dataset.train.shuffle_block 8 must divide TrainOptions::batch_size 12 "
            "(Note [Block order]): use a divisor such as 4");
  r = dtrain_cli("train " + data_ + " --shuffle-block 3");  // batch 8
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "dtrain train: error: --shuffle-block 3 must divide --batch-size 8 (Note [Block "
            "order]): use a divisor such as 8\n");

  o = TrainOptions();
  o.metrics_port = 70000;
  EXPECT_EQ(testing::error_of([&] { validate(o); }),
            "TrainOptions::metrics_port must be -1 (off), 0 (a free port) or up to 65535, got "
            "70000");
  r = dtrain_cli("bench train --model cnn --device cpu --metrics-port 70000");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "dtrain bench train: error: --metrics-port must be -1 (off), 0 (a free port) or up "
            "to 65535, got 70000\n");

  o = TrainOptions();
  o.kvstore = KVStoreType::kDistAsync;
  o.kvstore_optimizer = KVStoreOptimizer::kWorker;
  EXPECT_EQ(testing::error_of([&] { validate(o); }),
            "TrainOptions::kvstore dist_async applies each push on the servers: it needs "
            "TrainOptions::kvstore_optimizer server (or auto)");
  r = dtrain_cli("train " + data_ + " --kvstore dist_async --kvstore-optimizer worker");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "dtrain train: error: --kvstore dist_async applies each push on the servers: it "
            "needs --kvstore-optimizer server (or auto)\n");

  o = TrainOptions();
  o.device = DeviceChoice{DeviceChoice::Kind::kCpu, 3};  // only cuda has an index
  EXPECT_EQ(testing::error_of([&] { validate(o); }),
            "TrainOptions::device 'cpu:3' is not one of auto, cpu, cuda, cuda:N");
  for (const std::string bad : {"tpu", "cuda:x", "cuda:-1"}) {
    for (const std::string command :
         {"train --dataset mnist", "eval --dataset mnist --checkpoint x", "bench train"}) {
      r = dtrain_cli(command + " --device " + bad);
      const std::string name = command.substr(0, command.find(" --"));
      EXPECT_EQ(r.code, 2) << command << " --device " << bad;
      EXPECT_EQ(r.output, "dtrain " + name + ": error: --device '" + bad +
                              "' is not one of auto, cpu, cuda, cuda:N\n");
    }
  }
}

TEST(TypedOptions, EveryNameParsesToTheValueThatSpellsIt) {
  for (AmpMode m : {AmpMode::kNone, AmpMode::kBf16, AmpMode::kFp16}) {
    EXPECT_EQ(parse_amp_mode(to_string(m)), m);
  }
  for (LrScaling s : {LrScaling::kNone, LrScaling::kLinear}) {
    EXPECT_EQ(parse_lr_scaling(to_string(s)), s);
  }
  EXPECT_EQ(testing::error_of([] { parse_amp_mode("fp8"); }),
            "unknown mixed-precision mode 'fp8'; valid modes: none, bf16 (CPU or CUDA), fp16 "
            "(CUDA)");
  EXPECT_EQ(testing::error_of([] { parse_lr_scaling("sqrt"); }),
            "unknown lr scaling 'sqrt'; valid rules: none, linear");
  for (DeviceChoice d : {DeviceChoice::automatic(), DeviceChoice::cpu(), DeviceChoice::cuda(),
                         DeviceChoice::cuda(0), DeviceChoice::cuda(12)}) {
    EXPECT_EQ(parse_device_choice(to_string(d)), d) << to_string(d);
  }
  EXPECT_EQ(to_string(DeviceChoice::cuda(3)), "cuda:3");
  EXPECT_EQ(testing::error_of([] { parse_device_choice("cuda:x"); }),
            "device 'cuda:x' is not one of auto, cpu, cuda, cuda:N");
  for (const std::string bad : {"", "CPU", "cuda:", "cuda:01", "cuda:-1", "cuda:1 ", "cpu:0"}) {
    EXPECT_THROW(parse_device_choice(bad), InvalidArgument) << "'" << bad << "'";
  }
  for (const std::string& name : comm_hook_names()) {
    EXPECT_NE(comm_hook_by_name(name), nullptr) << name;
  }
  for (OptimizerType t : {OptimizerType::kSgd, OptimizerType::kAdamW}) {
    EXPECT_EQ(parse_optimizer_type(to_string(t)), t);
  }
  EXPECT_EQ(optimizer_names(), (std::vector<std::string>{"sgd", "adamw"}));
  EXPECT_EQ(testing::error_of([] { parse_optimizer_type("AdamW"); }),
            "unknown optimizer 'AdamW'; valid optimizers: sgd, adamw");
  for (CollectiveOp op :
       {CollectiveOp::kAllreduce, CollectiveOp::kAllgather, CollectiveOp::kReduceScatter,
        CollectiveOp::kBroadcast, CollectiveOp::kReduce, CollectiveOp::kAlltoall}) {
    EXPECT_EQ(parse_collective_op(to_string(op)), op);
  }
  EXPECT_EQ(collective_bench_ops(),
            (std::vector<std::string>{"allreduce", "allgather", "reduce_scatter", "broadcast",
                                      "reduce", "alltoall"}));
  EXPECT_EQ(testing::error_of([] { parse_collective_op("reducescatter"); }),
            "unknown collective 'reducescatter'; use allreduce, allgather, reduce_scatter, "
            "broadcast, reduce, alltoall");
  for (GradientCompressionType t :
       {GradientCompressionType::kNone, GradientCompressionType::k2Bit}) {
    EXPECT_EQ(parse_gradient_compression_type(to_string(t)), t);
  }
  EXPECT_EQ(to_string(GradientCompressionType::k2Bit), "2bit");  // MXNet's {'type': '2bit'}
  EXPECT_EQ(testing::error_of([] { parse_gradient_compression_type("1bit"); }),
            "unknown gradient compression '1bit'; use none or 2bit");
}

TEST_F(TrainCli, BadPowerSGDFlagsAreOneLineUsageErrorsNamingTheFlagAndTheFix) {
  Shell r = dtrain_cli("train " + data_ + " --comm-hook powersgd --powersgd-rank 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "dtrain train: error: --powersgd-rank must be at least 1, got 0 (1 to 4 is usual)\n");
  r = dtrain_cli("train " + data_ + " --comm-hook fp16 --powersgd-rank 2");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "dtrain train: error: --powersgd-rank is an option of --comm-hook powersgd, not fp16; "
            "drop it or use --comm-hook powersgd\n");
  r = dtrain_cli("train " + data_ + " --powersgd-no-warm-start");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "dtrain train: error: --powersgd-no-warm-start is an option of --comm-hook powersgd, "
            "not none; drop it or use --comm-hook powersgd\n");
  r = dtrain_cli("train " + data_ + " --comm-hook powersgd --powersgd-start-iter 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--powersgd-start-iter must be at least 2 with error feedback or warm "
                          "start (got 1)"),
            std::string::npos)
      << r.output;
  r = dtrain_cli("train " + data_ + " --comm-hook noop");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "dtrain train: error: --comm-hook noop sends no gradients, so every rank would train a "
            "model of its own; it is for measuring (dtrain bench ddp|train): use none, fp16, bf16 "
            "or powersgd\n");
  r = dtrain_cli("train " + data_ + " --comm-hook powersgd --kvstore local");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "dtrain train: error: --comm-hook powersgd cannot be combined with --kvstore: the "
            "kvstore's push and pull are the comm hook; drop one of them\n");
  r = dtrain_cli("train " + data_ + " --model cnn --comm-hook powersgd --powersgd-rank 500");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("error: --powersgd-rank 500 is larger than any layer of model cnn "
                          "allows (its largest matrix allows rank 128: min(rows, cols)); use "
                          "--powersgd-rank 128 or less\n"),
            std::string::npos)
      << r.output;
  r = dtrain_cli(
      "bench ddp --model cnn --steps 1 --warmup 0 --comm-hook bf16 "
      "--powersgd-min-compression-rate 4");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output,
            "dtrain bench ddp: error: --powersgd-min-compression-rate is an option of --comm-hook "
            "powersgd, not bf16; drop it or use --comm-hook powersgd\n");
}

TEST_F(TrainCli, PowerSGDTrainsAndSaysSoInItsStatistics) {
  Shell r = dtrain_cli("train " + data_ +
                       " --model cnn --epochs 1 --verbose --comm-hook powersgd --powersgd-rank 2 "
                       "--powersgd-start-iter 4");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("hook powersgd"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  powersgd: iteration 12, compression rate"), std::string::npos)
      << r.output;
}

TEST_F(TrainCli, CudaWithoutAGpuIsAUsageErrorNamingDeviceCpu) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is visible";
  for (auto [name, args] : {std::pair<std::string, std::string>{"train", " --dataset mnist"},
                            {"eval", " --checkpoint x --dataset mnist"},
                            {"bench train", ""}}) {
    Shell r = dtrain_cli(name + args + " --device cuda");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(r.output, "dtrain " + name +
                            ": error: --device cuda: no GPU is visible to this LibTorch; use "
                            "--device cpu\n");
  }
}

// --backend nccl where it cannot work (no GPU, or a CPU-only build) is refused
// before any group forms, also without a launcher, by every command that has
// the flag.
TEST_F(TrainCli, BackendNcclWithoutAGpuIsAOneLineUsageErrorNamingBackendGloo) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is visible";
  for (auto [who, args] : {std::pair<std::string, std::string>{"train", "train " + data_},
                           {"eval", "eval " + data_ + " --checkpoint x"},
                           {"bench train", "bench train --model cnn --steps 1"},
                           {"bench ddp", "bench ddp --steps 1"},
                           {"bench collective", "bench collective -e 1K"}}) {
    Shell r = dtrain_cli(args + " --backend nccl");
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    EXPECT_EQ(r.output.rfind("dtrain " + who + ": error: --backend nccl needs ", 0), 0) << r.output;
    EXPECT_NE(r.output.find("use --backend gloo\n"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
  }
}

TEST_F(TrainCli, AnUnknownBackendIsAUsageErrorListingTheBackends) {
  Shell r = dtrain_cli("train " + data_ + " --backend mpi");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output,
            "dtrain train: error: unknown --backend 'mpi'; valid backends: auto, gloo, nccl\n");
}

TEST_F(TrainCli, ProgressLinesEveryNStepsWithoutATerminalAndNoneWithQuiet) {
  Shell r = dtrain_cli("train " + data_ + " --epochs 1 --progress-steps 5 --progress-seconds 0");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("  epoch 1/1 step 5/12  images/sec "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  epoch 1/1 step 10/12  images/sec "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step 12/12"), std::string::npos) << "the epoch line follows";
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << "not redrawn in place without a terminal";
  EXPECT_NE(r.output.find("epoch 1/1  train_loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  top5 "), std::string::npos) << r.output;

  r = dtrain_cli("train " + data_ + " --epochs 1 --progress-steps 5 --quiet");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find(" step "), std::string::npos) << r.output;
}

// Every step takes far longer than a microsecond, so the time trigger fires
// after each step and the step trigger (1000) never does: no timing race.
TEST_F(TrainCli, ProgressLinesEveryTSecondsWithoutATerminal) {
  Shell r =
      dtrain_cli("train " + data_ + " --epochs 1 --progress-steps 1000 --progress-seconds 1e-6");
  ASSERT_EQ(r.code, 0) << r.output;
  for (int step = 1; step <= 11; ++step) {
    EXPECT_NE(r.output.find("  epoch 1/1 step " + std::to_string(step) + "/12  images/sec "),
              std::string::npos)
        << step << ":\n"
        << r.output;
  }
  EXPECT_EQ(r.output.find("step 12/12"), std::string::npos) << "the epoch line follows";
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << r.output;
}

// Whether a pseudo-terminal can be opened: a container without a devpts
// mount at /dev/pts has /dev/ptmx but no terminal to go with it.
bool can_open_terminal() {
  const int fd = posix_openpt(O_RDWR | O_NOCTTY);
  if (fd < 0) return false;
  const char* name = grantpt(fd) == 0 && unlockpt(fd) == 0 ? ptsname(fd) : nullptr;
  const bool ok = name != nullptr && access(name, F_OK) == 0;
  close(fd);
  return ok;
}

// `script` (util-linux, in Debian's essential bsdutils) gives the launcher a
// terminal; its output is what the terminal received ("\n" becomes "\r\n").
TEST_F(TrainCli, ProgressIsRedrawnInPlaceWithTheRankTagUnderDtrainRunOnATerminal) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no 'script' (util-linux) to give the launcher a terminal";
  }
  if (!can_open_terminal()) {
    GTEST_SKIP() << "no pseudo-terminal can be opened (no devpts mounted at /dev/pts)";
  }
  const std::string dtrain = DTRAIN_BINARY_DIR "/dtrain";
  const std::string run = dtrain + " run --nproc-per-node 1 -- " + dtrain + " train " + data_ +
                          " --epochs 1 --progress-steps 5";
  Shell r =
      testing::run_shell("timeout -k 5 120 script -qec '" + run + "' /dev/null </dev/null 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  // The last step is always drawn (the others at most every 0.1 s), then erased.
  EXPECT_NE(r.output.find("\r[rank0]:   epoch 1/1 step 12/12  images/sec "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\x1b[K\r[rank0]: \x1b[K"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\r[rank0]: \x1b[Kepoch 1/1  train_loss "), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("\n[rank0]:   epoch 1/1 step 5/12"), std::string::npos)
      << "no plain progress lines on a terminal";

  // Without a terminal the same run prints plain lines.
  r = testing::run_shell("timeout -k 5 120 " + run + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0]:   epoch 1/1 step 5/12  images/sec "), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << r.output;
}

// vgg16's minimum is 32x32; the tiny dataset's images are 12x12.
TEST_F(TrainCli, Vgg16OnImagesBelowItsMinimumNamesImageSizeAndThatFixTrains) {
  testing::write_tiny_dataset(dir_ / "small", 16, 8);  // 2 steps of 8
  const std::string args = "train --model vgg16 --dataset mnist --data-dir " +
                           (dir_ / "small").string() +
                           " --threads 1 --device cpu --batch-size 8 --epochs 1 --quiet";
  Shell r = dtrain_cli(args);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("dtrain train: error: model 'vgg16' needs images of at least 32x32, got "
                          "12x12; resize them to at least that, e.g. with --image-size 32 "),
            std::string::npos)
      << r.output;
  r = dtrain_cli(args + " --image-size 32");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("epoch 1/1  train_loss "), std::string::npos) << r.output;
}

// The refusal names the size the model was given, so it shows what each
// dataset made of --image-size 16.
TEST_F(TrainCli, ImageSizeIsHonouredByFixedSizeAndSyntheticDatasets) {
  for (const std::string& dataset :
       {data_, std::string("--dataset synthetic --threads 1 --device cpu"),
        std::string("--dataset synthetic --data-dir 3x40x40:10:16 --threads 1 --device cpu")}) {
    Shell r = dtrain_cli("train --model vgg16 " + dataset + " --image-size 16");
    EXPECT_EQ(r.code, 2) << dataset << ": " << r.output;
    EXPECT_NE(r.output.find("needs images of at least 32x32, got 16x16"), std::string::npos)
        << dataset << ": " << r.output;
  }
}

TEST_F(TrainCli, EvalOfATrainedCheckpointPrintsTop1Top5AndLossOverTheWholeSplit) {
  const std::string ckpt = (dir_ / "c").string();
  Shell r = dtrain_cli("train " + data_ +
                       " --epochs 1 --quiet --optimizer adamw --lr 1e-3 "
                       "--lr-schedule cosine --lr-warmup-steps 3 --label-smoothing 0.1 "
                       "--clip-grad-norm 5 --norm-weight-decay 0 --checkpoint-dir " +
                       ckpt);
  ASSERT_EQ(r.code, 0) << r.output;
  r = dtrain_cli("eval --model cnn --dataset mnist --data-dir " + (dir_ / "data").string() +
                 " --threads 1 --device cpu --batch-size 10 --checkpoint " + ckpt +
                 " --logits-file " + (dir_ / "logits.pt").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("weights from " + ckpt + "/checkpoint-00000012.pt"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("evaluated 32 samples on 1 rank(s): top-1 "), std::string::npos)
      << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir_ / "logits.pt"));
}

class ImageSize : public testing::ScratchDir {};

// 12x12 images up to 32 and down to 8 (where the antialiasing matters), the
// first test batch against torchvision (of this LibTorch's release) on the same pixels: Resize on
// float tensors (antialias=True) exactly, PIL's Resize within one 8-bit level
// (PIL resamples rows, then columns, rounding to 8 bits after each pass: up
// to half a level each; 1.01 leaves room for float rounding).
TEST_F(ImageSize, FixedSizeImagesAreResizedAsTorchvisionsResizeDoes) {
  if (!testing::python_has_torch()) GTEST_SKIP() << testing::reference_python_missing();
  testing::write_tiny_dataset(dir_, 16, 8);
  for (int64_t size : {32, 8}) {
    DatasetOptions o;
    o.name = "mnist";
    o.data_dir = dir_.string();
    o.image_size = size;
    o.test.batch_size = 8;
    DatasetSplits s = open_dataset(o, ProcessGroup());
    EXPECT_EQ(s.sample_shape, (std::vector<int64_t>{1, size, size}));
    ASSERT_TRUE(s.normalize);
    Batch batch;
    s.test->start_epoch(0);
    ASSERT_TRUE(s.test->next(batch));
    const at::Tensor x = s.normalize(batch.inputs);
    ASSERT_EQ(x.sizes(), at::IntArrayRef({8, 1, size, size}));
    const std::string ours = (dir_ / "ours.pt").string();
    testing::save_tensors(ours, {{"x", x}});
    const auto r = testing::run_peer(
        "resize.py", {dir_.string(), ours, std::to_string(size), "0.1307", "0.3081"});
    ASSERT_EQ(r.code, 0) << r.output;
    std::cout << "  " << size << " px: " << r.output;
    EXPECT_LE(std::stod(testing::value_of(r.output, "tensor_diff")), 1e-5) << r.output;
    EXPECT_LE(std::stod(testing::value_of(r.output, "pil_lsb")), 1.01) << r.output;
  }
}

// Compared as PyTorch 1.13 itself agrees with itself (torchvision's ResNet-18,
// CPU): eval-mode logits to ~1e-6, train-mode cross-entropy gradients to ~1e-5
// of their largest value. (The gradient of a plain sum through train-mode
// BatchNorm is a difference of near-equal terms and is not comparable.)
void expect_channels_last_equals_nchw(at::Device device) {
  torch::manual_seed(1);
  ModelOptions mo;
  mo.in_channels = 3;
  mo.image_size = 32;
  auto nchw = make_model("resnet18", mo);
  torch::manual_seed(1);
  auto nhwc = make_model("resnet18", mo);
  nchw->to(device);
  nhwc->to(device);
  to_channels_last(*nhwc);
  const at::Tensor conv1 = nhwc->named_parameters()["conv1.weight"];
  EXPECT_TRUE(conv1.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(conv1.is_contiguous());
  const at::Tensor x = at::randn({8, 3, 32, 32}).to(device);
  const at::Tensor x_nhwc = x.contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor targets = at::arange(8, at::kLong).to(device);
  {
    torch::NoGradGuard no_grad;
    nchw->eval();
    nhwc->eval();
    const double out = (nchw->forward(x) - nhwc->forward(x_nhwc)).abs().max().item<double>();
    std::cout << "  max eval logit difference NHWC vs NCHW: " << out << "\n";
    EXPECT_LE(out, 1e-5);
    nchw->train();
    nhwc->train();
  }
  classification_loss(nchw->forward(x), targets, 0).backward();
  classification_loss(nhwc->forward(x_nhwc), targets, 0).backward();
  const auto pa = nchw->named_parameters(), pb = nhwc->named_parameters();
  double worst = 0;
  for (const auto& item : pa) {
    const at::Tensor ga = item.value().grad(), gb = pb[item.key()].grad();
    const double scale = std::max(1.0, ga.abs().max().item<double>());
    worst = std::max(worst, (ga - gb).abs().max().item<double>() / scale);
  }
  std::cout << "  max train gradient difference NHWC vs NCHW (relative to the largest): " << worst
            << "\n";
  EXPECT_LE(worst, 1e-4);
}

TEST(ChannelsLast, ResNet18OutputsAndGradientsEqualNchw) {
  expect_channels_last_equals_nchw(at::Device(at::kCPU));
}

// ---- On a GPU (skipped without one) ---------------------------------------------

class OnGpu : public testing::ScratchDir {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible to LibTorch";
    ScratchDir::SetUp();
    testing::write_tiny_dataset(dir_ / "data", 96, 32);
  }
  TrainOptions options(const std::string& amp, bool channels_last) const {
    TrainOptions o;
    o.model = "cnn";
    o.dataset.name = "mnist";
    o.dataset.data_dir = (dir_ / "data").string();
    o.epochs = 2;
    o.batch_size = 8;
    o.device = DeviceChoice::cuda();
    o.amp = parse_amp_mode(amp);
    o.channels_last = channels_last;
    o.clip_grad_norm = 1.0;
    o.progress = TrainOptions::Progress::kNone;
    o.optimizer.type = OptimizerType::kAdamW;
    o.optimizer.lr = 1e-3;
    return o;
  }
};

// What a user gets on a GPU without flags: cuda:<local rank>, NCCL, and the
// benchmark's peak memory and TFLOP/s.
TEST_F(OnGpu, ADefaultRunUnderDtrainRunUsesNcclOnCudaAndReportsPeakMemory) {
  Shell r = dtrain_cli("run --nproc-per-node 1 -- " DTRAIN_BINARY_DIR
                       "/dtrain bench train --model cnn --batch-size 8 --steps 2 "
                       "--warmup-steps 1 --display-every 1 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Processes:   1 (nccl), device cuda:0"), std::string::npos) << r.output;
  const size_t brace = r.output.rfind("{\"");
  ASSERT_NE(brace, std::string::npos) << r.output;
  const std::string json = r.output.substr(brace);
  EXPECT_EQ(json.find("\"peak_mem_gib\":null"), std::string::npos) << json;
  EXPECT_NE(json.find("\"peak_mem_gib\":"), std::string::npos) << json;

  r = dtrain_cli("run --nproc-per-node 1 -- " DTRAIN_BINARY_DIR "/dtrain bench collective -e 1K");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("nccl"), std::string::npos) << r.output;

  // Two ranks (the DDP parameter check, metric sums and evaluation run over
  // NCCL too: Note [CPU tensors on an NCCL group]).
  if (torch::cuda::device_count() < 2) return;
  r = dtrain_cli("run --nproc-per-node 2 -- " DTRAIN_BINARY_DIR "/dtrain train --model cnn " +
                 std::string("--dataset mnist --data-dir ") + (dir_ / "data").string() +
                 " --batch-size 8 --epochs 1 --quiet");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("epoch 1/1  train_loss "), std::string::npos) << r.output;
}

TEST_F(OnGpu, Fp16TrainingScalesTheLossAndReportsTheScale) {
  const auto history = train(options("fp16", true), ProcessGroup(), nullptr);
  ASSERT_EQ(history.size(), 2u);
  // 24 steps: no growth yet (2000 clean steps), at most a few backoffs.
  EXPECT_GT(history[1].loss_scale, 0);
  EXPECT_LE(history[1].loss_scale, 65536.0);
  EXPECT_LT(history[1].train_loss, history[0].train_loss + 0.5);
}

TEST_F(OnGpu, Bf16AndChannelsLastTrainAndMatchFp32Closely) {
  const auto fp32 = train(options("none", false), ProcessGroup(), nullptr);
  const auto bf16 = train(options("bf16", true), ProcessGroup(), nullptr);
  ASSERT_EQ(fp32.size(), 2u);
  ASSERT_EQ(bf16.size(), 2u);
  EXPECT_EQ(bf16[1].loss_scale, 0) << "no loss scaling under bf16";
  EXPECT_NEAR(bf16[1].train_loss, fp32[1].train_loss, 0.1);
}

// ChannelsLast.ResNet18OutputsAndGradientsEqualNchw on cuda:0, with TF32 off (cuDNN and cuBLAS
// would otherwise round the convolutions' and the classifier's inputs to 10-bit mantissas).
TEST_F(OnGpu, ChannelsLastResNet18OutputsAndGradientsEqualNchwOnCuda0) {
  at::Context& ctx = at::globalContext();
  const bool cudnn_tf32 = ctx.allowTF32CuDNN(), cublas_tf32 = ctx.allowTF32CuBLAS();
  ctx.setAllowTF32CuDNN(false);
  ctx.setAllowTF32CuBLAS(false);
  expect_channels_last_equals_nchw(at::Device(at::kCUDA, 0));
  ctx.setAllowTF32CuDNN(cudnn_tf32);
  ctx.setAllowTF32CuBLAS(cublas_tf32);
}

}  // namespace
}  // namespace dtrain
