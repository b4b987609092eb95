// Writes fuzz/corpus/ps_meta: the messages a dtrain (ps-lite) job exchanges,
// built the way src/ps/endpoint.cpp and worker.cpp build them and encoded by
// the codec they use (encode_meta), each behind its ROUTER identity frame
// (the ps_meta target's input layout: identity length, identity, meta).
//
//   make_ps_seeds OUT_DIR
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "ps/server/server.h"
#include "ps/wire/protocol.h"

using namespace dtrain::ps;

namespace {

void write(const std::string& dir, const std::string& name, const std::string& id, const Meta& m) {
  std::string bytes(1, static_cast<char>(id.size()));
  bytes += id;
  bytes += encode_meta(m);
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

Meta data_request(bool push, bool pull, int request_type, int dtype, std::vector<DataType> types) {
  Meta m;
  m.app_id = 0;
  m.customer_id = 0;
  m.request = true;
  m.push = push;
  m.pull = pull;
  m.head = data_command(request_type, dtype);
  m.timestamp = 17;
  m.data_type = std::move(types);
  m.data_size = push ? 8 + 4 * 1024 + 4 : 8;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_ps_seeds OUT_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  // A server registers with the scheduler (no id yet: empty identity).
  Meta add;
  add.control.cmd = Command::kAddNode;
  add.control.node.push_back(NodeInfo{Role::kServer, kEmpty, "10.0.0.2", 41234, false, 0});
  add.timestamp = 0;
  write(dir, "add-node-server", "", add);
  // A worker with a fixed id (DMLC_WORKER_ID -> body).
  Meta add_worker = add;
  add_worker.control.node[0] = NodeInfo{Role::kWorker, kEmpty, "10.0.0.3", 41235, false, 0};
  add_worker.body = "dtrain-worker-id=1";
  write(dir, "add-node-worker", "", add_worker);
  // The scheduler's table: every node with its id.
  Meta table;
  table.control.cmd = Command::kAddNode;
  table.control.node = {NodeInfo{Role::kScheduler, kScheduler, "10.0.0.1", 9091, false, 0},
                        NodeInfo{Role::kServer, server_rank_to_id(0), "10.0.0.2", 41234, false, 0},
                        NodeInfo{Role::kWorker, worker_rank_to_id(0), "10.0.0.3", 41235, false, 0},
                        NodeInfo{Role::kWorker, worker_rank_to_id(1), "10.0.0.4", 41236, true, 0}};
  write(dir, "add-node-table", identity(kScheduler), table);
  // Barrier request and release.
  Meta barrier;
  barrier.control.cmd = Command::kBarrier;
  barrier.control.barrier_group = kWorkerGroup + kServerGroup;
  barrier.request = true;
  barrier.timestamp = 3;
  write(dir, "barrier-request", identity(worker_rank_to_id(0)), barrier);
  barrier.request = false;
  write(dir, "barrier-release", identity(kScheduler), barrier);
  // Heartbeat, ack, terminate.
  Meta hb;
  hb.control.cmd = Command::kHeartbeat;
  hb.control.node.push_back(NodeInfo{Role::kWorker, worker_rank_to_id(0), "10.0.0.3", 41235});
  write(dir, "heartbeat", identity(worker_rank_to_id(0)), hb);
  Meta ack;
  ack.control.cmd = Command::kAck;
  ack.control.msg_sig = 0x9e3779b97f4a7c15ULL;
  write(dir, "ack", identity(server_rank_to_id(0)), ack);
  Meta term;
  term.control.cmd = Command::kTerminate;
  write(dir, "terminate", identity(kScheduler), term);
  // MXNet kvstore data: push (keys, values as chars, lengths), pull, pushpull.
  write(dir, "push-mxnet", identity(worker_rank_to_id(1)),
        data_request(true, false, 0, 0, {DataType::kUint64, DataType::kChar, DataType::kInt32}));
  write(dir, "pull-mxnet", identity(worker_rank_to_id(1)),
        data_request(false, true, 0, 0, {DataType::kUint64}));
  Meta pushpull = data_request(true, true, 2, 0, {DataType::kUint64, DataType::kChar});
  pushpull.priority = -3;
  write(dir, "pushpull-mxnet", identity(worker_rank_to_id(0)), pushpull);
  // ps-lite's KVWorker<float> default handle.
  Meta plain = data_request(true, false, 0, 0, {DataType::kUint64, DataType::kFloat});
  plain.head = kEmpty;
  plain.simple_app = false;
  write(dir, "push-pslite-float", identity(worker_rank_to_id(0)), plain);
  // A server's reply (pull response with data, and a refusal).
  Meta reply;
  reply.app_id = 0;
  reply.customer_id = 0;
  reply.request = false;
  reply.pull = true;
  reply.head = data_command(0, 0);
  reply.timestamp = 17;
  reply.data_type = {DataType::kUint64, DataType::kChar};
  reply.data_size = 8 + 4096;
  write(dir, "pull-response", identity(server_rank_to_id(0)), reply);
  reply.body = "dtrain-error: server 0: the keys frame is not uint64";
  reply.data_type.clear();
  reply.data_size = 0;
  write(dir, "refusal", identity(server_rank_to_id(0)), reply);
  // A simple_app command (kvstore's SetOptimizer/StopServer path).
  Meta cmd;
  cmd.simple_app = true;
  cmd.request = true;
  cmd.head = 0;
  cmd.body = "{\"optimizer\":\"sgd\",\"lr\":0.1}";
  cmd.app_id = 0;
  cmd.customer_id = 0;
  cmd.timestamp = 5;
  write(dir, "simple-app-command", identity(worker_rank_to_id(0)), cmd);
  return 0;
}
