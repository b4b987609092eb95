#pragma once
// Running a shell command from a test and keeping its exit code and output.

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace dtrain::testing {

struct ShellRun {
  int code = -1;       ///< exit code, or 128 + signal
  std::string output;  ///< what the command printed (callers add 2>&1 for stderr)
};

/// Runs `cmd` with /bin/sh and waits for it; bound its time inside `cmd`
/// (e.g. `timeout -k 5 120 ...`).
inline ShellRun run_shell(const std::string& cmd) {
  ShellRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace dtrain::testing
