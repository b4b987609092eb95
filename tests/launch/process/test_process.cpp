// Process control (process.h): finding the program like execvp, fork + exec
// with a process group of its own, reaping, and exit descriptions.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <csignal>

#include "dtrain/errors.h"
#include "launch/launch_test_util.h"
#include "launch/process/process.h"

namespace dtrain::detail {
namespace {

using dtrain::testing::read_file;
using dtrain::testing::TempDir;
using ::testing::HasSubstr;

TEST(FindProgram, SearchesPathLikeExecvpAndNamesTheProgramWhenMissing) {
  EXPECT_EQ(find_program("sh", "/nonexistent:/bin"), "/bin/sh");
  EXPECT_EQ(find_program("/bin/sh", ""), "/bin/sh");
  EXPECT_THAT([] { find_program("no-such-prog", "/bin:/usr/bin"); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  HasSubstr("program 'no-such-prog' not found on PATH (/bin:/usr/bin)")));
  EXPECT_THAT([] { find_program("./missing/prog", "/bin"); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  HasSubstr("cannot run './missing/prog': No such file or directory")));
}

TEST(PosixProcessControl, ExecFailureIsReportedNamingTheProgram) {
  TempDir dir;
  std::string path = dir.file("not-executable");
  { std::ofstream(path) << "data"; }
  ::chmod(path.c_str(), 0644);
  PosixProcessControl control;
  ProcessSpec spec;
  spec.path = path;
  spec.argv = {path};
  EXPECT_THAT(
      [&] { control.start(spec); },
      ::testing::ThrowsMessage<Error>(HasSubstr("cannot start '" + path + "': Permission denied")));
}

TEST(PosixProcessControl, ChildIsAProcessGroupLeaderAndItsStatusIsReported) {
  PosixProcessControl control;
  ProcessSpec spec;
  spec.path = "/bin/sh";
  spec.argv = {"sh", "-c", "[ $(ps -o pgid= -p $$) -eq $$ ] && exit 5; exit 6"};
  spec.env = {"PATH=/usr/bin:/bin"};
  auto p = control.start(spec);
  std::optional<ExitStatus> status;
  ASSERT_TRUE(dtrain::testing::eventually([&] { return (status = p->poll()).has_value(); },
                                          std::chrono::seconds(10)));
  EXPECT_EQ(status->exit_code, 5);
  EXPECT_EQ(p->poll()->exit_code, 5);  // stable once reaped
}

TEST(PosixProcessControl, DestroyingARunningProcessKillsAndReapsIt) {
  PosixProcessControl control;
  ProcessSpec spec;
  spec.path = "/bin/sleep";
  spec.argv = {"sleep", "60"};
  int pid;
  {
    auto p = control.start(spec);
    pid = p->pid();
    ASSERT_TRUE(dtrain::testing::process_alive(pid));
  }
  EXPECT_NE(::kill(pid, 0), 0) << "reaped, so the pid no longer exists";
}

TEST(DescribeExit, NamesExitCodesAndSignals) {
  EXPECT_EQ(describe_exit(3, 0), "exit code 3");
  EXPECT_EQ(describe_exit(-1, SIGSEGV), "killed by SIGSEGV");
  EXPECT_EQ(describe_exit(-1, SIGKILL), "killed by SIGKILL");
  EXPECT_EQ(describe_exit(-1, 0), "did not exit");
  EXPECT_EQ(signal_name(SIGRTMIN + 1), "signal " + std::to_string(SIGRTMIN + 1));
}

}  // namespace
}  // namespace dtrain::detail
