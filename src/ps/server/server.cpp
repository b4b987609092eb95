// Note [Which handle answers], Note [MXNet's server] (server.h).
#include "ps/server/server.h"

#include <atomic>
#include <cmath>
#include <cstring>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "ps/server/snapshot.h"
#include "ps/wire/compression.h"
#include "ps/wire/half.h"

namespace dtrain::ps {

const char* const kErrorPrefix = "dtrain-error: ";

std::optional<std::string> server_refusal(const std::string& body) {
  if (body.rfind(kErrorPrefix, 0) != 0) return std::nullopt;
  return body.substr(std::strlen(kErrorPrefix));
}

namespace {

size_t dtype_size(int dtype) { return dtype == kMshadowFloat16 ? 2 : 4; }

template <typename T>
bool frame_as(const Frame& frame, std::vector<T>* out) {
  if (frame.size() % sizeof(T) != 0) return false;
  out->resize(frame.size() / sizeof(T));
  if (!frame.empty()) std::memcpy(out->data(), frame.data(), frame.size());
  return true;
}

// Received bytes may sit at any address (Note [Frames share their bytes]):
// values are read with memcpy, which compilers turn into unaligned loads.
void to_float(const char* bytes, size_t n, int dtype, float* out) {
  if (dtype == kMshadowFloat32) {
    std::memcpy(out, bytes, n * 4);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    out[i] = half_to_float(h);
  }
}

// out[i] += the i-th value of `bytes`: a sync round sums straight from the
// received frames (Note [Copies per hop] in van.cpp).
void add_float(const char* bytes, size_t n, int dtype, float* out) {
  if (dtype == kMshadowFloat32) {
    for (size_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, bytes + 4 * i, 4);
      out[i] += v;
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    out[i] += half_to_float(h);
  }
}

// True when nothing but `p` holds its vector, which may then be written:
// ZeroMQ's I/O threads drop their references when a reply has left, and the
// fence orders their reads of the bytes before our writes.
template <typename T>
bool sole_owner(const std::shared_ptr<T>& p) {
  if (p.use_count() != 1) return false;
  std::atomic_thread_fence(std::memory_order_acquire);
  return true;
}

std::string from_float(const std::vector<float>& v, int dtype) {
  std::string out(v.size() * dtype_size(dtype), '\0');
  if (dtype == kMshadowFloat32) {
    if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = float_to_half(v[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

// A push's lengths frame: one int32 per key, the last equal to the values' bytes.
bool push_lengths_ok(const Message& msg, size_t keys, std::vector<int32_t>* lens) {
  return msg.data.size() == 3 && msg.meta.data_type[2] == DataType::kInt32 &&
         frame_as(msg.data[2], lens) && lens->size() == keys && lens->back() >= 0 &&
         static_cast<size_t>(lens->back()) == msg.data[1].size();
}

// "" when `bytes` is a whole number of `dtype` values, else why not.
std::string values_size_error(const Frame& bytes, int dtype, int key) {
  const size_t elem = dtype_size(dtype);
  if (bytes.size() % elem == 0) return "";
  return cat("key ", key, ": ", bytes.size(), " bytes is not a whole number of ",
             elem == 2 ? "float16" : "float32", " values");
}

// A default push's values as fp32; "" or why not.
std::string push_values(const Frame& bytes, int dtype, int key, std::vector<float>* out) {
  if (std::string why = values_size_error(bytes, dtype, key); !why.empty()) return why;
  const size_t elem = dtype_size(dtype);
  out->resize(bytes.size() / elem);
  to_float(bytes.data(), out->size(), dtype, out->data());
  return "";
}

Meta reply_meta(const Meta& req) {
  Meta m;
  m.app_id = req.app_id == kEmpty ? 0 : req.app_id;
  m.customer_id = req.customer_id;
  m.request = false;
  m.push = req.push;
  m.pull = req.pull;
  m.simple_app = req.simple_app;
  m.head = req.head;
  m.timestamp = req.timestamp;
  return m;
}

}  // namespace

bool depair_command(int cmd, int* request_type, int* dtype) {
  if (cmd < 0) return false;
  // In 64 bits: for a head near INT_MAX, w * w overflows int (found by the
  // sanitizer build of PsServer.MutatedRequestsNeverCrashTheServer).
  const int64_t w = static_cast<int64_t>(std::floor((std::sqrt(8.0 * cmd + 1) - 1) / 2));
  const int64_t t = (w * w + w) / 2;
  *dtype = static_cast<int>(cmd - t);
  *request_type = static_cast<int>(w - (cmd - t));
  return *dtype >= 0 && *request_type >= 0;
}

KVServer::KVServer(ServerOptions options, Reply reply)
    : options_(options), reply_(std::move(reply)), ssp_(options.num_workers) {}

void KVServer::tick(SteadyTime now) {
  for (auto& [pull, why] : ssp_.expire(now)) refuse(pull.meta, why);
}

void KVServer::release_held() {
  for (const HeldPull& p : ssp_.release()) respond(p.meta, p.ps_key, p.dtype, true);
}

const std::vector<float>* KVServer::stored(int key) const {
  auto it = store_.find(key);
  return it == store_.end() ? nullptr : it->second.get();
}

// Note [Replies share the stored value]
// A pull's answer is sent from the stored vector itself: the reply's frame
// holds a reference (Note [Frames share their bytes]) until ZeroMQ has
// written it, so W pulls of a round cost no copies. The value then must not
// change while a reply still holds it, and it changes at the next update,
// which can come before ZeroMQ has sent an earlier answer (a slow peer, a
// queue to a dead one). Two ways out: send a snapshot (one copy per pull,
// W per round), or copy on write (a copy only when an update finds a reply
// still holding the value). Copy on write is chosen: in dist_sync the
// workers can only push again after they received the round's answers, so
// by the next update ZeroMQ has normally released every reference and the
// update runs in place; and a round without an optimizer does not even
// write: the summed buffer becomes the stored value (a pointer swap), and
// the old value becomes the next round's sum buffer once nothing holds it.
std::vector<float>& KVServer::writable(int key) {
  std::shared_ptr<std::vector<float>>& v = store_[key];
  if (!sole_owner(v)) v = std::make_shared<std::vector<float>>(*v);
  return *v;
}

void KVServer::refuse(const Meta& req, const std::string& why) {
  if (req.sender == kEmpty || !req.request) return;  // nobody to tell
  Message msg;
  msg.meta = reply_meta(req);
  msg.meta.body = cat(kErrorPrefix, "server ", options_.rank, ": ", why);
  reply_(req.sender, msg);
}

void KVServer::handle(const Message& msg) {
  const Meta& m = msg.meta;
  if (!m.request) return;  // servers send no requests, so expect no replies
  if (m.sender == kEmpty) return;
  if (m.simple_app) return handle_command(msg);
  if (msg.data.empty()) return refuse(m, "a data request without keys");
  if (msg.data.size() < 2 || msg.data.size() > 3 || m.data_type.size() != msg.data.size()) {
    return refuse(m, cat("a data request needs keys, values and optional lengths frames, with "
                         "their types; got ",
                         msg.data.size(), " frames and ", m.data_type.size(), " types"));
  }
  if (m.data_type[0] != DataType::kUint64) return refuse(m, "the keys frame is not uint64");
  if (m.data_type[1] == DataType::kChar) return handle_mxnet(msg);
  if (m.data_type[1] == DataType::kFloat) return handle_pslite_default(msg);
  refuse(m, cat("values of ps-lite DataType ", static_cast<int>(m.data_type[1]),
                " are not served; send CHAR bytes with lengths (MXNet) or FLOAT"));
}

void KVServer::handle_command(const Message& msg) {
  const Meta& m = msg.meta;
  switch (static_cast<ServerCommand>(m.head)) {
    case ServerCommand::kController:
      try {
        optimizer_ = OptimizerSpec::parse(m.body);
        has_optimizer_ = true;
      } catch (const InvalidArgument& e) {
        return refuse(m, cat("kController: ", e.what()));
      }
      break;
    case ServerCommand::kSetMultiPrecision:
      break;
    case ServerCommand::kStopServer:
      stop_requested_ = true;
      break;
    case ServerCommand::kSyncMode:
      sync_ = true;
      break;
    case ServerCommand::kWorkerLeaving:
      if (is_worker_id(m.sender)) {
        departed_.insert(m.sender);
        ssp_.left(id_to_rank(m.sender));
      }
      release_held();
      for (auto& [key, buf] : updates_) {
        if (!buf.requests.empty() && static_cast<int>(buf.requests.size()) >= active_workers()) {
          complete_round(key);
        }
      }
      break;
    case ServerCommand::kStaleness: {
      int staleness = -1;
      std::chrono::milliseconds limit{0};
      if (!decode_staleness(m.body, &staleness, &limit)) {
        return refuse(m, cat("kStaleness: '", m.body, "' is not '<staleness >= -1>,<limit ms>'"));
      }
      ssp_.configure(staleness, limit);
      release_held();
      break;
    }
    case ServerCommand::kSetGradientCompression: {
      int type = 0;
      float threshold = threshold_;
      if (!decode_compression_params(m.body, &type, &threshold) || type == 1) {
        return refuse(m, cat("kSetGradientCompression: '", m.body,
                             "' is not '0' (none) or "
                             "'2,<threshold>' (2-bit; 1-bit is not served)"));
      }
      compression_ = type;
      threshold_ = threshold;
      break;
    }
    default:
      return refuse(m, cat("unknown command ", m.head));
  }
  save_settings();  // Note [Server snapshots]: before the acknowledgement
  Message ack;
  ack.meta = reply_meta(m);
  reply_(m.sender, ack);
}

void KVServer::handle_pslite_default(const Message& msg) {
  const Meta& m = msg.meta;
  const Frame& keys = msg.data[0];
  const Frame& vals = msg.data[1];
  if (keys.size() % sizeof(uint64_t) != 0 || vals.size() % sizeof(float) != 0) {
    return refuse(m, "a keys or values frame is not a whole number of elements");
  }
  const size_t n = keys.size() / sizeof(uint64_t);
  if (m.push && vals.size() / sizeof(float) != n) {
    return refuse(m, cat("ps-lite's default handle takes one value per key; got ", n, " keys and ",
                         vals.size() / sizeof(float), " values"));
  }
  // Read from the received frames (Note [Copies per hop] in van.cpp).
  auto out = std::make_shared<std::vector<float>>(m.pull ? n : 0);
  for (size_t i = 0; i < n; ++i) {
    uint64_t k;
    std::memcpy(&k, keys.data() + i * sizeof(k), sizeof(k));
    float& v = default_store_[k];
    if (m.push) {
      float add;
      std::memcpy(&add, vals.data() + i * sizeof(add), sizeof(add));
      v += add;
    }
    if (m.pull) (*out)[i] = v;
  }
  Message res;
  res.meta = reply_meta(m);
  if (m.pull) {
    res.add_frame(keys, DataType::kUint64);  // the request's keys, shared
    res.add_frame(Frame::share(out, out->data(), out->size() * sizeof(float)), DataType::kFloat);
  }
  reply_(m.sender, res);
}

void KVServer::handle_mxnet(const Message& msg) {
  const Meta& m = msg.meta;
  int request_type = 0, dtype = 0;
  const bool compressed_ok = request_type_ok(m.head, &request_type, &dtype);
  if (!compressed_ok) {
    return refuse(m, cat("command ", m.head,
                         " is not a default push/pull of float32 (0) or "
                         "float16 (5), nor a 2-bit compressed float32 push (3); row-sparse "
                         "requests are not served"));
  }
  std::vector<uint64_t> keys;
  if (!frame_as(msg.data[0], &keys) || keys.empty() || keys.size() > 2) {
    return refuse(m, "an MXNet request carries one uint64 key (two for a compressed push)");
  }
  const uint64_t begin = key_range_begin(options_.rank, options_.num_servers);
  const uint64_t span = kMaxKey / static_cast<uint64_t>(options_.num_servers);
  for (uint64_t k : keys) {
    if (k < begin || k - begin >= span || k - begin > INT32_MAX) {
      return refuse(
          m, cat("key ", k, " is outside this server's range [", begin, ", ", begin + span, ")"));
    }
  }
  const uint64_t ps_key = keys.back();
  const int key = static_cast<int>(ps_key - begin);
  if (request_type == kRequestOptimizerState)
    return handle_optimizer_state(msg, key, ps_key, dtype);
  if (!m.push) {
    if (keys.size() != 1) return refuse(m, "a pull carries one key");
    if (!store_.count(key))
      return refuse(m, cat("key ", key, " is not initialised: call init first"));
    if (!sync_ && m.pull && !admit_pull(m, key, ps_key, dtype)) return;  // held by SSP
    return respond(m, ps_key, dtype, m.pull);
  }
  std::vector<int32_t> lens;
  if (!push_lengths_ok(msg, keys.size(), &lens)) {
    return refuse(m, cat("key ", key,
                         ": a push needs one int32 length per key, the last equal to "
                         "the values' bytes"));
  }
  if (request_type == 2) {  // Note [2-bit compression]
    if (compression_ != kCompressionTwoBit) {
      return refuse(m, cat("key ", key,
                           ": a compressed push, but no 2-bit compression was set "
                           "(kSetGradientCompression)"));
    }
    const size_t original = static_cast<size_t>(keys[0] - begin);
    if (keys.size() != 2 || lens[0] != 0 || msg.data[1].size() != compressed_floats(original) * 4) {
      return refuse(m, cat("key ", key, ": a compressed push needs a length-0 size key and ",
                           "ceil(n/16) floats of values"));
    }
    std::vector<float> recved(original);
    dequantize_2bit(msg.data[1].data(), original, threshold_, recved.data());
    return accept_push(m, key, ps_key, kMshadowFloat32,
                       reinterpret_cast<const char*>(recved.data()), recved.size());
  }
  if (keys.size() != 1) return refuse(m, "a default push carries one key");
  if (std::string why = values_size_error(msg.data[1], dtype, key); !why.empty()) {
    return refuse(m, why);
  }
  accept_push(m, key, ps_key, dtype, msg.data[1].data(), msg.data[1].size() / dtype_size(dtype));
}

// Note [Optimizer state] (server.h).
void KVServer::handle_optimizer_state(const Message& msg, int key, uint64_t ps_key, int dtype) {
  const Meta& m = msg.meta;
  const std::string what = cat("optimizer state of key ", key);
  if (msg.data[0].size() != sizeof(uint64_t) || m.push == m.pull) {
    return refuse(m, cat(what, ": a request carries one key and either pushes or pulls"));
  }
  auto it = store_.find(key);
  if (it == store_.end())
    return refuse(m, cat(what, ": the key is not initialised: call init first"));
  std::vector<float>& mom = momentum_[key];
  if (mom.size() != it->second->size()) mom.assign(it->second->size(), 0.0f);
  if (m.pull) return send_values(m, ps_key, mom, dtype, std::to_string(updates_applied_[key]));
  std::vector<int32_t> lens;
  if (!push_lengths_ok(msg, 1, &lens)) {
    return refuse(m, cat(what, ": a push needs one int32 length equal to the values' bytes"));
  }
  std::vector<float> recved;
  const std::string why = push_values(msg.data[1], dtype, key, &recved);
  if (!why.empty()) return refuse(m, why);
  if (recved.size() != mom.size()) {
    return refuse(m, cat(what, ": the key holds ", mom.size(), " values here but the push has ",
                         recved.size()));
  }
  long long updates = -1;
  if (!parse_int(m.body, &updates) || updates < 0) {
    return refuse(m, cat(what, ": the body '", m.body, "' is not an update count (>= 0)"));
  }
  mom = std::move(recved);
  updates_applied_[key] = static_cast<uint64_t>(updates);
  save_key(key);  // Note [Server snapshots]: before the acknowledgement
  respond(m, ps_key, dtype, false);
}

bool KVServer::admit_pull(const Meta& m, int key, uint64_t ps_key, int dtype) {
  if (!is_worker_id(m.sender)) return true;
  HeldPull p;
  p.meta = m;
  p.ps_key = ps_key;
  p.dtype = dtype;
  p.key = key;
  p.worker = id_to_rank(m.sender);
  p.since = std::chrono::steady_clock::now();
  return ssp_.admit(std::move(p));
}

bool KVServer::request_type_ok(int head, int* request_type, int* dtype) const {
  if (!depair_command(head, request_type, dtype)) return false;
  if (*request_type == 0 || *request_type == kRequestOptimizerState) {
    return *dtype == kMshadowFloat32 || *dtype == kMshadowFloat16;
  }
  return *request_type == 2 && *dtype == kMshadowFloat32;
}

void KVServer::accept_push(const Meta& m, int key, uint64_t ps_key, int dtype, const char* values,
                           size_t count) {
  if (snapshot_ && duplicate_push(m, key, ps_key, dtype)) return;
  auto it = store_.find(key);
  if (it == store_.end()) {  // the first push initialises
    auto init = std::make_shared<std::vector<float>>(count);
    to_float(values, count, dtype, init->data());
    store_[key] = std::move(init);
    updates_applied_[key] = 0;
    save_key(key);
    return respond(m, ps_key, dtype, m.pull);
  }
  if (it->second->size() != count) {
    return refuse(
        m, cat("key ", key, " holds ", it->second->size(), " values here but the push has ", count,
               "; every push of a key must have its init size"));
  }
  if (!sync_) {
    std::vector<float> recved(count);
    to_float(values, count, dtype, recved.data());
    apply(key, recved);
    save_key(key);
    if (is_worker_id(m.sender)) ssp_.pushed(key, id_to_rank(m.sender));
    release_held();
    if (m.pull && !admit_pull(m, key, ps_key, dtype)) return;  // held by SSP
    return respond(m, ps_key, dtype, m.pull);
  }
  // Summed straight from the frame into the round's buffer, which is reused
  // from round to round (Note [Replies share the stored value]).
  UpdateBuf& buf = updates_[key];
  if (buf.requests.empty()) {
    if (!buf.merged || !sole_owner(buf.merged)) buf.merged = std::make_shared<std::vector<float>>();
    buf.merged->resize(count);
    to_float(values, count, dtype, buf.merged->data());
  } else {
    add_float(values, count, dtype, buf.merged->data());
  }
  buf.requests.push_back(Pending{m, ps_key, dtype});
  if (static_cast<int>(buf.requests.size()) >= active_workers()) complete_round(key);
}

void KVServer::complete_round(int key) {
  UpdateBuf& buf = updates_[key];
  if (has_optimizer_) {
    apply(key, *buf.merged);
  } else {
    // dist_sync without optimizer stores the round's sum (MXNet): the sum
    // buffer becomes the value, the old value the next sum buffer.
    store_[key].swap(buf.merged);
    ++updates_applied_[key];
  }
  save_key(key);  // Note [Server snapshots]: before any answer of the round
  std::vector<Pending> done = std::move(buf.requests);
  buf.requests.clear();
  for (const auto& p : done) respond(p.meta, p.ps_key, p.dtype, p.meta.pull);
}

void KVServer::apply(int key, const std::vector<float>& update) {
  std::vector<float>& w = writable(key);
  ++updates_applied_[key];
  if (!has_optimizer_) {  // dist_async: each push adds
    for (size_t i = 0; i < w.size(); ++i) w[i] += update[i];
    return;
  }
  const auto& o = optimizer_;
  std::vector<float>& mom = momentum_[key];
  if (mom.size() != w.size()) mom.assign(w.size(), 0.0f);
  for (size_t i = 0; i < w.size(); ++i) {
    const double g = o.rescale_grad * update[i];
    mom[i] =
        static_cast<float>(o.momentum * mom[i] - o.learning_rate * (g + o.weight_decay * w[i]));
    w[i] += mom[i];
  }
}

void KVServer::respond(const Meta& req, uint64_t ps_key, int dtype, bool with_data) {
  Message res;
  res.meta = reply_meta(req);
  if (with_data) {
    auto& value =
        store_[static_cast<int>(ps_key - key_range_begin(options_.rank, options_.num_servers))];
    if (!value) value = std::make_shared<std::vector<float>>();
    // Note [Replies share the stored value]; fp16 answers are converted.
    Frame bytes = dtype == kMshadowFloat32
                      ? Frame::share(value, value->data(), value->size() * sizeof(float))
                      : Frame(from_float(*value, dtype));
    const int32_t len = static_cast<int32_t>(bytes.size());
    res.add_data(&ps_key, 1, DataType::kUint64);
    res.add_frame(std::move(bytes), DataType::kChar);
    res.add_data(&len, 1, DataType::kInt32);
  }
  reply_(req.sender, res);
}

// The optimizer state's answer (Note [Optimizer state]): a copy, as it is
// small and read once per checkpoint.
void KVServer::send_values(const Meta& req, uint64_t ps_key, const std::vector<float>& values,
                           int dtype, std::string body) {
  Message res;
  res.meta = reply_meta(req);
  res.meta.body = std::move(body);
  Frame bytes(from_float(values, dtype));
  const int32_t len = static_cast<int32_t>(bytes.size());
  res.add_data(&ps_key, 1, DataType::kUint64);
  res.add_frame(std::move(bytes), DataType::kChar);
  res.add_data(&len, 1, DataType::kInt32);
  reply_(req.sender, res);
}

}  // namespace dtrain::ps
