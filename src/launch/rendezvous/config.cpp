// Rendezvous configuration (--rdzv-conf), endpoints, local addresses and
// make_rendezvous: which backend, who hosts the c10d store.

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "common/net.h"
#include "common/strings.h"
#include "dtrain/errors.h"
#include "launch/rendezvous/protocol.h"

namespace dtrain::detail {
namespace {

constexpr int kEtcdDefaultPort = 2379;
constexpr int kStaticDefaultPort = 29500;

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::chrono::milliseconds parse_seconds(const std::string& key, const std::string& value) {
  double s = 0;
  if (!parse_double(value, &s) || !std::isfinite(s) || s <= 0 || s > 1e7) {
    throw InvalidArgument(cat("LaunchOptions::rdzv_conf ", key, "=", value,
                              ": expected a positive number of seconds"));
  }
  return std::chrono::milliseconds(std::max<long long>(1, std::llround(s * 1000)));
}

bool parse_bool(const std::string& key, const std::string& value) {
  if (value == "true" || value == "1" || value == "yes" || value == "True") return true;
  if (value == "false" || value == "0" || value == "no" || value == "False") return false;
  throw InvalidArgument(
      cat("LaunchOptions::rdzv_conf ", key, "=", value, ": expected true or false"));
}

/// The local address of the route to host:port, else this host's name.
std::string route_or_host_name(const std::string& host, int port) {
  std::string addr = route_local_addr(host, port);
  if (addr.empty()) addr = host_name();
  return addr.empty() ? "127.0.0.1" : addr;
}

/// The address other nodes reach this one at. The route to the endpoint is
/// loopback on the endpoint's own host when its name resolves to 127.0.1.1
/// (Debian's /etc/hosts): other nodes cannot use that, so a multi-node job
/// takes an interface address instead, unless the endpoint itself was given
/// as a loopback address (every node on this host, as in tests).
std::string advertised_addr(const std::string& host, int port, int max_nodes) {
  std::string addr = route_or_host_name(host, port);
  const bool loopback = addr.rfind("127.", 0) == 0 || addr == "::1";
  const bool loopback_endpoint = host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost";
  if (loopback && max_nodes > 1 && !loopback_endpoint) {
    std::string iface = first_interface_addr();
    if (!iface.empty()) return iface;
  }
  return addr;
}

std::string default_node_id() {
  std::string name = host_name();
  if (name.empty()) name = "node";
  std::random_device rd;
  uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
               static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%08x", static_cast<unsigned>(r ^ (r >> 32)));
  return cat(name, "_", ::getpid(), "_", hex);
}

void validate(const RendezvousConfig& c) {
  if (c.backend != "static" && c.backend != "c10d" && c.backend != "etcd") {
    throw InvalidArgument(
        cat("unknown rendezvous backend '", c.backend, "'; use static, c10d or etcd"));
  }
  if (c.run_id.empty() || c.run_id.find_first_of("\t\n/") != std::string::npos) {
    throw InvalidArgument(cat("LaunchOptions::run_id '", c.run_id,
                              "' must be non-empty without '/', tabs or newlines"));
  }
  if (c.min_nodes < 1 || c.max_nodes < c.min_nodes) {
    throw InvalidArgument(cat("LaunchOptions::min_nodes:max_nodes ", c.min_nodes, ":", c.max_nodes,
                              ": need 1 <= MIN <= MAX"));
  }
  if (c.local_world_size < 1) {
    throw InvalidArgument(
        cat("LaunchOptions::nproc_per_node ", c.local_world_size, ": must be at least 1"));
  }
  if (c.backend == "static") {
    if (c.min_nodes != c.max_nodes) {
      throw InvalidArgument(
          cat("the static rendezvous needs a fixed "
              "LaunchOptions::min_nodes:max_nodes, got ",
              c.min_nodes, ":", c.max_nodes,
              "; use LaunchOptions::rdzv_backend c10d for an elastic range"));
    }
    if (c.node_rank < 0 || c.node_rank >= c.max_nodes) {
      throw InvalidArgument(cat("LaunchOptions::node_rank ", c.node_rank, " is not in 0..",
                                c.max_nodes - 1, " (LaunchOptions::max_nodes ", c.max_nodes, ")"));
    }
  }
  using ms = std::chrono::milliseconds;
  if (c.join_timeout <= ms(0) || c.last_call_timeout < ms(0) || c.heartbeat_interval <= ms(0) ||
      c.backend_timeout <= ms(0) || c.missed_heartbeats < 1) {
    throw InvalidArgument("rendezvous timeouts must be positive and missed_heartbeats at least 1");
  }
}

}  // namespace

void RendezvousConfig::apply_conf(const std::string& rdzv_conf) {
  for (const std::string& raw : split(rdzv_conf, ',')) {
    std::string item = trim(raw);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
      throw InvalidArgument(cat("LaunchOptions::rdzv_conf '", item, "': expected key=value"));
    }
    std::string key = trim(item.substr(0, eq));
    std::string value = trim(item.substr(eq + 1));
    if (key == "join_timeout") {
      join_timeout = parse_seconds(key, value);
    } else if (key == "last_call_timeout") {
      last_call_timeout = parse_seconds(key, value);
    } else if (key == "close_timeout") {
      parse_seconds(key, value);  // torchrun's; nothing here waits on close
    } else if (key == "heartbeat_interval" || key == "keep_alive_interval") {
      heartbeat_interval = parse_seconds(key, value);
    } else if (key == "missed_heartbeats" || key == "keep_alive_max_attempt") {
      long long n = 0;
      if (!parse_int(value, &n) || n < 1 || n > 1000) {
        throw InvalidArgument(
            cat("LaunchOptions::rdzv_conf ", key, "=", value, ": expected an integer in 1..1000"));
      }
      missed_heartbeats = static_cast<int>(n);
    } else if (key == "timeout" || key == "read_timeout") {
      backend_timeout = parse_seconds(key, value);
    } else if (key == "is_host") {
      is_host = parse_bool(key, value);
    } else if (key == "local_addr") {
      if (value.empty())
        throw InvalidArgument("LaunchOptions::rdzv_conf local_addr= needs an address");
      local_addr = value;
    } else if (key == "etcd_prefix") {
      if (value.empty())
        throw InvalidArgument("LaunchOptions::rdzv_conf etcd_prefix= needs a prefix");
      etcd_prefix = value;
    } else {
      throw InvalidArgument(cat("LaunchOptions::rdzv_conf: unknown key '", key,
                                "'; known: join_timeout, "
                                "last_call_timeout, close_timeout, heartbeat_interval, "
                                "missed_heartbeats, timeout, is_host, local_addr, etcd_prefix"));
    }
  }
}

