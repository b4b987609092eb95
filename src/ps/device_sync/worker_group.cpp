// kv_process_group (dtrain/kvstore_torch.h): the workers of a dist kvstore
// as a c10d process group.
//
// Note [Workers' group through the kvstore]
// Kubeflow's MXJob, like MXNet's launch.py, gives every pod only MXNet's
// variables: DMLC_ROLE, DMLC_PS_ROOT_URI/PORT, DMLC_NUM_SERVER and
// DMLC_NUM_WORKER; no RANK, WORLD_SIZE or MASTER_ADDR, and usually no
// DMLC_WORKER_ID. The trainer still needs a c10d group of the workers (DDP's
// start-up broadcast, sampler shards, evaluation sums), so the job forms one
// from what it has, as ps-lite does for its own ranks:
//   rank, size  the kvstore's: the scheduler assigns worker ranks
//               (DMLC_WORKER_ID, else the sorted host:port) and
//               DMLC_NUM_WORKER is the size;
//   store       worker 0 hosts a c10d TCP store on a free port of the
//               address it advertises to the parameter server (DMLC_NODE_HOST,
//               DMLC_INTERFACE or its first address, which the others
//               already reach: it is in the scheduler's node table), and
//               sends "host:port" to the others through the kvstore itself:
//               broadcast() of a reserved key (init stores rank 0's value,
//               every worker pulls it), one byte per float, so nothing else
//               has to be configured and no port has to be fixed in advance;
//   the group   over that store, exactly as init_process_group over
//               tcp://host:port (Gloo binds the address that routes to it).
// Every wait is bounded: the broadcast by the kvstore's timeout (a dead node
// fails it at once with PeerLostError), reaching the store and forming the
// group by InitOptions::store_timeout, each failing with host:port named.
// Worker 0's store lives as long as its group (the group holds it).
#include <string>
#include <vector>

#include "common/strings.h"
#include "dtrain/comm.h"
#include "dtrain/errors.h"
#include "dtrain/hosted_store.h"
#include "dtrain/kvstore_torch.h"
#include "dtrain/store.h"
#include "ps/job/dmlc_env.h"

namespace dtrain {
namespace {

// Room for a host name of 253 characters, ':' and a port.
constexpr size_t kAddressValues = 1 + 272;

std::vector<float> encode_address(const std::string& address) {
  if (address.size() >= kAddressValues) {
    throw InvalidArgument(cat("kv_process_group: the address '", address,
                              "' is too long to send (at most ", kAddressValues - 1,
                              " characters); set DMLC_NODE_HOST to a shorter name"));
  }
  std::vector<float> v(kAddressValues, 0.0f);
  v[0] = static_cast<float>(address.size());
  for (size_t i = 0; i < address.size(); ++i) {
    v[1 + i] = static_cast<float>(static_cast<unsigned char>(address[i]));
  }
  return v;
}

std::string decode_address(const std::vector<float>& v) {
  const auto n = static_cast<size_t>(v[0]);
  std::string address;
  for (size_t i = 0; i < n && 1 + i < v.size(); ++i) {
    address.push_back(static_cast<char>(static_cast<unsigned char>(v[1 + i])));
  }
  return address;
}

}  // namespace

// Note [Workers' group through the kvstore].
ProcessGroup kv_process_group(KVStore& kv, const InitOptions& options, const EnvLookup& env) {
  InitOptions o = options;
  o.rank = kv.rank();
  o.world_size = kv.num_workers();
  if (o.world_size == 1) return ProcessGroup();
  std::unique_ptr<TcpStoreServer> server;
  std::vector<float> sent(kAddressValues, 0.0f);
  if (o.rank == 0) {
    const EnvLookup lookup = env ? env : ps::process_environment();
    TcpStoreServerOptions so;
    so.host = ps::job_config_from_env(KVStoreOptions{}, lookup, ps::Role::kWorker).node.host;
    so.port = 0;  // a free one
    so.timeout = o.store_timeout;
    server = TcpStoreServer::start(so);
    sent = encode_address(cat(so.host, ":", server->port()));
  }
  std::vector<float> received(kAddressValues, 0.0f);
  kv.broadcast(kKVProcessGroupKey, sent, received);
  const std::string address = decode_address(received);
  const size_t colon = address.rfind(':');
  long long port = 0;
  if (colon == std::string::npos || !parse_int(address.substr(colon + 1), &port)) {
    throw DistError(cat("rank ", o.rank, ": kv_process_group received '", address,
                        "' from worker 0, not host:port; is key ", kKVProcessGroupKey,
                        " used by the program?"));
  }
  const std::string host = address.substr(0, colon);
  const bool v6 = host.find(':') != std::string::npos;
  o.init_method = cat("tcp://", v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
  // Worker 0's group owns its store server, which must outlive this call:
  // the other ranks keep using the store after the group has formed.
  if (server) return init_process_group(std::move(server), o);
  StorePtr store;
  {
    try {
      store = connect_tcp_store(host, static_cast<int>(port), o.store_timeout);
    } catch (const TimeoutError&) {  // its text names MASTER_ADDR, not this job's variables
      throw TimeoutError(cat("rank ", o.rank, " of ", o.world_size,
                             ": could not reach worker 0's group store at ", address, " within ",
                             o.store_timeout.count() / 1000.0,
                             " s; check that the workers reach each other there (DMLC_NODE_HOST, "
                             "DMLC_INTERFACE)"));
    }
  }
  return init_process_group(store, o);
}

}  // namespace dtrain
