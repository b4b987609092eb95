// The worker side of a dist kvstore: MXNet's KVStoreDist on ps-lite messages.
//
// Note [Key placement]
// As MXNet's EncodeDefaultKey: an array of fewer than bigarray_bound
// elements lives on server (key·9973) mod S; a larger one is split over all
// S servers, part i holding elements [round(n·i/S), round(n·(i+1)/S)). A
// part's ps-lite key is key + the start of its server's key range
// (kMaxKey/S·rank), so servers recover `key` and ps-lite's range slicing
// routes it. Values travel as bytes (CHAR) with their byte length, the dtype
// in the command head (Note [MXNet's server]).
//
// Note [Partitions]
// With KVStoreOptions::partition_bytes = P > 0 (the default), an
// uncompressed array of more than P bytes (counted as fp32, so that fp16
// pushes of a key land where its fp32 init did) is instead cut into
// C = ceil(bytes / P) parts of equal length (at least S when it also
// reaches bigarray_bound), part j on server (first + j) mod S with
// first = (key·9973) mod S, under the server key key + j·2^20. A server
// answers each part as soon as every worker's push of it has arrived, so
// the answers of a big array start flowing while its later parts are still
// on the wire, and the job's last answer trails its last push by one part
// instead of one server's whole share of the array (BytePS's partitions;
// measured in docs/benchmarks.md). Arrays of at most P bytes keep MXNet's
// placement above. The server keys must not collide, so keys stay below
// 2^20 and an array has at most 2047 parts; P = 0 gives MXNet's placement
// exactly, which a job mixing dtrain's workers with MXNet's needs. The parts
// of one request that share a server are sent as separate requests (their
// own timestamps) so that each answer is matched to its part.
//
// Note [Pushed arrays]
// A ConstValues without an owner is a raw view whose caller may reuse the
// array as soon as the call returns (dtrain/kvstore.h), so each part of a
// push is copied once, when the call is made, into a buffer its frame owns;
// the Van sends that buffer without a further copy (Note [Copies per hop] in
// van.cpp), and a message kept for re-sending (Note [Node recovery]) shares
// it. With an owner (kv_values() of a tensor: the DDP comm hook's bucket)
// the caller has promised not to write the array until the handle completes
// (ps-lite's SArray, MXNet's engine dependencies), so each part's frame
// shares the caller's bytes and holds the owner until ZeroMQ has sent them:
// no user-space copy on the worker's way out. A pushpull completes only
// after every server answered, i.e. after it received the whole push, so
// the bytes are sent by the time the caller may write them again; after a
// failed or timed-out wait ZeroMQ may still hold them, alive through the
// owner, and the job is over anyway.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <iostream>
#include <map>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "ps/job/run_role.h"
#include "ps/server/server.h"
#include "ps/server/ssp.h"
#include "ps/wire/compression.h"
#include "ps/worker/handle_state.h"

namespace dtrain::ps {
namespace {

// Note [Partitions]: part j of a key is server key key + j * kPartitionKeyStride.
constexpr uint64_t kPartitionKeyStride = uint64_t{1} << 20;
constexpr size_t kMaxPartitions = 2047;

struct Part {
  int server_id;
  uint64_t ps_key;
  size_t offset;  // elements
  size_t count;
  uint64_t size_key = 0;  // compressed pushes: range start + count
};

size_t elem_size(KVDType t) { return t == KVDType::kFloat16 ? 2 : 4; }
int mshadow(KVDType t) { return t == KVDType::kFloat16 ? kMshadowFloat16 : kMshadowFloat32; }
const char* dtype_name(KVDType t) { return t == KVDType::kFloat16 ? "float16" : "float32"; }

class DistKVStore : public KVStore {
 public:
  DistKVStore(const JobConfig& config, bool sync, Millis timeout)
      : config_(config), sync_(sync), timeout_(timeout), node_(config.node) {
    node_.set_data_handler([this](Message& msg) { on_response(msg); });
    node_.set_failure_callback([this](const std::string& why) { fail_all(why); });
    node_.set_recovery_callback([this](int id) { resend_to(id); });
    node_.start();
    node_.barrier(kAllGroups, config_.node.connect_timeout);
    if (sync_ && rank() == 0) command(ServerCommand::kSyncMode, "");
    if (!sync_ && config_.staleness >= 0 && rank() == 0) {  // Note [Stale synchronous parallel]
      command(ServerCommand::kStaleness,
              encode_staleness(config_.staleness, staleness_limit(timeout_)));
    }
    node_.barrier(kWorkerGroup, timeout_);
  }