int RendezvousInfo::base_rank() const {
  if (late > 0) return late_base_rank;
  return std::accumulate(local_world_sizes.begin(), local_world_sizes.begin() + node_rank, 0);
}

int RendezvousInfo::world_size() const {
  return std::accumulate(local_world_sizes.begin(), local_world_sizes.end(), 0);
}

std::pair<std::string, int> parse_endpoint(const std::string& endpoint, int default_port) {
  std::string text = trim(endpoint);
  std::string host, port_text;
  if (!text.empty() && text[0] == '[') {  // [v6]:port
    size_t close = text.find(']');
    if (close == std::string::npos)
      throw InvalidArgument(cat("endpoint '", endpoint, "': missing ']'"));
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':')
        throw InvalidArgument(cat("endpoint '", endpoint, "': expected ':' after ']'"));
      port_text = text.substr(close + 2);
    }
  } else if (std::count(text.begin(), text.end(), ':') == 1) {
    size_t colon = text.find(':');
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  } else {
    host = text;  // no port, or a bare IPv6 address
  }
  if (host.empty()) {
    throw InvalidArgument(cat("endpoint '", endpoint, "': expected host:port (e.g. node0:29400)"));
  }
  long long port = default_port;
  if (!port_text.empty() && (!parse_int(port_text, &port) || port < 1 || port > 65535)) {
    throw InvalidArgument(
        cat("endpoint '", endpoint, "': port '", port_text, "' is not in 1..65535"));
  }
  if (port_text.empty() && (default_port < 0 || default_port > 65535)) {
    throw InvalidArgument(cat("endpoint '", endpoint, "': no port given"));
  }
  return {host, static_cast<int>(port)};
}

