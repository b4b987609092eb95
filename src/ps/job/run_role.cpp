#include "ps/job/run_role.h"

#include <mutex>

#include "common/strings.h"
#include "ps/server/server.h"

namespace dtrain::ps {

void run_scheduler(const NodeOptions& options) {
  Node node(options);
  node.start();
  node.barrier(kAllGroups, options.connect_timeout);  // ps-lite's Start
  // ps-lite's Finalize: it lasts the whole job, so no deadline of its own;
  // ended by failure detection or Note [Final barrier deadline].
  node.barrier(kAllGroups, Millis::max());
  node.finish();
}

void run_server(const NodeOptions& options) {
  // Made at the first request or right after start(), whichever is first,
  // when the node table (and so this server's rank) is known; requests
  // before it are dropped. With recovery on it then removes (new job) or
  // loads (a replacement, Note [Node recovery]) the rank's snapshot.
  // Declared before the node, so the node's threads end first.
  std::mutex mu;  // guards server and broken; held over file I/O, never the network
  std::unique_ptr<KVServer> server;
  bool broken = false;
  Node node(options);
  auto make = [&] {
    if (server) return;
    auto s = std::make_unique<KVServer>(
        ServerOptions{node.rank(), options.num_servers, options.num_workers},
        [&node](int recver, const Message& reply) { node.send(recver, reply); });
    if (options.recovery()) s->enable_snapshots(options.snapshot_dir, node.recovered());
    server = std::move(s);
  };
  node.set_data_handler([&](Message& msg) {
    if (node.my_id() == kEmpty) return;
    std::lock_guard<std::mutex> lock(mu);
    if (broken) return;
    try {
      make();
      server->handle(msg);
    } catch (const std::exception& e) {  // a snapshot that cannot be read or written
      broken = true;
      node.abort(cat(node.describe(), ": ", e.what()));
    }
  });
  node.set_tick_handler([&] {
    std::lock_guard<std::mutex> lock(mu);  // run_server's thread may be in make()
    if (server && !broken) server->tick(std::chrono::steady_clock::now());
  });
  node.start();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!broken) make();
  }
  node.check_failure();
  // A replacement skips the start barrier: the others passed it long ago.
  if (!node.recovered()) node.barrier(kAllGroups, options.connect_timeout);
  // The whole job: bounded by failure detection (the scheduler's
  // acknowledgements) and the scheduler's Note [Final barrier deadline].
  node.barrier(kAllGroups, Millis::max());
  node.finish();
}

}  // namespace dtrain::ps
