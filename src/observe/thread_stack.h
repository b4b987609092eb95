#pragma once
// Room for the static TLS in threads created with an explicit stack size
// (Note [Thread stacks and static TLS] in thread_stack.cpp).

#include <cstddef>

namespace dtrain::detail {

/// The bytes glibc takes out of every thread's stack for the static TLS and
/// the guard page beyond PTHREAD_STACK_MIN, as this process was loaded; 0
/// where glibc does not say (then nothing is added).
size_t static_tls_stack_overhead();

/// True when this process's pthread_attr_setstacksize is dtrain's (the
/// program was linked with dtrain_observe's export of it), so a requested
/// stack size is what the thread gets to use.
bool thread_stacks_leave_room_for_tls();

}  // namespace dtrain::detail
