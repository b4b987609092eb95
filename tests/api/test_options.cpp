// Chainable setters on the public options structs (Note [Chainable options]
// in dtrain/options.h), beside plain field assignment.

#include <gtest/gtest.h>

#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/ddp.h"
#include "dtrain/kvstore.h"
#include "dtrain/sampler.h"
#include "dtrain/timeline.h"
#include "dtrain/train.h"

namespace dtrain {
namespace {

TEST(ChainableSetters, DdpOptionsSettersSetTheirFieldsAndLeaveTheOthersAtTheirDefaults) {
  auto hook = fp16_compress_hook();
  const DdpOptions o = DdpOptions()
                           .set_bucket_cap_mb(50)
                           .set_find_unused_parameters(true)
                           .set_static_graph(true)
                           .set_gradient_as_bucket_view(true)
                           .set_comm_hook(hook);
  EXPECT_EQ(o.bucket_cap_mb, 50);
  EXPECT_TRUE(o.find_unused_parameters);
  EXPECT_TRUE(o.static_graph);
  EXPECT_TRUE(o.gradient_as_bucket_view);
  EXPECT_EQ(o.comm_hook, hook);
  EXPECT_EQ(o.first_bucket_cap_mb, DdpOptions().first_bucket_cap_mb);
  EXPECT_EQ(o.broadcast_buffers, DdpOptions().broadcast_buffers);
}

TEST(ChainableSetters, ASetterReturnsTheStructItWasCalledOn) {
  DdpOptions o;
  EXPECT_EQ(&o.set_bucket_cap_mb(10), &o);
  LoaderOptions l;
  EXPECT_EQ(&l.set_batch_size(3).set_threads(2), &l);
  EXPECT_EQ(l.batch_size, 3);
  EXPECT_EQ(l.threads, 2);
}

TEST(ChainableSetters, FieldAssignmentAndSettersGiveTheSameOptions) {
  LoaderOptions assigned;
  assigned.batch_size = 32;
  assigned.shuffle = false;
  assigned.drop_last = true;
  assigned.pad = false;
  assigned.seed = 7;
  assigned.rank = 1;
  assigned.world_size = 4;
  assigned.threads = 3;
  const LoaderOptions chained = LoaderOptions()
                                    .set_batch_size(32)
                                    .set_shuffle(false)
                                    .set_drop_last(true)
                                    .set_pad(false)
                                    .set_seed(7)
                                    .set_rank(1)
                                    .set_world_size(4)
                                    .set_threads(3);
  EXPECT_EQ(chained.batch_size, assigned.batch_size);
  EXPECT_EQ(chained.shuffle, assigned.shuffle);
  EXPECT_EQ(chained.drop_last, assigned.drop_last);
  EXPECT_EQ(chained.pad, assigned.pad);
  EXPECT_EQ(chained.seed, assigned.seed);
  EXPECT_EQ(chained.rank, assigned.rank);
  EXPECT_EQ(chained.world_size, assigned.world_size);
  EXPECT_EQ(chained.threads, assigned.threads);
}

TEST(ChainableSetters, NestedOptionsAreSetThroughTheirOwnSetters) {
  const TrainOptions o = TrainOptions()
                             .set_epochs(3)
                             .set_dataset(DatasetOptions().set_name("mnist").set_data_dir("/d"))
                             .set_ddp(DdpOptions().set_bucket_cap_mb(5));
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(o.dataset.name, "mnist");
  EXPECT_EQ(o.dataset.data_dir, "/d");
  EXPECT_EQ(o.ddp.bucket_cap_mb, 5);
  EXPECT_FALSE(o.dataset.test.shuffle) << "the evaluation split keeps its defaults";
}

TEST(ChainableSetters, OtherPublicOptionsChainToo) {
  const InitOptions init =
      InitOptions().set_init_method("tcp://127.0.0.1:1").set_rank(0).set_world_size(2);
  EXPECT_EQ(init.init_method, "tcp://127.0.0.1:1");
  EXPECT_EQ(init.world_size, 2);
  const SamplerOptions s = SamplerOptions().set_rank(2).set_world_size(3).set_shuffle(false);
  EXPECT_EQ(s.rank, 2);
  EXPECT_FALSE(s.shuffle);
  const KVStoreOptions kv = KVStoreOptions().set_bigarray_bound(10);
  EXPECT_EQ(kv.bigarray_bound, 10u);
  const TimelineOptions t = TimelineOptions().set_rank(4).set_process_name("worker");
  EXPECT_EQ(t.rank, 4);
  EXPECT_EQ(t.process_name, "worker");
}

}  // namespace
}  // namespace dtrain
