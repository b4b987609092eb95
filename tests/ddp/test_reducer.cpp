// The reducer's behaviour as PyTorch's: when buckets launch (seen by a
// recording comm hook), what arms a reduction, bucket rebuilding, and the
// errors for failures and misuse.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <mutex>

#include "dtrain/ddp.h"
#include "dtrain/errors.h"
#include "support/ranks.h"

namespace dtrain {
namespace {

using testing::error_of;
using testing::run_ranks;

// Three layers registered first, second, third. `reversed` runs them in the
// opposite order (so gradients become ready in registration order, the
// reverse of the initial buckets); `unused` is registered last and never run.
struct ChainImpl : torch::nn::Module {
  explicit ChainImpl(bool reversed = false, bool with_unused = false) : reversed(reversed) {
    first = register_module("first", torch::nn::Linear(6, 6));
    second = register_module("second", torch::nn::Linear(6, 6));
    third = register_module("third", torch::nn::Linear(6, 6));
    if (with_unused) unused = register_module("unused", torch::nn::Linear(6, 6));
  }
  torch::Tensor forward(torch::Tensor x) {
    if (reversed) return first(torch::relu(second(torch::relu(third(x)))));
    return third(torch::relu(second(torch::relu(first(x)))));
  }
  bool reversed;
  torch::nn::Linear first{nullptr}, second{nullptr}, third{nullptr}, unused{nullptr};
};
TORCH_MODULE(Chain);

Chain make_chain(bool reversed = false, bool with_unused = false) {
  torch::manual_seed(3);
  return Chain(reversed, with_unused);
}

// Records every launch, and whether backward had reached the model's input
// (the end of backward) when it happened; then reduces with allreduce.
class RecordingHook : public CommHook {
 public:
  struct Launch {
    int index;
    std::vector<std::string> names;
    bool after_input_grad;
  };
  explicit RecordingHook(const std::atomic<bool>* input_grad_done = nullptr)
      : input_grad_done_(input_grad_done) {}
  std::unique_ptr<PendingReduction> start(const ProcessGroup& pg, GradBucket& bucket) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      launches_.push_back(
          {bucket.index, bucket.parameter_names, input_grad_done_ && input_grad_done_->load()});
    }
    return inner_->start(pg, bucket);
  }
  std::string name() const override { return "recording"; }
  std::vector<Launch> launches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return launches_;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    launches_.clear();
  }

 private:
  const std::atomic<bool>* input_grad_done_;
  std::shared_ptr<CommHook> inner_ = allreduce_hook();
  mutable std::mutex mu_;
  std::vector<Launch> launches_;
};

DdpOptions one_bucket_per_parameter() {
  DdpOptions o;
  o.first_bucket_cap_mb = o.bucket_cap_mb = 1e-9;  // every tensor closes its bucket
  return o;
}

// Different for every `seed`, and free of the global RNG, which rank threads
// would share.
torch::Tensor batch(int seed) {
  return torch::arange(24, torch::kFloat).reshape({4, 6}).mul(0.37 * (seed + 1)).sin();
}

