// Threads started with an explicit stack size still get that much stack when
// the process has a large static TLS, as processes linked with the CUDA
// LibTorch do (Note [Thread stacks and static TLS]); this program links a
// library with 256 KiB of it (large_tls.cpp).
#include <gtest/gtest.h>

#include <pthread.h>

#include <cstring>
#include <string>

#include "dtrain/metrics.h"
#include "observe/thread_stack.h"

extern "C" char* dtrain_test_large_tls_block();
extern "C" size_t dtrain_test_large_tls_size();

namespace dtrain {
namespace {

constexpr size_t kRequested = 100 * 1024;  // civetweb's compiled-in stack

void* use_stack(void* arg) {
  // Touch most of the requested stack and the TLS block.
  volatile char buffer[64 * 1024];
  std::memset(const_cast<char*>(buffer), 1, sizeof buffer);
  dtrain_test_large_tls_block()[0] = buffer[100];
  *static_cast<int*>(arg) = dtrain_test_large_tls_block()[0];
  return nullptr;
}

TEST(ThreadStack, TheProcessHasTheLargeStaticTlsOfTheTestLibrary) {
  ASSERT_GE(dtrain_test_large_tls_size(), 256u * 1024);
  EXPECT_GE(detail::static_tls_stack_overhead(), dtrain_test_large_tls_size());
}

TEST(ThreadStack, ProgramsLinkedWithObserveUseDtrainsSetStackSize) {
  EXPECT_TRUE(detail::thread_stacks_leave_room_for_tls());
}

TEST(ThreadStack, ARequestedStackSizeStaysUsableBesideTheStaticTls) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, kRequested), 0);
  size_t size = 0;
  ASSERT_EQ(pthread_attr_getstacksize(&attr, &size), 0);
  EXPECT_EQ(size, kRequested + detail::static_tls_stack_overhead());
  pthread_t thread;
  int touched = 0;
  const int rc = pthread_create(&thread, &attr, use_stack, &touched);
  pthread_attr_destroy(&attr);
  ASSERT_EQ(rc, 0) << "pthread_create: " << std::strerror(rc);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
  EXPECT_EQ(touched, 1);
}

TEST(ThreadStack, TheMetricsEndpointStartsDespiteTheLargeStaticTls) {
  MetricsOptions o;
  o.host = "127.0.0.1";
  o.gpu_metrics = false;
  MetricsExporter m(o);  // threw "null context when constructing CivetServer" before
  EXPECT_GT(m.port(), 0);
}

}  // namespace
}  // namespace dtrain