  // Note [Leaving on an exception]: destroyed while an exception unwinds
  // (this worker failed), the store does not meet the others in close()'s
  // barriers, which they would never reach; it just stops, so the scheduler
  // sees its heartbeats end and fails the job within the heartbeat timeout,
  // naming this worker, instead of every worker waiting out its timeout.
  ~DistKVStore() override {
    close_in_destructor(
        closed_, [this] { close(); }, node_, "kvstore");
  }

  std::string type() const override {
    return kvstore_type_name(sync_ ? KVStoreType::kDistSync : KVStoreType::kDistAsync);
  }
  int rank() const override { return node_.rank(); }
  int num_workers() const override { return config_.node.num_workers; }
  Millis timeout() const override { return timeout_; }

  void init(int key, ConstValues value) override {
    check_open();
    if (keys_.count(key)) throw InvalidArgument(cat("key ", key, " is already initialised"));
    place(key, value.count, value.dtype);
    if (rank() == 0) send_data(key, &value, nullptr, "init").wait(timeout_);
    node_.barrier(kWorkerGroup, timeout_);
  }

  KVHandle push_async(int key, ConstValues grad) override {
    check_open();
    return send_data(key, &grad, nullptr, "push");
  }
  KVHandle pull_async(int key, Values out) override {
    check_open();
    return send_data(key, nullptr, &out, "pull");
  }
  // Note [Optimizer state] (server.h): the values' key encoding and parts.
  uint64_t pull_optimizer_state(int key, Values momentum) override {
    check_open();
    uint64_t updates = 0;
    send_data(key, nullptr, &momentum, "pull_optimizer_state", kRequestOptimizerState, "", &updates)
        .wait(timeout_);
    return updates;
  }
  void push_optimizer_state(int key, ConstValues momentum, uint64_t updates) override {
    check_open();
    send_data(key, &momentum, nullptr, "push_optimizer_state", kRequestOptimizerState,
              std::to_string(updates))
        .wait(timeout_);
  }

  void set_gradient_compression(const GradientCompression& spec) override {
    check_open();
    if (spec.type == GradientCompressionType::k2Bit && !(spec.threshold > 0)) {
      throw InvalidArgument(cat("2-bit compression threshold ", spec.threshold, " must be > 0"));
    }
    if (!keys_.empty()) {
      throw InvalidArgument(
          "set gradient compression before the first init (MXNet's rule: keys "
          "are placed for compressed pushes at init)");
    }
    compress_ = spec.type == GradientCompressionType::k2Bit;
    threshold_ = spec.threshold;
    if (rank() == 0) {
      command(
          ServerCommand::kSetGradientCompression,
          encode_compression_params(compress_ ? kCompressionTwoBit : kCompressionNone, threshold_));
    }
    node_.barrier(kWorkerGroup, timeout_);
  }

  KVHandle pushpull_async(int key, ConstValues grad, Values out) override {
    check_open();
    if (grad.count != out.count || grad.dtype != out.dtype) {
      throw InvalidArgument(cat("pushpull of key ", key, ": the gradient (", grad.count, " ",
                                dtype_name(grad.dtype), ") and the output (", out.count, " ",
                                dtype_name(out.dtype), ") differ"));
    }
    if (!sync_ || compress_) {  // async or compressed: push, then pull
      send_data(key, &grad, nullptr, "pushpull").wait(timeout_);
      return send_data(key, nullptr, &out, "pushpull");
    }
    return send_data(key, &grad, &out, "pushpull");
  }

  void broadcast(int key, ConstValues value, Values out) override {
    init(key, value);
    pull(key, out);
  }

  void barrier() override {
    check_open();
    node_.barrier(kWorkerGroup, timeout_);
  }

  void set_optimizer(const OptimizerSpec& spec) override {
    check_open();
    if (rank() == 0) command(ServerCommand::kController, spec.serialize());
    node_.barrier(kWorkerGroup, timeout_);
  }

