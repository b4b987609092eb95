// The environment -> options module against every launcher's environment:
// torchrun/PyTorchJob, mpirun (Open MPI), mpiexec (PMI), srun (Slurm), their
// precedence, partial sets, Slurm's host lists; and error-file recording.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <map>

#include "comm/env.h"
#include "common/error_file.h"
#include "dtrain/backend.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/elastic.h"
#include "dtrain/errors.h"
#include "support/env.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;
using testing::env_of;
using testing::error_of;
using Vars = std::map<std::string, std::string>;

InitOptions resolve(const Vars& vars) { return resolve_init_options({}, env_of(vars)); }
std::string resolve_error(const Vars& vars) {
  return error_of([&] { resolve(vars); });
}

const Vars kOpenMpi = {{"OMPI_COMM_WORLD_RANK", "3"},       {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                       {"MASTER_ADDR", "10.0.0.1"},         {"MASTER_PORT", "29501"}};
const Vars kSlurm = {{"SLURM_PROCID", "5"},
                     {"SLURM_NTASKS", "8"},
                     {"SLURM_LOCALID", "1"},
                     {"SLURM_NODEID", "1"},
                     {"SLURM_TASKS_PER_NODE", "4(x2)"},
                     {"SLURM_JOB_NODELIST", "gpu[07-08]"}};

Vars with(Vars base, const Vars& extra) {
  for (const auto& [k, v] : extra) base[k] = v;
  return base;
}
Vars without(Vars base, const std::string& name) {
  base.erase(name);
  return base;
}

TEST(ClusterEnv, PyTorchJobOneProcessPerPodDefaultsLocalRankToZero) {
  InitOptions o = resolve({{"RANK", "2"},
                           {"WORLD_SIZE", "4"},
                           {"MASTER_ADDR", "job-master-0"},
                           {"MASTER_PORT", "23456"}});
  EXPECT_EQ(o.rank, 2);
  EXPECT_EQ(o.world_size, 4);
  EXPECT_EQ(o.local_rank, 0);
  EXPECT_EQ(o.local_world_size, 1);
  EXPECT_EQ(o.init_method, "tcp://job-master-0:23456");
  EXPECT_FALSE(o.launcher_hosts_store) << "rank 0 hosts the store in a PyTorchJob";
}

TEST(ClusterEnv, OpenMpiGivesRankSizeLocalRankAndRankZeroHostsTheStore) {
  InitOptions o = resolve(kOpenMpi);
  EXPECT_EQ(o.rank, 3);
  EXPECT_EQ(o.world_size, 4);
  EXPECT_EQ(o.local_rank, 1);
  EXPECT_EQ(o.local_world_size, 2);
  EXPECT_EQ(o.init_method, "tcp://10.0.0.1:29501");
  EXPECT_FALSE(o.launcher_hosts_store);
}

TEST(ClusterEnv, OpenMpiWithoutStoreAddressNamesBothVariablesAndTheMpirunFlags) {
  EXPECT_EQ(resolve_error(without(without(kOpenMpi, "MASTER_ADDR"), "MASTER_PORT")),
            "mpirun (Open MPI) started this process (OMPI_COMM_WORLD_RANK=3, "
            "OMPI_COMM_WORLD_SIZE=4) but MASTER_ADDR, MASTER_PORT are not set; every rank must "
            "know where rank 0 hosts the store: mpirun -x MASTER_ADDR=<host of rank 0> "
            "-x MASTER_PORT=29500 ...");
  EXPECT_EQ(resolve_error(without(kOpenMpi, "MASTER_ADDR")),
            "mpirun (Open MPI) started this process (OMPI_COMM_WORLD_RANK=3, "
            "OMPI_COMM_WORLD_SIZE=4) but MASTER_ADDR is not set; every rank must know where "
            "rank 0 hosts the store: mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=29500 "
            "...");
}

TEST(ClusterEnv, OpenMpiWithOneProcessIsTheSingleProcessGroupWithoutAStore) {
  InitOptions o = resolve({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}});
  EXPECT_EQ(o.rank, 0);
  EXPECT_EQ(o.world_size, 1);
  EXPECT_EQ(o.init_method, "env://");
}

