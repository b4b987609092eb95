#include <algorithm>
#include <iostream>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "dtrain/config.h"
#if DTRAIN_HAVE_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "comm/interruptible_store.h"
#include "comm/state.h"
#include "common/net.h"
#include "common/strings.h"
#include "dtrain/backend.h"
#include "dtrain/errors.h"
#include "dtrain/hosted_store.h"

#if DTRAIN_HAVE_NCCL
// Compiled only in CUDA builds (CI's CUDA LibTorch stage, a GPU machine):
// ProcessGroupNCCL is handed out as the collective backend, like
// ProcessGroupGloo, so it must derive from compat::CollectiveBackend.
static_assert(std::is_base_of_v<dtrain::compat::CollectiveBackend, c10d::ProcessGroupNCCL>,
              "c10d::ProcessGroupNCCL is not a compat::CollectiveBackend in this LibTorch");
#endif
static_assert(std::is_base_of_v<dtrain::compat::CollectiveBackend, c10d::ProcessGroupGloo>,
              "c10d::ProcessGroupGloo is not a compat::CollectiveBackend in this LibTorch");

namespace dtrain {
namespace {

struct Endpoint {
  std::string host;
  int port = 0;
};

Endpoint parse_tcp(const std::string& method) {
  // tcp://host:port, host may be [v6]
  std::string rest = method.substr(6);
  auto colon = rest.rfind(':');
  long long port = 0;
  if (colon == std::string::npos || !parse_int(rest.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    throw InvalidArgument(cat("init method '", method, "' is not of the form tcp://host:port"));
  }
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) throw InvalidArgument(cat("init method '", method, "' has no host"));
  return {host, static_cast<int>(port)};
}

StorePtr open_store(const InitOptions& o, std::unique_ptr<TcpStoreServer>* server) {
  if (o.init_method.rfind("tcp://", 0) == 0) {
    Endpoint ep = parse_tcp(o.init_method);
    if (o.rank == 0 && !o.launcher_hosts_store) {
      TcpStoreServerOptions so;
      so.host = ep.host;
      so.port = ep.port;
      so.timeout = o.store_timeout;
      *server = TcpStoreServer::start(so);
      return (*server)->store();
    }
    return connect_tcp_store(ep.host, ep.port, o.store_timeout);
  }
  if (o.init_method.rfind("file://", 0) == 0) {
    std::string path = o.init_method.substr(7);
    if (path.empty()) throw InvalidArgument("init method 'file://' has no path");
    return open_file_store(path, o.world_size, o.store_timeout);
  }
  throw InvalidArgument(cat("unknown init method '", o.init_method,
                            "'; use env://, tcp://host:port or file:///path"));
}

// Note [Gloo's address]
// Gloo binds one local address and tells the peers that address through the
// store, so it must be an address of this machine that the peers can reach.
// In this order:
//   1. InitOptions::gloo_host (GLOO_SOCKET_IFNAME goes to gloo_interface);
//   2. tcp://: where the route to the store's host leaves this machine
//      (loopback when the store is on loopback): the peers reach the store,
//      so they reach this network. The hostname may resolve to loopback
//      (network namespaces, Debian's 127.0.1.1) or not at all (containers);
//   3. no store address (file://) or no route: the hostname, when it
//      resolves to this machine (Gloo's own default);
//   4. else a group that lives on one node (world size == local world size)
//      uses loopback, which always works there (PyTorch falls back to it too);
//   5. else the first interface address, with a one-line warning naming
//      GLOO_SOCKET_IFNAME, since nothing tells which network the peers are on.
// The address helpers are shared with the launcher (common/net.h).
std::string gloo_host(const InitOptions& o) {
  if (!o.gloo_host.empty()) return o.gloo_host;
  if (o.init_method.rfind("tcp://", 0) == 0) {
    Endpoint ep = parse_tcp(o.init_method);
    std::string local = detail::route_local_addr(ep.host, ep.port);
    if (!local.empty()) return local;
  }
  const std::string name = detail::host_name();
  if (!name.empty() && detail::is_local_host(name)) return name;
  if (o.world_size <= o.local_world_size) return "127.0.0.1";
  std::string iface = detail::first_interface_addr();
  std::cerr << "dtrain: warning: rank " << o.rank << ": hostname '" << name
            << "' does not resolve to this machine and " << o.init_method
            << " names no peer; Gloo uses " << (iface.empty() ? "127.0.0.1" : iface)
            << "; set GLOO_SOCKET_IFNAME to the interface that reaches the other nodes\n";
  return iface.empty() ? "127.0.0.1" : iface;
}

c10::intrusive_ptr<compat::CollectiveBackend> make_backend(const InitOptions& o,
                                                           const StorePtr& store) {
  if (o.backend == "gloo") {
    auto go = c10d::ProcessGroupGloo::Options::create();
    go->timeout = o.timeout;
    try {
      if (!o.gloo_interface.empty()) {
        go->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(o.gloo_interface));
      } else {
        go->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(gloo_host(o)));
      }
    } catch (const std::exception& e) {
      throw DistError(cat("rank ", o.rank, ": Gloo cannot use ",
                          o.gloo_interface.empty() ? "address '" + gloo_host(o) + "'"
                                                   : "interface '" + o.gloo_interface + "'",
                          " (", first_line(e.what()),
                          "); set GLOO_SOCKET_IFNAME to the interface that reaches the other "
                          "ranks"));
    }
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.rank, o.world_size, go);
  }
  if (o.backend == "nccl") {
#if DTRAIN_HAVE_NCCL
    if (c10::cuda::device_count() == 0) {
      throw InvalidArgument(cat("rank ", o.rank,
                                ": InitOptions::backend nccl needs a GPU and none is "
                                "visible; use InitOptions::backend gloo"));
    }
    // One GPU per local rank, as torchrun users expect.
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(o.local_rank % c10::cuda::device_count()));
    auto no = c10d::ProcessGroupNCCL::Options::create();
    no->timeout = o.timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, o.rank, o.world_size, no);