// One DDP step whose input reports when backward reaches it.
void step_watching_input(DistributedDataParallel<ChainImpl>& ddp, int rank,
                         std::atomic<bool>& input_grad_done) {
  input_grad_done = false;
  torch::Tensor x = batch(rank).requires_grad_();
  x.register_hook([&input_grad_done](torch::Tensor) { input_grad_done = true; });
  ddp.forward(x).pow(2).sum().backward();
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

TEST(Reducer, BucketsLaunchInOrderWhileBackwardIsStillRunning) {
  std::vector<Chain> nets{make_chain(), make_chain()};
  run_ranks(2, [&](const ProcessGroup& pg) {
    std::atomic<bool> input_grad_done{false};
    auto hook = std::make_shared<RecordingHook>(&input_grad_done);
    DdpOptions o = one_bucket_per_parameter();
    o.comm_hook = hook;
    DistributedDataParallel<ChainImpl> ddp(nets[pg.rank()].ptr(), pg, o);
    step_watching_input(ddp, pg.rank(), input_grad_done);
    auto launches = hook->launches();
    ASSERT_EQ(launches.size(), 6u);
    for (size_t i = 0; i < launches.size(); ++i) {
      EXPECT_EQ(launches[i].index, static_cast<int>(i));
      // third and second are done before the first layer's backward, which
      // computes the input's gradient.
      if (!starts_with(launches[i].names[0], "first")) {
        EXPECT_FALSE(launches[i].after_input_grad) << launches[i].names[0];
      }
    }
  });
}

TEST(Reducer, AnUnusedParameterDoesNotHoldBackTheBucketsAfterIt) {
  std::vector<Chain> nets{make_chain(false, true), make_chain(false, true)};
  run_ranks(2, [&](const ProcessGroup& pg) {
    std::atomic<bool> input_grad_done{false};
    auto hook = std::make_shared<RecordingHook>(&input_grad_done);
    DdpOptions o = one_bucket_per_parameter();
    o.comm_hook = hook;
    o.find_unused_parameters = true;
    DistributedDataParallel<ChainImpl> ddp(nets[pg.rank()].ptr(), pg, o);
    // Buckets 0 and 1 hold the unused layer (registered last).
    ASSERT_EQ(ddp.bucket_parameter_names()[0][0], "unused.bias");
    step_watching_input(ddp, pg.rank(), input_grad_done);
    auto launches = hook->launches();
    ASSERT_EQ(launches.size(), 8u);
    for (size_t i = 0; i < launches.size(); ++i) {
      EXPECT_EQ(launches[i].index, static_cast<int>(i));
      if (!starts_with(launches[i].names[0], "first")) {
        EXPECT_FALSE(launches[i].after_input_grad) << launches[i].names[0];
      }
    }
    EXPECT_FALSE(nets[pg.rank()]->unused->weight.grad().defined());
  });
}

TEST(Reducer, BackwardThroughTheBareModuleCommunicatesNothing) {
  std::vector<Chain> nets{make_chain(), make_chain()};
  run_ranks(2, [&](const ProcessGroup& pg) {
    auto hook = std::make_shared<RecordingHook>();
    DdpOptions o;
    o.comm_hook = hook;
    Chain& net = nets[pg.rank()];
    DistributedDataParallel<ChainImpl> ddp(net.ptr(), pg, o);
    net->forward(batch(pg.rank())).pow(2).sum().backward();  // the bare module
    EXPECT_TRUE(hook->launches().empty());
    EXPECT_EQ(ddp.stats().iterations, 0);
    // Each rank kept its own gradient.
    auto g = pg.all_gather(net->third->weight.grad().contiguous());
    EXPECT_FALSE(g[0].equal(g[1]));
    // A forward under no_grad arms nothing either.
    {
      torch::NoGradGuard no_grad;
      ddp.forward(batch(pg.rank()));
    }
    net->forward(batch(pg.rank())).sum().backward();
    EXPECT_TRUE(hook->launches().empty());
    // Through the wrapper: reduced.
    ddp.forward(batch(pg.rank())).pow(2).sum().backward();
    EXPECT_EQ(hook->launches().size(), ddp.bucket_parameter_names().size());
    g = pg.all_gather(net->third->weight.grad().contiguous());
    EXPECT_TRUE(g[0].equal(g[1]));
  });
}

TEST(Reducer, BucketsAreRebuiltOnceInRankZerosGradientReadyOrder) {
  std::vector<Chain> nets{make_chain(true), make_chain(true)};
  std::vector<std::string> ready_order;  // rank 0's first backward
  std::mutex mu;
  run_ranks(2, [&](const ProcessGroup& pg) {
    auto hook = std::make_shared<RecordingHook>();
    DdpOptions o = one_bucket_per_parameter();
    o.comm_hook = hook;
    Chain& net = nets[pg.rank()];
    DistributedDataParallel<ChainImpl> ddp(net.ptr(), pg, o);
    auto initial = ddp.bucket_parameter_names();
    if (pg.rank() == 0) {
      for (auto& item : net->named_parameters()) {
        std::string name = item.key();
        item.value().register_hook([&, name](torch::Tensor) {
          std::lock_guard<std::mutex> lock(mu);
          if (ready_order.size() < 6) ready_order.push_back(name);
        });
      }
    }
    ddp.forward(batch(pg.rank())).pow(2).sum().backward();
    pg.barrier();
    ASSERT_EQ(ready_order.size(), 6u);
    std::vector<std::string> initial_flat;
    for (auto& b : initial) initial_flat.push_back(b[0]);
    EXPECT_NE(initial_flat, ready_order);  // else the test shows nothing

    hook->clear();
    for (int step = 0; step < 2; ++step) ddp.forward(batch(pg.rank())).pow(2).sum().backward();
    std::vector<std::string> rebuilt;
    for (auto& b : ddp.bucket_parameter_names()) rebuilt.push_back(b[0]);
    EXPECT_EQ(rebuilt, ready_order) << "rank " << pg.rank();
    auto launches = hook->launches();
    ASSERT_EQ(launches.size(), 12u);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(launches[i].names[0], ready_order[i]);
    auto g = pg.all_gather(net->third->weight.grad().contiguous());
    EXPECT_TRUE(g[0].equal(g[1]));
  });
}

TEST(Reducer, StaticGraphGivesTheSameParametersAsFindUnusedParameters) {
  auto train = [](bool static_graph) {
    std::vector<Chain> nets{make_chain(false, true), make_chain(false, true)};
    run_ranks(2, [&](const ProcessGroup& pg) {
      DdpOptions o;
      o.static_graph = static_graph;
      o.find_unused_parameters = !static_graph;
      Chain& net = nets[pg.rank()];
      DistributedDataParallel<ChainImpl> ddp(net.ptr(), pg, o);
      torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      for (int step = 0; step < 3; ++step) {
        opt.zero_grad();
        ddp.forward(batch(pg.rank() + 2 * step)).pow(2).sum().backward();
        opt.step();
      }
    });
    return nets;
  };
  std::vector<Chain> a = train(true), b = train(false);
  for (int r = 0; r < 2; ++r) {
    auto pa = a[r]->parameters(), pb = b[r]->parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_LE((pa[i] - pb[i]).abs().max().item<double>(), 1e-6) << "rank " << r << " #" << i;
    }
  }
}

