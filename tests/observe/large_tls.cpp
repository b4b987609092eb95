// A library with as much static TLS as the CUDA builds of LibTorch load
// (Note [Thread stacks and static TLS] in src/observe/thread_stack.cpp):
// linked into a program, every thread's stack must make room for it.
#include <cstddef>

namespace {
thread_local char tls_block[256 * 1024];
}

extern "C" char* dtrain_test_large_tls_block() { return tls_block; }
extern "C" size_t dtrain_test_large_tls_size() { return sizeof tls_block; }
