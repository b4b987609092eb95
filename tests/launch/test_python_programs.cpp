// PyTorch DDP programs (Gloo, env://, @record) under `dtrain run`: on Debian's
// torch 1.13 and on PyPI's torch 2.x (scripts/peer-torch.sh), whose c10d
// clients speak different TCPStore dialects; dtrain's store serves both
// (src/comm/store_server). Single node, two nodes on loopback, restarts and
// the root cause from @record's error file. Each test skips, saying why, when
// its python is not installed.

#include <gtest/gtest.h>

#include "common/strings.h"
#include "support/http.h"
#include "support/peer_torch.h"
#include "support/shell.h"

namespace dtrain {
namespace {

using testing::run_shell;

const std::string kProgram = DTRAIN_SOURCE_DIR "/tests/launch/python/ddp_program.py";

enum class Peer { k113, k2x };

std::string python(Peer p) {
  return p == Peer::k113 ? testing::python_torch_113() : testing::python_torch_2x();
}

const char* why_absent(Peer p) {
  return p == Peer::k113 ? testing::kNoPeer113 : testing::kNoPeer2x;
}

// `dtrain run FLAGS -- PYTHON ddp_program.py`, bounded, with its output.
testing::ShellRun dtrain_run(const std::string& env, const std::string& flags,
                             const std::string& py) {
  return run_shell(cat("env ", env, " timeout -k 5 400 " DTRAIN_BINARY " run ", flags, " -- ", py,
                       " ", kProgram, " 2>&1"));
}

class PythonPrograms : public ::testing::TestWithParam<Peer> {
 protected:
  void SetUp() override {
    py_ = python(GetParam());
    if (py_.empty()) GTEST_SKIP() << why_absent(GetParam());
  }
  std::string version() const { return GetParam() == Peer::k113 ? "torch 1.13" : "torch 2."; }
  std::string py_;
};

TEST_P(PythonPrograms, TwoRanksTrainAndAllreduceUnderDtrainRun) {
  const auto r = dtrain_run("", "--nproc-per-node 2", py_);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0/2 allreduce 3 restart 0 " + version()), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rank 1/2 allreduce 3 restart 0 " + version()), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("dtrain: store:"), std::string::npos) << r.output;
}

TEST_P(PythonPrograms, AFailedRankIsRestartedAndTheGroupFinishes) {
  const auto r = dtrain_run("FAIL_RANK=1", "--nproc-per-node 2 --max-restarts 1", py_);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1/2 allreduce 3 restart 1"), std::string::npos) << r.output;
}

TEST_P(PythonPrograms, TheRootCauseComesFromRecordsErrorFile) {
  const auto r = dtrain_run("FAIL_RANK=1 FAIL_UNTIL_RESTART=9", "--nproc-per-node 2", py_);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("root cause: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 fails on purpose in attempt 0"), std::string::npos) << r.output;
}

TEST_P(PythonPrograms, TwoNodesOnLoopbackFormOneGroup) {
  const int port = testing::free_port();
  const std::string flags = cat("--nnodes 2 --nproc-per-node 1 --rdzv-backend c10d ",
                                "--rdzv-endpoint 127.0.0.1:", port, " --rdzv-id py");
  const std::string out = cat("/tmp/dtrain-pynode-", ::getpid());
  const auto r = run_shell(cat(
      "timeout -k 5 400 " DTRAIN_BINARY " run ", flags, " -- ", py_, " ", kProgram, " > ", out,
      " 2>&1 & pid=$!; sleep 1; timeout -k 5 400 " DTRAIN_BINARY " run ", flags, " -- ", py_, " ",
      kProgram, " 2>&1; echo second=$?; wait $pid; echo first=$?; cat ", out, "; rm -f ", out));
  EXPECT_NE(r.output.find("second=0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("first=0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0/2 allreduce 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1/2 allreduce 3"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Torch, PythonPrograms, ::testing::Values(Peer::k113, Peer::k2x),
                         [](const auto& info) {
                           return std::string(info.param == Peer::k113 ? "Torch113" : "Torch2x");
                         });

}  // namespace
}  // namespace dtrain

namespace dtrain {
namespace {

// The other direction: a dtrain program (here `dtrain bench ddp`) started by
// PyTorch 2.x's torchrun, whose agent hosts the store in 2.x's dialect. Built
// on LibTorch 2.x, dtrain's c10d client speaks it; built on 1.13 it cannot,
// and must say so in one line within seconds instead of c10d's silent retries.
TEST(DtrainUnderTorchrun2x, RunsOnA2xBuildAndNamesTheDialectOnA113Build) {
  const std::string py = testing::python_torch_2x();
  if (py.empty()) GTEST_SKIP() << testing::kNoPeer2x;
  const bool built_on_2x = std::string(DTRAIN_LIBTORCH_VERSION).rfind("1.", 0) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_shell(cat("timeout -k 5 400 ", py, " -m torch.distributed.run --no-python ",
                               "--nproc-per-node 2 --master-port ", testing::free_port(), " ",
                               DTRAIN_BINARY, " bench ddp --model cnn --steps 2 --warmup 1 2>&1"));
  const auto took = std::chrono::steady_clock::now() - t0;
  if (built_on_2x) {
    EXPECT_EQ(r.code, 0) << r.output;
  } else {
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("speaks PyTorch 2.x's TCPStore dialect"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("build dtrain on LibTorch 2.x"), std::string::npos) << r.output;
    // torchrun's own start-up takes most of it; c10d alone would retry for minutes.
    EXPECT_LT(took, std::chrono::seconds(150)) << r.output;
  }
}

}  // namespace
}  // namespace dtrain