  // Note [Leaving early] (endpoint.h): the servers and the scheduler stop
  // counting this worker, then it waits for the others in the final barrier,
  // bounded by Note [Final barrier deadline]: the scheduler's verdict naming
  // the late nodes, or this worker's own deadline if it never comes.
  void close() override {
    if (closed_) return;
    closed_ = true;
    node_.check_failure();
    try {
      command(ServerCommand::kWorkerLeaving, "");
    } catch (const TimeoutError&) {
      throw;
    } catch (const PeerLostError&) {
      throw;
    } catch (const DistError& e) {  // a server without the extension: leave as before
      node_.log(cat("a server refused the early-leave notice (", e.what(), ")"));
    }
    node_.leave_worker_group();
    if (rank() == 0) command(ServerCommand::kStopServer, "");  // MXNet's servers need it
    node_.final_barrier();  // bounded (Note [Final barrier deadline])
    node_.finish();
  }

 private:
  struct Request {
    std::shared_ptr<KVHandle::State> state;
    std::vector<Part> parts;
    Values out;
    uint64_t* updates = nullptr;  // an optimizer-state pull: the largest count of its parts
    // Note [Node recovery] (recovery.cpp), with recovery on only: server id
    // -> the message it has not answered yet, to re-send to a replacement.
    std::map<int, Message> unanswered;
    int parts_left = 0;  // answers this timestamp still expects
  };

  void check_open() const {
    if (closed_) throw InvalidArgument("the kvstore is closed");
    node_.check_failure();
  }

  // Note [Key placement].
  const std::vector<Part>& place(int key, size_t count, KVDType dtype) {
    if (key < 0) throw InvalidArgument(cat("kvstore key ", key, " is negative"));
    auto it = keys_.find(key);
    if (it != keys_.end()) {
      if (it->second.first != count) {
        throw InvalidArgument(cat("key ", key, " was initialised with ", it->second.first,
                                  " values but this call has ", count));
      }
      return it->second.second;
    }
    std::vector<Part> parts;
    const int S = config_.node.num_servers;
    const size_t P = config_.partition_bytes;
    if (!compress_ && P > 0 && count * 4 > P) {  // Note [Partitions]
      size_t C = (count * 4 + P - 1) / P;
      if (count >= config_.bigarray_bound) C = std::max(C, static_cast<size_t>(S));
      const bool key_too_big = static_cast<uint64_t>(key) >= kPartitionKeyStride;
      if (key_too_big || C > kMaxPartitions) {
        throw InvalidArgument(cat(
            "key ", key, " of ", count, " values: with partition_bytes ", P, " it would need ",
            key_too_big ? "keys below 1048576" : cat(C, " parts (at most 2047)"),
            "; raise partition_bytes (DTRAIN_KVSTORE_PARTITION_BYTES) or set it to 0 for MXNet's "
            "placement"));
      }
      const int first = static_cast<int>((static_cast<int64_t>(key) * 9973) % S);
      for (size_t j = 0; j < C; ++j) {
        const auto lo = static_cast<size_t>(std::round(static_cast<double>(count) / C * j));
        const auto hi = static_cast<size_t>(std::round(static_cast<double>(count) / C * (j + 1)));
        const int server = static_cast<int>((first + j) % static_cast<size_t>(S));
        const uint64_t local = static_cast<uint64_t>(key) + j * kPartitionKeyStride;
        parts.push_back(Part{server_rank_to_id(server), key_range_begin(server, S) + local, lo,
                             hi - lo, key_range_begin(server, S) + (hi - lo)});
      }
    } else if (compress_ && count >= config_.bigarray_bound) {
      // MXNet's EncodeCompressedKey: parts on multiples of 16 values.
      const size_t compr = compressed_floats(count);
      size_t done_compr = 0, done = 0;
      for (int i = 0; i < S; ++i) {
        size_t part_compr = 0, part = 0;
        if (i == S - 1) {
          part_compr = compr - done_compr;
          part = count - done;
        } else {
          part_compr = static_cast<size_t>(std::round(static_cast<double>(compr) / S * (i + 1))) -
                       static_cast<size_t>(std::round(static_cast<double>(compr) / S * i));
          part = std::min(part_compr * 16, count - done);
        }
        parts.push_back(Part{server_rank_to_id(i), key_range_begin(i, S) + key, done, part,
                             key_range_begin(i, S) + part});
        done_compr += part_compr;
        done += part;
      }
    } else if (count < config_.bigarray_bound) {
      const int server = static_cast<int>((static_cast<int64_t>(key) * 9973) % S);
      parts.push_back(Part{server_rank_to_id(server), key_range_begin(server, S) + key, 0, count,
                           key_range_begin(server, S) + count});
    } else {
      for (int i = 0; i < S; ++i) {
        const auto lo = static_cast<size_t>(std::round(static_cast<double>(count) / S * i));
        const auto hi = static_cast<size_t>(std::round(static_cast<double>(count) / S * (i + 1)));
        parts.push_back(Part{server_rank_to_id(i), key_range_begin(i, S) + key, lo, hi - lo,
                             key_range_begin(i, S) + (hi - lo)});
      }
    }
    (void)dtype;
    // Note [Partitions]: part j > 0 of a key uses the server key of key + j·2^20,
    // which a small array with that key would use too.
    for (const Part& p : parts) {
      auto [it, fresh] = server_keys_.emplace(p.ps_key, key);
      if (!fresh && it->second != key) {
        throw InvalidArgument(cat("key ", key, " and key ", it->second, " would share server key ",
                                  p.ps_key - key_range_begin(id_to_rank(p.server_id), S),
                                  " on server ", id_to_rank(p.server_id),
                                  " (a partition of the other); use keys below 1048576 or set "
                                  "partition_bytes (DTRAIN_KVSTORE_PARTITION_BYTES) to 0"));
      }
    }
    return keys_.emplace(key, std::make_pair(count, std::move(parts))).first->second.second;
  }