TEST(ClusterEnv, OpenMpiRankMustBeBelowSize) {
  EXPECT_EQ(resolve_error(with(kOpenMpi, {{"OMPI_COMM_WORLD_RANK", "4"}})),
            "environment variable OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4");
  EXPECT_EQ(resolve_error(with(kOpenMpi, {{"OMPI_COMM_WORLD_LOCAL_SIZE", "two"}})),
            "environment variable OMPI_COMM_WORLD_LOCAL_SIZE='two' is not an integer");
}

TEST(ClusterEnv, PmiGivesRankSizeAndMpichLocalRank) {
  InitOptions o = resolve({{"PMI_RANK", "1"},
                           {"PMI_SIZE", "2"},
                           {"MPI_LOCALRANKID", "1"},
                           {"MPI_LOCALNRANKS", "2"},
                           {"MASTER_ADDR", "h0"},
                           {"MASTER_PORT", "4000"}});
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.world_size, 2);
  EXPECT_EQ(o.local_rank, 1);
  EXPECT_EQ(o.local_world_size, 2);
  EXPECT_EQ(o.init_method, "tcp://h0:4000");
  EXPECT_EQ(resolve_error({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}),
            "mpiexec (MPICH, Intel MPI) started this process (PMI_RANK=1, PMI_SIZE=2) but "
            "MASTER_ADDR, MASTER_PORT are not set; every rank must know where rank 0 hosts the "
            "store: mpiexec -genv MASTER_ADDR <host of rank 0> -genv MASTER_PORT 29500 ...");
}

TEST(ClusterEnv, SlurmDefaultsTheStoreToTheFirstNodeOnPort29500) {
  InitOptions o = resolve(kSlurm);
  EXPECT_EQ(o.rank, 5);
  EXPECT_EQ(o.world_size, 8);
  EXPECT_EQ(o.local_rank, 1);
  EXPECT_EQ(o.local_world_size, 4);
  EXPECT_EQ(o.init_method, "tcp://gpu07:29500");
  EXPECT_FALSE(o.launcher_hosts_store);
}

TEST(ClusterEnv, SlurmTakesMasterAddrAndPortWhenSet) {
  InitOptions o = resolve(with(kSlurm, {{"MASTER_ADDR", "login1"}, {"MASTER_PORT", "31000"}}));
  EXPECT_EQ(o.init_method, "tcp://login1:31000");
  // SLURM_NODELIST is the older name of SLURM_JOB_NODELIST.
  Vars old = without(kSlurm, "SLURM_JOB_NODELIST");
  old["SLURM_NODELIST"] = "cn[3-4]";
  EXPECT_EQ(resolve(old).init_method, "tcp://cn3:29500");
}

TEST(ClusterEnv, SlurmLocalSizeIsThisNodesEntryUnlessTasksPerNodeIsFixed) {
  Vars uneven = with(
      kSlurm, {{"SLURM_TASKS_PER_NODE", "3(x2),2"}, {"SLURM_NODEID", "2"}, {"SLURM_PROCID", "6"}});
  EXPECT_EQ(resolve(uneven).local_world_size, 2);
  EXPECT_EQ(resolve(with(uneven, {{"SLURM_NTASKS_PER_NODE", "3"}})).local_world_size, 3);
  EXPECT_EQ(resolve(without(uneven, "SLURM_NODEID")).local_world_size, 3) << "first entry";
  EXPECT_EQ(resolve_error(with(kSlurm, {{"SLURM_TASKS_PER_NODE", "4(x"}})),
            "environment variable SLURM_TASKS_PER_NODE='4(x' is not a Slurm task count list: "
            "'4(x' is not N or N(xM)");
}