namespace {

// make_dynamic_rendezvous, plus what the backend needs kept alive.
std::unique_ptr<Rendezvous> build_rendezvous(std::shared_ptr<RendezvousBackend> backend,
                                             const RendezvousConfig& config, std::string node_id,
                                             std::shared_ptr<void> keep_alive) {
  if (!backend) throw InvalidArgument("make_dynamic_rendezvous: backend is null");
  validate(config);
  RendezvousConfig resolved = config;
  if (resolved.local_addr.empty()) {
    resolved.local_addr = "127.0.0.1";
    if (!config.endpoint.empty()) {
      auto [host, port] = parse_endpoint(config.endpoint, 0);
      resolved.local_addr = route_or_host_name(host, port);
    }
  }
  if (node_id.empty()) node_id = default_node_id();
  if (node_id.find_first_of("\t\n") != std::string::npos || node_id == "-") {
    throw InvalidArgument(
        cat("rendezvous node id '", node_id, "' must not contain tabs or newlines"));
  }
  if (resolved.settings.find_first_of("\t\n") != std::string::npos) {
    throw InvalidArgument(cat("RendezvousConfig::settings '", resolved.settings,
                              "' must not contain tabs or newlines"));
  }
  if (resolved.local_addr.find_first_of("\t\n") != std::string::npos) {
    throw InvalidArgument(
        cat("local_addr '", resolved.local_addr, "' must not contain tabs or newlines"));
  }
  return std::make_unique<DynamicRendezvous>(std::move(backend), std::move(resolved),
                                             std::move(node_id), std::move(keep_alive));
}

}  // namespace

std::unique_ptr<Rendezvous> make_dynamic_rendezvous(std::shared_ptr<RendezvousBackend> backend,
                                                    const RendezvousConfig& config,
                                                    std::string node_id) {
  return build_rendezvous(std::move(backend), config, std::move(node_id), nullptr);
}

std::unique_ptr<Rendezvous> make_rendezvous(const RendezvousConfig& config) {
  validate(config);
  if (config.endpoint.empty()) {
    throw InvalidArgument(
        cat("LaunchOptions::rdzv_endpoint is required for the ", config.backend, " rendezvous"));
  }
  int default_port = config.backend == "etcd"     ? kEtcdDefaultPort
                     : config.backend == "static" ? kStaticDefaultPort
                                                  : kC10dDefaultPort;
  auto [host, port] = parse_endpoint(config.endpoint, default_port);
  RendezvousConfig resolved = config;
  if (resolved.local_addr.empty()) {
    resolved.local_addr = advertised_addr(host, port, config.max_nodes);
  }

  std::shared_ptr<RendezvousBackend> backend;
  std::shared_ptr<TcpStoreServer> server;
  if (config.backend == "etcd") {
    backend = make_etcd_backend(host, port, config.etcd_prefix, config.backend_timeout);
  } else {
    // static: node rank 0 hosts. c10d: the agent on the endpoint's host
    // hosts (or is_host says so); when a second agent on that host finds the
    // port taken, it connects like everyone else (torchrun does the same).
    bool hosting = config.backend == "static" ? config.node_rank == 0
                                              : config.is_host.value_or(is_local_host(host));
    bool must_host = config.backend == "static" || config.is_host.value_or(false);
    StorePtr store;
    if (hosting) {
      try {
        server = TcpStoreServer::start({host, port, config.backend_timeout});
        store = server->store();
      } catch (const StoreError& e) {
        if (must_host) {
          throw StoreError(cat("rendezvous '", config.run_id, "': ", e.what()));
        }
      }
    }
    if (!store) {
      try {
        store = connect_tcp_store(host, port, config.backend_timeout);
      } catch (const Error& e) {
        throw TimeoutError(
            cat("rendezvous '", config.run_id, "': cannot reach the ", config.backend, " store at ",
                host, ":", port, " within ", config.backend_timeout.count() / 1000.0, " s (",
                first_line(e.what()),
                "); check LaunchOptions::rdzv_endpoint and that the node hosting it is up"));
      }
    }
    backend = make_store_backend(store, cat(config.backend, " store at ", host, ":", port));
  }
  // The hosted server lives as long as the rendezvous.
  return build_rendezvous(std::move(backend), resolved, "", std::move(server));
}

}  // namespace dtrain::detail