// Fails every reduction's wait, as a lost peer would.
class FailingHook : public CommHook {
  class Failing : public PendingReduction {
   public:
    void wait() override { throw PeerLostError("injected: rank 1 closed the connection"); }
  };

 public:
  std::unique_ptr<PendingReduction> start(const ProcessGroup&, GradBucket&) override {
    return std::make_unique<Failing>();
  }
  std::string name() const override { return "failing"; }
};

TEST(Reducer, AfterACommunicationFailureEveryForwardIsRefusedNamingTheFirstFailure) {
  Chain net = make_chain();
  DdpOptions o;
  o.comm_hook = std::make_shared<FailingHook>();
  ProcessGroup single;
  DistributedDataParallel<ChainImpl> ddp(net.ptr(), single, o);
  std::string first = error_of([&] { ddp.forward(batch(0)).sum().backward(); });
  EXPECT_NE(first.find("injected: rank 1 closed the connection"), std::string::npos) << first;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::string again = error_of([&] { ddp.forward(batch(0)); });
    EXPECT_NE(again.find("cannot be used after a communication failure"), std::string::npos)
        << again;
    EXPECT_NE(again.find("first failure: injected: rank 1 closed the connection"),
              std::string::npos)
        << again;
    EXPECT_NE(again.find("create the process group and the DDP wrapper again"), std::string::npos)
        << again;
  }
}

