#pragma once
// Local addresses: which address of this machine reaches a peer, and whether
// a name is this machine. One copy for the launcher (what a node advertises)
// and the process group (where Gloo binds). Torch-free; never throws.

#include <string>

namespace dtrain::detail {

/// The local address of the route to host:port (a UDP connect sends
/// nothing): "127.0.0.1" (or "::1") when `host` resolves to loopback, "" when
/// `host` does not resolve or no route leaves for it.
std::string route_local_addr(const std::string& host, int port);

/// True when `host` resolves to a loopback address or to the address of one
/// of this machine's interfaces.
bool is_local_host(const std::string& host);

/// True for the spellings of loopback: "localhost", 127.x.y.z, "::1".
bool is_loopback_name(const std::string& host);

/// The first IPv4 address of an interface that is up and not loopback, or "".
std::string first_interface_addr();

/// gethostname(), or "" when it fails.
std::string host_name();

/// Sets SIGPIPE to ignored, for the rest of the process, when its action is
/// the default; a disposition the program chose is kept (Note [SIGPIPE]).
/// Called by whatever starts threads that write to peers' sockets with
/// writev() (Gloo's transport): the process groups and LiveGroup.
void ignore_sigpipe_unless_handled();

}  // namespace dtrain::detail
