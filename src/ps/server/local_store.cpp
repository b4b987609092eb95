// create("local"): the local store, the servers' own logic in this process.
#include <cstring>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "ps/job/run_role.h"
#include "ps/server/server.h"

namespace dtrain::ps {
namespace {

// create("local"): one process, no network. It runs the servers' own logic
// (KVServer, one server, one worker, sync mode) on in-memory messages, so
// local and dist stores update keys identically.
class LocalKVStore : public KVStore {
 public:
  explicit LocalKVStore(Millis timeout)
      : timeout_(timeout),
        server_(ServerOptions{0, 1, 1}, [this](int, const Message& m) { reply_ = m; }) {
    Message sync;
    sync.meta.simple_app = true;
    sync.meta.head = static_cast<int>(ServerCommand::kSyncMode);
    call(sync, "sync mode");
  }
  std::string type() const override { return kvstore_type_name(KVStoreType::kLocal); }
  int rank() const override { return 0; }
  int num_workers() const override { return 1; }
  Millis timeout() const override { return timeout_; }

  void init(int key, ConstValues value) override {
    if (server_.stored(key)) throw InvalidArgument(cat("key ", key, " is already initialised"));
    data(key, &value, nullptr, "init");
  }
  KVHandle push_async(int key, ConstValues grad) override {
    need(key, grad.count, "push");
    data(key, &grad, nullptr, "push");
    return KVHandle();
  }
  KVHandle pull_async(int key, Values out) override {
    need(key, out.count, "pull");
    data(key, nullptr, &out, "pull");
    return KVHandle();
  }
  KVHandle pushpull_async(int key, ConstValues grad, Values out) override {
    push_async(key, grad);
    return pull_async(key, out);
  }
  void broadcast(int key, ConstValues value, Values out) override {
    init(key, value);
    pull(key, out);
  }
  void barrier() override {}
  void set_optimizer(const OptimizerSpec& spec) override {
    Message m;
    m.meta.simple_app = true;
    m.meta.head = static_cast<int>(ServerCommand::kController);
    m.meta.body = spec.serialize();
    call(m, "set_optimizer");
  }
  uint64_t pull_optimizer_state(int key, Values momentum) override {
    need(key, momentum.count, "pull_optimizer_state");
    const std::string body =
        data(key, nullptr, &momentum, "pull_optimizer_state", kRequestOptimizerState);
    long long updates = 0;
    parse_int(body, &updates);  // the in-process server wrote it
    return static_cast<uint64_t>(updates);
  }
  void push_optimizer_state(int key, ConstValues momentum, uint64_t updates) override {
    need(key, momentum.count, "push_optimizer_state");
    data(key, &momentum, nullptr, "push_optimizer_state", kRequestOptimizerState,
         std::to_string(updates));
  }
  void set_gradient_compression(const GradientCompression&) override {
    throw InvalidArgument(
        "gradient compression needs a dist kvstore; the local store has no "
        "network to save");
  }
  void close() override {}

 private:
  void need(int key, size_t count, const char* op) {
    const auto* v = server_.stored(key);
    if (!v) throw InvalidArgument(cat(op, " of key ", key, " before init: call init first"));
    if (v->size() != count) {
      throw InvalidArgument(
          cat(op, " of key ", key, " with ", count, " values; it holds ", v->size()));
    }
  }
  // Returns the reply's body.
  std::string data(int key, const ConstValues* push, Values* pull, const char* op,
                   int request_type = 0, const std::string& body = "") {
    const KVDType dtype = push ? push->dtype : pull->dtype;
    const size_t esize = dtype == KVDType::kFloat16 ? 2 : 4;
    const uint64_t ps_key = static_cast<uint64_t>(key);
    Message m;
    m.meta.push = push != nullptr;
    m.meta.pull = pull != nullptr;
    m.meta.head =
        data_command(request_type, dtype == KVDType::kFloat16 ? kMshadowFloat16 : kMshadowFloat32);
    m.meta.body = body;
    m.add_data(&ps_key, 1, DataType::kUint64);
    if (push) {
      const int32_t len = static_cast<int32_t>(push->count * esize);
      // Borrowed for the synchronous in-process call: the server copies it.
      m.add_frame(Frame::share(nullptr, push->data, push->count * esize), DataType::kChar);
      m.add_data(&len, 1, DataType::kInt32);
    } else {
      static const char kNothing = 0;
      m.add_data(&kNothing, 0, DataType::kChar);
    }
    call(m, cat(op, " of key ", key));
    if (pull) std::memcpy(pull->data, reply_.data.at(1).data(), pull->count * esize);
    std::string reply_body = std::move(reply_.meta.body);
    reply_ = Message();  // releases the stored value (Note [Replies share the stored value])
    return reply_body;
  }
  void call(Message& m, const std::string& what) {
    m.meta.request = true;
    m.meta.sender = worker_rank_to_id(0);
    m.meta.timestamp = 0;
    m.meta.app_id = 0;
    m.meta.customer_id = 0;
    reply_ = Message();
    server_.handle(m);
    if (auto refusal = server_refusal(reply_.meta.body)) {
      throw InvalidArgument(cat(what, ": ", *refusal));
    }
  }

  Millis timeout_;
  Message reply_;
  KVServer server_;
};

}  // namespace

std::unique_ptr<KVStore> make_local_store(Millis timeout) {
  return std::make_unique<LocalKVStore>(timeout);
}

}  // namespace dtrain::ps