TEST(ClusterEnv, SlurmWithoutNodeListOrMasterAddrNamesBoth) {
  EXPECT_EQ(resolve_error(without(kSlurm, "SLURM_JOB_NODELIST")),
            "srun (Slurm) started this process (SLURM_PROCID=5, SLURM_NTASKS=8) but MASTER_ADDR "
            "(or SLURM_JOB_NODELIST) is not set; every rank must know where rank 0 hosts the "
            "store: export MASTER_ADDR=<host of rank 0> MASTER_PORT=29500 before srun");
}

TEST(ClusterEnv, MalformedNodeListNamesTheVariable) {
  EXPECT_EQ(resolve_error(with(kSlurm, {{"SLURM_JOB_NODELIST", "gpu[07-"}})),
            "environment variable SLURM_JOB_NODELIST='gpu[07-' is not a Slurm host list: "
            "unclosed '['");
}

TEST(ClusterEnv, ExplicitRankBeatsOpenMpiBeatsPmiBeatsSlurm) {
  const Vars pmi = {{"PMI_RANK", "1"}, {"PMI_SIZE", "8"}};
  const Vars torchrun = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}};
  // torchrun started under mpirun inside a Slurm job.
  EXPECT_EQ(resolve(with(with(with(kSlurm, pmi), kOpenMpi), torchrun)).world_size, 2);
  EXPECT_EQ(resolve(with(with(kSlurm, pmi), kOpenMpi)).world_size, 4);
  EXPECT_EQ(resolve(with(with(kSlurm, pmi), {{"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}})).rank, 1);
}

TEST(ClusterEnv, PartialSetsNameThePresentAndMissingVariables) {
  EXPECT_EQ(resolve_error({{"OMPI_COMM_WORLD_RANK", "0"}}),
            "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not; both are set by mpirun "
            "(Open MPI) for every process it starts");
  EXPECT_EQ(resolve_error({{"PMI_SIZE", "2"}}),
            "PMI_SIZE is set but PMI_RANK is not; both are set by mpiexec (MPICH, Intel MPI) for "
            "every process it starts");
  EXPECT_EQ(resolve_error({{"SLURM_PROCID", "0"}}),
            "SLURM_PROCID is set but SLURM_NTASKS is not; both are set by srun (Slurm) for every "
            "process it starts");
  // A store address alone is torchrun's contract, half set.
  EXPECT_EQ(resolve_error({{"MASTER_ADDR", "h"}}),
            "MASTER_ADDR is set but RANK, WORLD_SIZE, MASTER_PORT are not; set all of RANK, "
            "WORLD_SIZE, MASTER_ADDR, MASTER_PORT (or start the program with 'dtrain run')");
  // SLURM_NTASKS alone (a salloc shell) is not a worker of srun.
  EXPECT_EQ(resolve({{"SLURM_NTASKS", "4"}}).world_size, 1);
}

TEST(SlurmNodeList, ExpandsRangesListsAndPlainHostsInOrder) {
  using V = std::vector<std::string>;
  EXPECT_EQ(detail::expand_nodelist("node[01-03,7],gpu5"),
            (V{"node01", "node02", "node03", "node7", "gpu5"}));
  EXPECT_EQ(detail::expand_nodelist("single"), (V{"single"}));
  EXPECT_EQ(detail::expand_nodelist("n[8-10]"), (V{"n8", "n9", "n10"}));
  EXPECT_EQ(detail::expand_nodelist("n[098-100]-ib"), (V{"n098-ib", "n099-ib", "n100-ib"}));
  EXPECT_EQ(detail::expand_nodelist("r[1-2]n[1-2]"), (V{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(detail::expand_nodelist("a,b[1],c"), (V{"a", "b1", "c"}));
}

TEST(SlurmNodeList, MalformedListsAreErrorsSayingWhy) {
  auto e = [](const char* list) { return error_of([&] { detail::expand_nodelist(list); }); };
  EXPECT_EQ(e("n[1-"), "'n[1-' is not a Slurm host list: unclosed '['");
  EXPECT_EQ(e("n1]"), "'n1]' is not a Slurm host list: unmatched ']'");
  EXPECT_EQ(e("n[3-1]"), "'n[3-1]' is not a Slurm host list: range '3-1' is descending");
  EXPECT_EQ(e("n[a-b]"), "'n[a-b]' is not a Slurm host list: 'a-b' is not a number or a range N-M");
  EXPECT_EQ(e("a,,b"), "'a,,b' is not a Slurm host list: empty host name");
  EXPECT_EQ(e(""), "'' is not a Slurm host list: empty host name");
  EXPECT_EQ(e("n[]"), "'n[]' is not a Slurm host list: empty '[]'");
  EXPECT_EQ(e("n[0-999999999]"), "'n[0-999999999]' is not a Slurm host list: too many hosts");
}

TEST(SlurmTasksPerNode, ExpandsRepeatCounts) {
  EXPECT_EQ(detail::expand_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(detail::expand_tasks_per_node("4"), (std::vector<int>{4}));
  EXPECT_EQ(error_of([] { detail::expand_tasks_per_node("0"); }),
            "'0' is not a Slurm task count list: '0' is not N or N(xM)");
}

TEST(ResolveErrorFile, ReadsThePathAndTheRankOfEveryLauncher) {
  ErrorFileOptions none = resolve_error_file(env_of({}));
  EXPECT_EQ(none.path, "");
  EXPECT_EQ(none.rank, -1);
  EXPECT_EQ(none.local_rank, -1);
  ErrorFileOptions t = resolve_error_file(
      env_of({{"TORCHELASTIC_ERROR_FILE", "/tmp/e.json"}, {"RANK", "3"}, {"LOCAL_RANK", "1"}}));
  EXPECT_EQ(t.path, "/tmp/e.json");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.local_rank, 1);
  ErrorFileOptions m = resolve_error_file(env_of(kOpenMpi));
  EXPECT_EQ(m.rank, 3);
  EXPECT_EQ(m.local_rank, 1);
  ErrorFileOptions s = resolve_error_file(env_of(kSlurm));
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.local_rank, 1);
}

TEST(ResolveErrorFile, MalformedRanksAreUnknownNotErrors) {
  ErrorFileOptions o = resolve_error_file(env_of({{"RANK", "x"}, {"SLURM_PROCID", "2"}}));
  EXPECT_EQ(o.rank, 2) << "the next launcher's rank is still a good guess";
  EXPECT_EQ(resolve_error_file(env_of({{"RANK", "-4"}})).rank, -1);
}

class RecordError : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dtrain_record_error_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(RecordError, WritesTheDemangledTypeRankHostAndPid) {
  ErrorFileOptions o;
  o.path = (dir_ / "nested" / "error.json").string();
  o.rank = 4;
  o.local_rank = 0;
  ASSERT_TRUE(record_error(TimeoutError("allreduce timed out after 30 s on rank 4"), o));
  auto r = detail::read_error_file(o.path);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->message, "allreduce timed out after 30 s on rank 4");
  EXPECT_EQ(r->error_type, "dtrain::TimeoutError");
  EXPECT_EQ(r->rank, 4);
  EXPECT_EQ(r->local_rank, 0);
  EXPECT_EQ(r->pid, ::getpid());
  EXPECT_FALSE(r->host.empty());
  EXPECT_GT(r->timestamp, 1.6e9);
}

TEST_F(RecordError, WithoutAPathNothingIsWritten) {
  EXPECT_FALSE(record_error(std::runtime_error("x"), ErrorFileOptions{}));
  EXPECT_FALSE(fs::exists(dir_));
}

TEST_F(RecordError, RunWithErrorFileReturnsOneAndPassesResultsThrough) {
  EXPECT_EQ(run_with_error_file([] { return 7; }), 7);
  EXPECT_EQ(run_with_error_file([]() -> int { throw DataError("bad"); }), 1);
}

// ---- The backend rule (--backend) -------------------------------------------

const c10::Device kCpu(c10::kCPU);
const c10::Device kCuda1(c10::kCUDA, 1);

TEST(ResolveBackend, AutoIsNcclOnCudaDevicesInABuildWithNcclAndGlooOtherwise) {
  EXPECT_EQ(resolve_backend("auto", kCpu), "gloo");
  // A CUDA-less build never fails on "auto", even for a CUDA device.
  EXPECT_EQ(resolve_backend("auto", kCuda1), DTRAIN_HAVE_NCCL ? "nccl" : "gloo");
}

TEST(ResolveBackend, GlooIsKeptOnEveryDevice) {
  EXPECT_EQ(resolve_backend("gloo", kCpu), "gloo");
  EXPECT_EQ(resolve_backend("gloo", kCuda1), "gloo");
}

TEST(ResolveBackend, NcclWithoutNcclOrWithoutACudaDeviceIsAnErrorNamingBackendGloo) {
  const std::string on_cpu = error_of([] { resolve_backend("nccl", kCpu); });
  EXPECT_NE(on_cpu.find("use InitOptions::backend gloo"), std::string::npos) << on_cpu;
  EXPECT_EQ(on_cpu.find('\n'), std::string::npos) << on_cpu;
  if (DTRAIN_HAVE_NCCL) {
    EXPECT_EQ(resolve_backend("nccl", kCuda1), "nccl");
    EXPECT_NE(on_cpu.find("the device is cpu"), std::string::npos) << on_cpu;
  } else {
    EXPECT_EQ(error_of([] { resolve_backend("nccl", kCuda1); }),
              "InitOptions::backend nccl needs a LibTorch built with CUDA and NCCL; this build "
              "is CPU-only, use InitOptions::backend gloo");
  }
  EXPECT_THROW(resolve_backend("nccl", kCpu), InvalidArgument);
}

// Note [A GPU per NCCL rank]: NCCL refuses two ranks of one communicator on
// one GPU, so ranks that share one get Gloo from "auto" and an error from
// "nccl" (seen on an H200 with three processes on its one GPU).
TEST(ResolveBackend, RanksSharingAGpuGetGlooFromAutoAndAnErrorFromNccl) {
  EXPECT_EQ(resolve_backend("auto", kCuda1, 3), "gloo");
  EXPECT_EQ(resolve_backend("gloo", kCuda1, 3), "gloo");
  EXPECT_EQ(resolve_backend("auto", kCpu, 3), "gloo");
  const std::string shared = error_of([] { resolve_backend("nccl", kCuda1, 3); });
  if (DTRAIN_HAVE_NCCL) {
    EXPECT_EQ(shared,
              "InitOptions::backend nccl needs a GPU per rank but 3 ranks of this node share "
              "cuda:1; use InitOptions::backend gloo or one process per GPU");
  } else {
    EXPECT_NE(shared.find("this build is CPU-only"), std::string::npos) << shared;
  }
}

TEST(ResolveBackend, RanksPerGpuIsTheCeilingOfRanksOverGpus) {
  EXPECT_EQ(ranks_per_gpu(1, 1), 1);
  EXPECT_EQ(ranks_per_gpu(3, 1), 3);
  EXPECT_EQ(ranks_per_gpu(8, 8), 1);
  EXPECT_EQ(ranks_per_gpu(9, 8), 2);
  EXPECT_EQ(ranks_per_gpu(4, 0), 1);  // no GPU: nothing is shared
}

TEST(ResolveBackend, AnUnknownNameIsAnErrorListingTheBackends) {
  EXPECT_THROW(resolve_backend("mpi", kCpu), InvalidArgument);
  EXPECT_EQ(error_of([] { resolve_backend("mpi", kCpu); }),
            "unknown InitOptions::backend 'mpi'; valid backends: auto, gloo, nccl");
}

}  // namespace
}  // namespace dtrain
