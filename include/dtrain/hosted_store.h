#pragma once
// A process group whose rank hosts the store the other ranks use.

#include <memory>

#include "dtrain/comm.h"
#include "dtrain/store.h"

namespace dtrain {

/// Forms the group as init_process_group(server->store(), options) does,
/// over the store `server` hosts in this process, and hands the server to
/// the group: it keeps serving the other ranks for as long as any copy of the
/// group lives (a TcpStoreServer stops serving when it is destroyed, so a
/// caller that let it go after forming the group would cut the others off).
/// Throws InvalidArgument for a null server, otherwise as the overloads in
/// dtrain/comm.h.
ProcessGroup init_process_group(std::unique_ptr<TcpStoreServer> server, const InitOptions& options);

}  // namespace dtrain