TEST(Reducer, BackwardTwiceOnOneForwardIsAnErrorNamingTheFix) {
  Chain net = make_chain();
  ProcessGroup single;
  DistributedDataParallel<ChainImpl> ddp(net.ptr(), single);
  torch::Tensor loss = ddp.forward(batch(0)).pow(2).sum();
  loss.backward({}, /*retain_graph=*/true);
  std::string e = error_of([&] { loss.backward(); });
  EXPECT_NE(e.find("backward called twice on one DDP forward"), std::string::npos) << e;
  EXPECT_NE(e.find("Run ddp.forward() again before each backward"), std::string::npos) << e;
  // The next iteration works.
  EXPECT_EQ(error_of([&] { ddp.forward(batch(0)).sum().backward(); }), "");
}

// Live recovery's virtual ranks: 2 processes run 4 micro-batches (two each,
// accumulated under no_sync) and divide by 4, which must equal the average
// of 4 single-micro-batch gradients, with and without bucket views.
TEST(Reducer, GradientDivisorAveragesAccumulatedMicroBatchesOverTheLogicalWorld) {
  for (bool view : {false, true}) {
    // Reference: the mean of the 4 micro-batches' gradients on one process.
    Chain ref = make_chain();
    for (int mb = 0; mb < 4; ++mb) ref->forward(batch(mb)).pow(2).sum().div(4).backward();
    std::vector<torch::Tensor> expected;
    for (auto& p : ref->parameters()) expected.push_back(p.grad().clone());

    // Built here, not in the rank threads: make_chain seeds the process-wide
    // generator, and two threads seeding and drawing at once interleave.
    std::vector<Chain> nets{make_chain(), make_chain()};
    std::vector<std::vector<torch::Tensor>> got(2);
    run_ranks(2, [&](const ProcessGroup& pg) {
      Chain& net = nets[pg.rank()];
      DdpOptions o;
      o.gradient_divisor = 4;
      o.gradient_as_bucket_view = view;
      DistributedDataParallel<ChainImpl> ddp(net.ptr(), pg, o);
      {
        auto scope = ddp.no_sync();
        ddp.forward(batch(pg.rank())).pow(2).sum().backward();  // logical rank r
      }
      ddp.forward(batch(pg.rank() + 2)).pow(2).sum().backward();  // logical rank r + 2
      for (auto& p : net->parameters()) got[pg.rank()].push_back(p.grad().clone());
    });
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(got[r].size(), expected.size());
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_TRUE(torch::allclose(got[r][i], expected[i], 1e-5, 1e-6))
            << "rank " << r << " parameter " << i << " view " << view;
      }
    }
  }
}

TEST(Reducer, NegativeGradientDivisorIsAnErrorNamingTheValue) {
  Chain net = make_chain();
  ProcessGroup single;
  std::string e = error_of([&] {
    DistributedDataParallel<ChainImpl> ddp(net.ptr(), single,
                                           DdpOptions().set_gradient_divisor(-2));
  });
  EXPECT_NE(e.find("gradient_divisor must be 0 (the world size) or positive, got -2"),
            std::string::npos)
      << e;
}

struct TwoDevicesImpl : torch::nn::Module {
  explicit TwoDevicesImpl(torch::Device other) {
    register_parameter("here", torch::zeros({2}));
    register_parameter("there", torch::zeros({2}, torch::TensorOptions().device(other)));
  }
  torch::Tensor forward(torch::Tensor x) { return x; }
};

TEST(Reducer, ModuleOnSeveralDevicesIsAnErrorNamingTheParametersAndTheFix) {
  // A GPU where there is one, else PyTorch's "meta" device (no storage).
  torch::Device other =
      torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kMeta);
  auto net = std::make_shared<TwoDevicesImpl>(other);
  ProcessGroup single;
  std::string e = error_of([&] { DistributedDataParallel<TwoDevicesImpl> ddp(net, single); });
  EXPECT_NE(
      e.find("parameters are on several devices ('here' on cpu, 'there' on " + other.str() + ")"),
      std::string::npos)
      << e;
  EXPECT_NE(e.find("call module->to(device) before wrapping it"), std::string::npos) << e;
}

}  // namespace
}  // namespace dtrain