  const std::vector<Part>& known(int key, size_t count, const char* op) {
    auto it = keys_.find(key);
    if (it == keys_.end()) {
      throw InvalidArgument(
          cat(op, " of key ", key, " before init(", key, ", ...): call init first"));
    }
    return place(key, count, KVDType::kFloat32);
  }

  KVHandle send_data(int key, const ConstValues* push, Values* pull, const char* op,
                     int request_type = 0, const std::string& body = "",
                     uint64_t* updates = nullptr) {
    const size_t count = push ? push->count : pull->count;
    const KVDType dtype = push ? push->dtype : pull->dtype;
    const auto& parts =
        std::string(op) == "init" ? place(key, count, dtype) : known(key, count, op);
    const bool compressed = compress_ && push && request_type == 0 && std::string(op) != "init";
    if (compressed && dtype != KVDType::kFloat32) {
      throw InvalidArgument(cat(op, " of key ", key, ": 2-bit compression takes float32 values"));
    }
    std::vector<float>& residual = residual_[compressed ? key : -1];
    if (compressed && residual.size() != count) residual.assign(count, 0.0f);
    auto state = std::make_shared<KVHandle::State>();
    state->what = cat(op, " of key ", key, " (", describe_parts(parts), ")");
    state->remaining = static_cast<int>(parts.size());
    // Note [Partitions]: one timestamp per part when parts share a server.
    // (Only partitioned arrays have more parts than servers.)
    const bool shared_server = parts.size() > static_cast<size_t>(config_.node.num_servers);
    const int ts = node_.new_timestamp();
    std::vector<Message> messages;
    for (const Part& p : parts) {
      Message msg;
      msg.meta.app_id = 0;
      msg.meta.customer_id = 0;
      msg.meta.request = true;
      msg.meta.push = push != nullptr;
      msg.meta.pull = pull != nullptr;
      msg.meta.head = data_command(request_type, mshadow(dtype));
      msg.meta.body = body;
      msg.meta.timestamp = shared_server && !messages.empty() ? node_.new_timestamp() : ts;
      if (compressed) {
        add_compressed_push(msg, p, static_cast<const float*>(push->data), residual.data());
      } else if (push) {
        msg.add_data(&p.ps_key, 1, DataType::kUint64);
        const char* bytes = static_cast<const char*>(push->data) + p.offset * elem_size(dtype);
        const int32_t len = static_cast<int32_t>(p.count * elem_size(dtype));
        msg.add_frame(push->owner ? Frame::share(push->owner, bytes, static_cast<size_t>(len))
                                  : Frame(bytes, static_cast<size_t>(len)),
                      DataType::kChar);  // Note [Pushed arrays]
        msg.add_data(&len, 1, DataType::kInt32);
      } else {
        static const char kNothing = 0;  // a pull's empty values frame
        msg.add_data(&p.ps_key, 1, DataType::kUint64);
        msg.add_data(&kNothing, 0, DataType::kChar);
      }
      messages.push_back(std::move(msg));
    }
    if (shared_server) {
      for (size_t i = 0; i < parts.size(); ++i) {
        track(messages[i].meta.timestamp,
              Request{state, {parts[i]}, pull ? *pull : Values{}, updates, {}, 1}, {messages[i]},
              {parts[i]});
      }
    } else {
      track(ts,
            Request{
                state, parts, pull ? *pull : Values{}, updates, {}, static_cast<int>(parts.size())},
            messages, parts);
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!node_.send(parts[i].server_id, messages[i])) {
        state->fail(cat(state->what, ": no connection to server ", id_to_rank(parts[i].server_id)),
                    false);
      }
    }
    return KVHandle(state);
  }

