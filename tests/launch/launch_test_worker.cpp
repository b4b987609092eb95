// A scriptable worker for the launcher tests. Arguments are steps run in order:
//   print TEXT | eprint TEXT | partial TEXT   a line on stdout / stderr, or text without newline
//   env NAME                                  prints NAME=<value>, or "NAME is unset"
//   connect                                   TCP-connects to MASTER_ADDR:MASTER_PORT, prints
//   "connected" pidfile DIR                               writes its pid to DIR/rank<RANK>.pid
//   ignore-term                               ignores SIGTERM from now on
//   sleep MS | exit CODE | raise SIGNUM       (raise disables core dumps first)
//   rank R STEP...                            runs the next step only when RANK == R
//   attempt N STEP...                         runs the next step only when
//                                             TORCHELASTIC_RESTART_COUNT == N
//   world N STEP...                           runs the next step only when
//                                             WORLD_SIZE == N
//   join N STEP...                            runs the next step only when
//                                             DTRAIN_LIVE_JOIN == N (0 when unset)
//   errorfile TEXT                            writes a torchelastic error record
//                                             with message TEXT to TORCHELASTIC_ERROR_FILE

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool connect_to_master() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(env("MASTER_PORT"))));
  ::inet_pton(AF_INET, env("MASTER_ADDR").c_str(), &a.sin_addr);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int only_rank = -1;
  int only_attempt = -1;
  int only_world = -1;
  int only_join = -1;
  for (int i = 1; i < argc; ++i) {
    std::string step = argv[i];
    std::string arg = (i + 1 < argc) ? argv[i + 1] : "";
    bool takes_arg = step != "connect" && step != "ignore-term";
    if (takes_arg) ++i;
    if (step == "rank") {
      only_rank = std::stoi(arg);
      continue;
    }
    if (step == "attempt") {
      only_attempt = std::stoi(arg);
      continue;
    }
    if (step == "world") {
      only_world = std::stoi(arg);
      continue;
    }
    if (step == "join") {
      only_join = std::stoi(arg);
      continue;
    }
    bool skip =
        (only_rank >= 0 && std::to_string(only_rank) != env("RANK")) ||
        (only_attempt >= 0 && std::to_string(only_attempt) != env("TORCHELASTIC_RESTART_COUNT")) ||
        (only_world >= 0 && std::to_string(only_world) != env("WORLD_SIZE")) ||
        (only_join >= 0 &&
         std::to_string(only_join) != (env("DTRAIN_LIVE_JOIN") == "1" ? "1" : "0"));
    only_join = -1;
    only_rank = -1;
    only_attempt = -1;
    only_world = -1;
    if (skip) continue;
    if (step == "print") {
      std::printf("%s\n", arg.c_str());
    } else if (step == "eprint") {
      std::fprintf(stderr, "%s\n", arg.c_str());
    } else if (step == "partial") {
      std::printf("%s", arg.c_str());
    } else if (step == "env") {
      const char* v = std::getenv(arg.c_str());
      if (v)
        std::printf("%s=%s\n", arg.c_str(), v);
      else
        std::printf("%s is unset\n", arg.c_str());
    } else if (step == "connect") {
      std::printf("%s\n", connect_to_master() ? "connected" : "connect failed");
    } else if (step == "pidfile") {
      std::ofstream(arg + "/rank" + env("RANK") + ".pid") << ::getpid() << "\n";
    } else if (step == "errorfile") {
      std::ofstream(env("TORCHELASTIC_ERROR_FILE"))
          << "{\"message\": {\"message\": \"" << arg
          << "\", \"extraInfo\": {\"py_callstack\": \"\", \"timestamp\": \"0\"}}}\n";
    } else if (step == "ignore-term") {
      std::signal(SIGTERM, SIG_IGN);
    } else if (step == "sleep") {
      std::fflush(nullptr);
      std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(arg)));
    } else if (step == "exit") {
      std::fflush(nullptr);
      return std::stoi(arg);
    } else if (step == "raise") {
      std::fflush(nullptr);
      rlimit no_core{0, 0};
      ::setrlimit(RLIMIT_CORE, &no_core);
      std::signal(std::stoi(arg), SIG_DFL);
      std::raise(std::stoi(arg));
    } else {
      std::fprintf(stderr, "launch_test_worker: unknown step '%s'\n", step.c_str());
      return 99;
    }
    std::fflush(nullptr);
  }
  return 0;
}
