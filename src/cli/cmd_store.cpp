// `dtrain store`: a standalone c10d TCP store, for live recovery's store off
// the workers' nodes (Note [Where the live store lives] in
// src/launch/agent/agent.cpp) or any rendezvous that should not live on a
// worker node: `dtrain run --rdzv-backend c10d --rdzv-endpoint HOST:PORT`
// on every node, with this command on HOST.
#include <pthread.h>

#include <csignal>
#include <cstring>
#include <ctime>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/store.h"

namespace dtrain::cli {
namespace {

// Serves until SIGINT or SIGTERM; exits 0 then (a server's normal end). The
// signals are blocked before the server's threads start (they inherit the
// mask), so only this thread takes them, from sigtimedwait. A signal ignored
// at start (SIGINT of a background job, `nohup`) stays out of the set: a
// blocked signal is queued even when ignored, and would stop the store.
// SIGHUP keeps its default action, so `nohup` works as usual.
int serve(int port) {
  sigset_t stop;
  sigemptyset(&stop);
  for (int s : {SIGINT, SIGTERM}) {
    struct sigaction current {};
    if (sigaction(s, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    sigaddset(&stop, s);
  }
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &stop, &old);
  std::unique_ptr<TcpStoreServer> server;
  try {
    TcpStoreServerOptions o;
    o.port = port;
    server = TcpStoreServer::start(o);
  } catch (const StoreError& e) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw StoreError(cat("cannot listen on port ", port, " (", first_line(e.what()),
                         "); choose another --port, or stop what listens there"));
  }
  std::cerr << "dtrain store: serving c10d's TCPStore protocol (PyTorch 1.13 and 2.x clients) on "
               "port "
            << server->port()
            << " of every interface; point --rdzv-endpoint HOST:" << server->port()
            << " at it; SIGINT or SIGTERM stops it" << std::endl;
  int sig = -1;
  while (sig < 0) {
    timespec second{1, 0};
    sig = sigtimedwait(&stop, nullptr, &second);
  }
  server.reset();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  std::cerr << "dtrain store: stopped by " << strsignal(sig) << std::endl;
  return 0;
}

}  // namespace

void add_store_command(CLI::App& root, int* exit_code) {
  auto port = std::make_shared<int>(29400);
  CLI::App* cmd = root.add_subcommand(
      "store",
      "Serve a c10d TCP store (the rendezvous and live recovery's store, off the workers' "
      "nodes) until SIGINT or SIGTERM, then exit 0");
  cmd->add_option("--port", *port, "Port to listen on, every interface (0: a free one, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->callback([exit_code, port] {
    try {
      *exit_code = serve(*port);
    } catch (const std::exception& e) {
      *exit_code = report_error("dtrain store", e);
    }
  });
}

}  // namespace dtrain::cli
