// `dtrain store`: a standalone c10d TCP store, for live recovery's store off
// the workers' nodes (Note [Where the live store lives] in
// src/launch/agent/agent.cpp) or any rendezvous that should not live on a
// worker node: `dtrain run --rdzv-backend c10d --rdzv-endpoint HOST:PORT`
// on every node, with this command on HOST.
#include <csignal>
#include <ctime>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "dtrain/store.h"

namespace dtrain::cli {
namespace {

// Serves until SIGINT, SIGTERM or SIGHUP. The signals are blocked before the
// server's threads start (they inherit the mask), so only this thread takes
// them, from sigtimedwait.
int serve(int port) {
  sigset_t stop;
  sigemptyset(&stop);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop, s);
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &stop, &old);
  TcpStoreServerOptions o;
  o.port = port;
  auto server = TcpStoreServer::start(o);
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
  std::cerr << "dtrain store: stopped by signal " << sig << std::endl;
  return 0;
}

}  // namespace

void add_store_command(CLI::App& root, int* exit_code) {
  auto port = std::make_shared<int>(29400);
  CLI::App* cmd = root.add_subcommand(
      "store",
      "Serve a c10d TCP store (the rendezvous and live recovery's store, off the workers' nodes)");
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