#else
    throw InvalidArgument(
        "InitOptions::backend nccl needs a LibTorch built with CUDA; this build is CPU-only, "
        "use InitOptions::backend gloo");
#endif
  }
  throw InvalidArgument(cat("unknown backend '", o.backend, "'; use gloo or nccl"));
}

}  // namespace

// Note [Choosing the backend]
// A user on a GPU expects NCCL and a user on the CPU Gloo, without a flag
// (PyTorch's init_process_group picks by device the same way). The device is
// resolved first (pick_device: cuda:<local rank> when a GPU is visible) and
// the backend follows from it, so "auto" never asks for NCCL with CPU
// tensors, and a CPU-only build (no NCCL) quietly uses Gloo. An explicit
// "nccl" that cannot work is refused before any peer is contacted.
std::vector<std::string> backend_names() { return {"auto", "gloo", "nccl"}; }

// Note [A GPU per NCCL rank]
// NCCL refuses a communicator with two ranks on one GPU ("invalid usage",
// seen on the H200 when three processes of `dtrain run --nproc-per-node 3`
// all took cuda:0), so "auto" gives such ranks Gloo, which stages CUDA
// tensors through the host and works however the GPUs are shared, and an
// explicit "nccl" is refused before any peer is contacted.
std::string resolve_backend(const std::string& requested, const c10::Device& device,
                            int ranks_per_device) {
  const bool shared = device.is_cuda() && ranks_per_device > 1;
  if (requested == "gloo") return requested;
  if (requested == "auto") return DTRAIN_HAVE_NCCL && device.is_cuda() && !shared ? "nccl" : "gloo";
  if (requested == "nccl") {
    if (!DTRAIN_HAVE_NCCL) {
      throw InvalidArgument(
          "InitOptions::backend nccl needs a LibTorch built with CUDA and NCCL; this build is "
          "CPU-only, use InitOptions::backend gloo");
    }
    if (!device.is_cuda()) {
      throw InvalidArgument(cat("InitOptions::backend nccl needs CUDA tensors but the device is ",
                                device.str(), "; use InitOptions::backend gloo"));
    }
    if (shared) {
      throw InvalidArgument(cat("InitOptions::backend nccl needs a GPU per rank but ",
                                ranks_per_device, " ranks of this node share ", device.str(),
                                "; use InitOptions::backend gloo or one process per GPU"));
    }
    return requested;
  }
  throw InvalidArgument(cat("unknown InitOptions::backend '", requested,
                            "'; valid backends: ", join(backend_names(), ", ")));
}

