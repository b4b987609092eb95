#include "ps/roles.h"

#include "ps/server.h"

namespace dtrain::ps {

void run_scheduler(const NodeOptions& options) {
  Endpoint node(options);
  node.start();
  node.barrier(kAllGroups, options.connect_timeout);  // ps-lite's Start
  node.barrier(kAllGroups, Millis::max());            // ps-lite's Finalize
  node.finish();
}

void run_server(const NodeOptions& options) {
  // Made on the receive thread at the first request, when the node table
  // (and so this server's rank) is known; requests before it are dropped.
  // Declared before the node, so the node's receive thread ends first.
  std::unique_ptr<KVServer> server;
  Endpoint node(options);
  node.set_data_handler([&](Message& msg) {
    if (node.my_id() == kEmpty) return;
    if (!server) {
      server = std::make_unique<KVServer>(
          ServerOptions{node.rank(), options.num_servers, options.num_workers},
          [&node](int recver, const Message& reply) { node.send(recver, reply); });
    }
    server->handle(msg);
  });
  node.set_tick_handler([&] {
    if (server) server->tick(std::chrono::steady_clock::now());
  });
  node.start();
  node.barrier(kAllGroups, options.connect_timeout);
  node.barrier(kAllGroups, Millis::max());
  node.finish();
}

}  // namespace dtrain::ps