  // Note [2-bit compression]: a size key of length 0, then the data key.
  void add_compressed_push(Message& msg, const Part& p, const float* grad, float* residual) const {
    const uint64_t keys[2] = {p.size_key, p.ps_key};
    const int32_t lens[2] = {0, static_cast<int32_t>(compressed_floats(p.count) * 4)};
    std::string bytes(static_cast<size_t>(lens[1]), '\0');
    quantize_2bit(grad + p.offset, residual + p.offset, p.count, threshold_, bytes.data());
    msg.meta.head = data_command(2, kMshadowFloat32);
    msg.add_data(keys, 2, DataType::kUint64);
    msg.add_frame(Frame(std::move(bytes)), DataType::kChar);
    msg.add_data(lens, 2, DataType::kInt32);
  }

  std::string describe_parts(const std::vector<Part>& parts) const {
    if (parts.size() == 1) return cat("on server ", id_to_rank(parts[0].server_id));
    if (parts.size() > static_cast<size_t>(config_.node.num_servers)) {
      return cat(parts.size(), " parts over ", config_.node.num_servers, " servers");
    }
    return cat("split over ", parts.size(), " servers");
  }

  void command(ServerCommand cmd, const std::string& body) {
    auto state = std::make_shared<KVHandle::State>();
    state->what = cat("server command ", static_cast<int>(cmd));
    state->remaining = config_.node.num_servers;
    const int ts = node_.new_timestamp();
    std::vector<Message> messages;
    std::vector<Part> servers;
    for (int r = 0; r < config_.node.num_servers; ++r) {
      Message msg;
      msg.meta.simple_app = true;
      msg.meta.request = true;
      msg.meta.head = static_cast<int>(cmd);
      msg.meta.body = body;
      msg.meta.app_id = 0;
      msg.meta.customer_id = 0;
      msg.meta.timestamp = ts;
      messages.push_back(std::move(msg));
      servers.push_back(Part{server_rank_to_id(r), 0, 0, 0});
    }
    track(ts, Request{state, {}, Values{}, nullptr, {}, static_cast<int>(servers.size())}, messages,
          servers);
    for (size_t i = 0; i < servers.size(); ++i) node_.send(servers[i].server_id, messages[i]);
    KVHandle(state).wait(timeout_);
  }

  // Registers request `ts` before its messages leave, so no answer (and no
  // recovery) can miss it; with recovery on, keeps a copy of each message.
  void track(int ts, Request req, const std::vector<Message>& messages,
             const std::vector<Part>& to) {
    if (config_.node.recovery()) {
      for (size_t i = 0; i < to.size(); ++i) req.unanswered[to[i].server_id] = messages[i];
    }
    add_pending(mu_, pending_, ts, std::move(req), node_);
  }