int ranks_per_gpu(int local_world_size, int device_count) {
  if (device_count <= 0) return 1;
  return std::max(1, (local_world_size + device_count - 1) / device_count);
}

ProcessGroup::ProcessGroup() : state_(std::make_shared<State>()) {}
ProcessGroup::ProcessGroup(std::shared_ptr<const State> state) : state_(std::move(state)) {}
ProcessGroup::~ProcessGroup() = default;
ProcessGroup::ProcessGroup(const ProcessGroup&) = default;
ProcessGroup& ProcessGroup::operator=(const ProcessGroup&) = default;

int ProcessGroup::rank() const { return state_->rank; }
int ProcessGroup::size() const { return state_->size; }
int ProcessGroup::local_rank() const { return state_->local_rank; }
int ProcessGroup::local_world_size() const { return state_->local_world_size; }
std::chrono::milliseconds ProcessGroup::timeout() const { return state_->timeout; }
const std::string& ProcessGroup::backend_name() const { return state_->backend_name; }
c10::intrusive_ptr<compat::CollectiveBackend> ProcessGroup::backend() const {
  return state_->backend;
}
StorePtr ProcessGroup::store() const { return state_->store; }

ProcessGroup make_process_group(std::shared_ptr<const ProcessGroup::State> state) {
  return ProcessGroup(std::move(state));
}

const ProcessGroup::State& state_of(const ProcessGroup& pg) { return *pg.state_; }

namespace {

std::shared_ptr<ProcessGroup::State> new_state(const InitOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    throw InvalidArgument(cat("init_process_group: rank ", options.rank, " and world size ",
                              options.world_size, " are inconsistent"));
  }
  auto state = std::make_shared<ProcessGroup::State>();
  state->rank = options.rank;
  state->size = options.world_size;
  state->local_rank = options.local_rank;
  state->local_world_size = options.local_world_size;
  state->timeout = options.timeout;
  state->backend_name = options.backend;
  state->wait_interrupt = options.wait_interrupt;
  state->wait_slice = options.wait_slice;
  return state;
}

