// pthread_attr_setstacksize that leaves the requested stack usable.

#include "observe/thread_stack.h"

#include <dlfcn.h>
#include <pthread.h>

#include <cerrno>
#include <climits>

// Note [Thread stacks and static TLS]
// glibc carves a thread's static TLS (the __thread variables of the
// executable and of every library loaded at start) out of the stack the
// thread is given, and pthread_create fails with EINVAL when a stack set with
// pthread_attr_setstacksize is smaller than that TLS (glibc bug 11787). The
// CUDA builds of LibTorch load libraries with about 190 KiB of static TLS
// (cuBLASLt alone has 92 KiB), while Debian's civetweb, the HTTP server under
// prometheus-cpp's Exposer, starts its threads with a compiled-in 100 KiB
// stack: linked against the PyPI torch wheel every Exposer failed with
// "null context when constructing CivetServer" ("Cannot create first worker
// thread"). Rust's standard library meets the same bug by adding
// __pthread_get_minstack's TLS share to the size it asks for; civetweb has
// no option for its stack size, so dtrain does the same for every caller:
// this definition of pthread_attr_setstacksize, exported from the executable
// (dtrain_observe's link option --export-dynamic-symbol), adds the TLS and
// guard overhead glibc reports to the requested size, so a thread gets the
// stack its creator asked for. The effect on other callers is only that:
// their threads' stacks grow by the TLS size, never shrink, and a size that
// glibc would have refused becomes one it accepts. Without glibc's private
// __pthread_get_minstack the size passes through unchanged.

namespace {

using SetStackSize = int (*)(pthread_attr_t*, size_t);
using GetMinStack = size_t (*)(const pthread_attr_t*);

SetStackSize real_set_stack_size() {
  static const SetStackSize real =
      reinterpret_cast<SetStackSize>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real;
}

GetMinStack min_stack() {
  static const GetMinStack f =
      reinterpret_cast<GetMinStack>(dlsym(RTLD_DEFAULT, "__pthread_get_minstack"));
  return f;
}

size_t overhead(const pthread_attr_t* attr) {
  const GetMinStack f = min_stack();
  if (f == nullptr) return 0;
  const size_t min = f(attr);
  const auto floor = static_cast<size_t>(PTHREAD_STACK_MIN);
  return min > floor ? min - floor : 0;
}

}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  const SetStackSize real = real_set_stack_size();
  if (real == nullptr) return ENOSYS;
  return real(attr, size + overhead(attr));
}

namespace dtrain::detail {

size_t static_tls_stack_overhead() {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return 0;
  const size_t n = overhead(&attr);
  pthread_attr_destroy(&attr);
  return n;
}

bool thread_stacks_leave_room_for_tls() {
  return dlsym(RTLD_DEFAULT, "pthread_attr_setstacksize") ==
         reinterpret_cast<void*>(&pthread_attr_setstacksize);
}

}  // namespace dtrain::detail