  // Note [Node recovery]: a replacement of server `id` has joined; re-send
  // what the dead one had not answered, in the order it was first sent.
  void resend_to(int id) {
    std::vector<Message> again;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [ts, req] : pending_) {
        auto it = req.unanswered.find(id);
        if (it != req.unanswered.end()) again.push_back(it->second);
      }
    }
    for (const Message& m : again) node_.send(id, m);
    node_.log(cat("re-sent ", again.size(), " unanswered requests to ", node_.describe(id)));
  }

  // The handler thread: match a response to its request by timestamp.
  void on_response(Message& msg) {
    const Meta& m = msg.meta;
    if (m.request) return;
    std::unique_lock<std::mutex> lock(mu_);
    auto it = pending_.find(m.timestamp);
    if (it == pending_.end()) return;  // a late answer to an abandoned request
    Request& req = it->second;
    // With recovery on, a second answer of a server (to a re-sent copy) is
    // dropped: the first one counted.
    if (config_.node.recovery() && req.unanswered.erase(m.sender) == 0) return;
    auto state = req.state;
    std::string error;
    if (auto refusal = server_refusal(m.body)) {
      error = *refusal;
    } else if (m.pull && !m.simple_app) {
      error = copy_part(msg, req);
    }
    if (!error.empty()) {
      pending_.erase(it);
      lock.unlock();
      state->fail(cat(state->what, ": ", error), false);
      return;
    }
    bool finished = false;
    {
      std::lock_guard<std::mutex> slock(state->mu);
      finished = --state->remaining == 0;
      if (finished) state->done = true;
    }
    if (--req.parts_left <= 0) pending_.erase(it);
    if (finished) state->cv.notify_all();
  }

  // Copies a pull response's values into the caller's buffer; "" or why not.
  std::string copy_part(const Message& msg, Request& req) {
    if (msg.data.size() < 2 || msg.data[0].size() != 8) return "a pull response without its key";
    uint64_t ps_key = 0;
    std::memcpy(&ps_key, msg.data[0].data(), 8);
    for (const Part& p : req.parts) {
      if (p.ps_key != ps_key || id_to_rank(p.server_id) != id_to_rank(msg.meta.sender)) continue;
      const size_t bytes = p.count * elem_size(req.out.dtype);
      if (msg.data[1].size() != bytes) {
        return cat("server ", id_to_rank(msg.meta.sender), " returned ", msg.data[1].size(),
                   " bytes, expected ", bytes);
      }
      long long updates = 0;
      if (req.updates && (!parse_int(msg.meta.body, &updates) || updates < 0)) {
        return cat("server ", id_to_rank(msg.meta.sender), " sent the update count '",
                   msg.meta.body, "', not a number");
      }
      std::lock_guard<std::mutex> slock(req.state->mu);
      if (!req.state->abandoned && bytes > 0) {
        std::memcpy(static_cast<char*>(req.out.data) + p.offset * elem_size(req.out.dtype),
                    msg.data[1].data(), bytes);
      }
      if (!req.state->abandoned && req.updates) {
        *req.updates = std::max(*req.updates, static_cast<uint64_t>(updates));
      }
      return "";
    }
    return cat("a pull response for an unexpected key ", ps_key);
  }

  void fail_all(const std::string& why) { fail_pending(mu_, pending_, why); }

  JobConfig config_;
  bool sync_;
  Millis timeout_;
  bool closed_ = false;
  bool compress_ = false;  // 2-bit (Note [2-bit compression])
  float threshold_ = 0.5f;
  std::map<int, std::vector<float>> residual_;                // key -> error feedback
  std::map<int, std::pair<size_t, std::vector<Part>>> keys_;  // key -> (count, parts)
  std::map<uint64_t, int> server_keys_;  // ps-lite key of every placed part -> its key
  std::mutex mu_;                        // guards pending_
  std::map<int, Request> pending_;
  Node node_;  // last: its threads end before the members above go
};

}  // namespace

std::unique_ptr<KVStore> connect_worker(const JobConfig& config, bool sync, Millis timeout) {
  return std::make_unique<DistKVStore>(config, sync, timeout);
}

}  // namespace dtrain::ps

namespace dtrain {

void KVHandle::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return;
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; })) {
    state_->abandoned = true;
    throw TimeoutError(cat(state_->what, " did not complete within ", ps::seconds(timeout),
                           " s; a server or another worker is stuck (dist_sync waits for every "
                           "worker's push of the key)"));
  }
  if (state_->error.empty()) return;
  if (state_->lost) throw PeerLostError(state_->error);
  throw DistError(state_->error);
}

bool KVHandle::is_completed() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

}  // namespace dtrain