// Note [Formed means every rank connected]
// Gloo's connectFullMesh returns on a rank as soon as that rank's own pairs
// are connected, and the connecting side of a pair counts as connected once
// the kernel has completed the TCP handshake with the peer's listening
// socket, before the peer has accepted it. So a rank can finish forming, do
// nothing collective (open a local dataset: open_dataset(options, pg) reads
// only rank and size then) and destroy its group, closing its sockets, while
// a peer is still waiting
// for another rank's address; that peer then accepts an already closed
// connection and its formation fails with Gloo's "Connection closed by peer"
// (and a third rank, left waiting for the failed one to connect, fails with
// "Connect timeout" after 5 x the timeout). Ranks as threads of one loaded
// test process met this in about 1 group in 25; a job whose rank leaves
// right after forming meets it the same way. Hence init_process_group
// returns only once every rank's backend has formed: each rank counts itself
// in the group's store, the rank that completes the count publishes a key,
// and every rank waits for that key (PyTorch's init_process_group ends with
// the same store-based barrier). The count's generation keeps the barrier
// right on a reused store, since a rank cannot start forming the next group
// before the current one has formed (Gloo's own keys are not versioned,
// hence the one-group-per-store precondition in comm.h).
void wait_until_every_rank_formed(const ProcessGroup::State& state, const InitOptions& options) {
  if (options.world_size == 1) return;
  const int64_t world = options.world_size;
  const std::string count_key = "formed";
  int64_t generation = 0;
  try {
    const int64_t arrival = state.store->add(count_key, 1);
    generation = (arrival - 1) / world;
    const std::string done = cat("formed/", generation);
    if (arrival == (generation + 1) * world) state.store->set(done, std::vector<uint8_t>{1});
    state.store->wait({done}, options.store_timeout);
  } catch (const std::exception& e) {
    std::string arrived = "not all";
    try {
      const int64_t n = std::min(world, state.store->add(count_key, 0) - generation * world);
      arrived = cat("only ", n, " of ", world);
    } catch (const std::exception&) {
    }
    throw TimeoutError(cat("rank ", options.rank, " of ", options.world_size, ": ", arrived,
                           " ranks formed the process group within ",
                           options.store_timeout.count() / 1000.0, " s over ", options.init_method,
                           " (", first_line(e.what()),
                           "); check that every rank started and can reach the others"));
  }
}

void form_group(ProcessGroup::State& state, StorePtr store, const InitOptions& options) {
  detail::ignore_sigpipe_unless_handled();  // Note [SIGPIPE] in src/common/net.cpp
  c10::intrusive_ptr<detail::InterruptibleStore> interruptible;
  if (options.wait_interrupt) {
    // Note [Interruptible formation] in interruptible_store.cpp.
    interruptible = c10::make_intrusive<detail::InterruptibleStore>(
        std::move(store), options.wait_interrupt, options.wait_slice, options.store_timeout);
    store = interruptible;
  }
  state.store = prefix_store("dtrain/pg", std::move(store));
  try {
    try {
      state.backend = make_backend(options, state.store);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw TimeoutError(cat("rank ", options.rank, " of ", options.world_size,
                             ": the process group did not form within ",
                             options.store_timeout.count() / 1000.0, " s over ",
                             options.init_method, " (", first_line(e.what()),
                             "); check that every rank started and can reach the others"));
    }
    wait_until_every_rank_formed(state, options);  // Note [Formed means every rank connected]
  } catch (...) {
    // Gloo rethrows what the store threw as its own error: the interrupt's
    // exception, when it gave the formation up, is the one to propagate.
    if (interruptible && interruptible->interruption()) {
      std::rethrow_exception(interruptible->interruption());
    }
    throw;
  }
}

}  // namespace

ProcessGroup init_process_group(StorePtr store, const InitOptions& options) {
  auto state = new_state(options);
  if (!store) throw InvalidArgument("init_process_group: store is null");
  form_group(*state, std::move(store), options);
  return make_process_group(std::move(state));
}

ProcessGroup init_process_group(std::unique_ptr<TcpStoreServer> server,
                                const InitOptions& options) {
  if (!server) throw InvalidArgument("init_process_group: server is null");
  auto state = new_state(options);
  StorePtr store = server->store();
  state->store_server = std::move(server);
  form_group(*state, std::move(store), options);
  return make_process_group(std::move(state));
}

ProcessGroup init_process_group(const InitOptions& options) {
  if (options.init_method == "env://") {
    throw InvalidArgument(
        "init_process_group: resolve env:// first (resolve_init_options), or call "
        "init_process_group() without arguments");
  }
  auto state = new_state(options);
  StorePtr store = open_store(options, &state->store_server);
  form_group(*state, std::move(store), options);
  return make_process_group(std::move(state));
}

ProcessGroup init_process_group() {
  InitOptions options = resolve_init_options({}, process_env());
  if (options.init_method == "env://") return ProcessGroup();  // no launcher: one process
  return init_process_group(options);
}

}  // namespace dtrain
