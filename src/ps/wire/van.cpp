#include "ps/wire/van.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::ps {
namespace {

// Note [No hang at exit]
// Closing a socket waits up to its linger period to flush queued messages.
// After a normal end that is a final reply or barrier answer to a live peer
// (2 s, plenty); after a failure some queue leads to the dead node and would
// always use the whole period, so the endpoint shortens it (200 ms: enough
// for the scheduler's TERMINATE notices to live nodes to leave).
// Frames beyond this make the message malformed; it bounds what a bad sender
// can make us hold (ps-lite messages have 1 meta + at most 3 data frames).
constexpr size_t kMaxFrames = 16;

// Note [Copies per hop]
// ZeroMQ copies what zmq_send is given, but sends a zmq_msg_init_data
// message straight from its buffer, calling a free function when done; and
// a received zmq_msg_t owns the bytes ZeroMQ read from the socket. So, as in
// ps-lite's ZMQVan: a data frame of kZeroCopyBytes or more is sent from the
// Frame's bytes, its owner held by the message until the free callback
// (which runs on a ZeroMQ I/O thread and only drops a reference), and every
// received data frame keeps its zmq_msg_t as the Frame's owner. Per hop of
// an fp32 value, user space then copies nothing in the Van: a worker's push
// is copied once out of the caller's array (Note [Pushed arrays] in
// worker.cpp) and sent from that copy, the server sums from the received message, and
// answers pulls from the stored value (server.cpp); the worker copies the
// pulled bytes once, into the caller's output. Before, each hop copied
// every value three to four times (into a frame string, zmq_send's copy,
// out of the received message, into a float vector; replies likewise).
// Smaller frames (keys, lengths, meta) are copied: a copy of a few bytes
// costs less than the allocation of a free-callback hint.
constexpr size_t kZeroCopyBytes = 4096;

// Note [Send buffers]
// A dist_sync server answers a part only when every worker's push of it has
// arrived, so its answers go at the pace of the slowest of the W flows into
// it. Each worker sends to its S servers over S connections that share its
// uplink; with the kernel's autotuned send buffers (up to 4 MB each) one of
// them can run megabytes ahead of another, and the servers then wait on the
// late one while their uplinks idle: measured on 1 Gbit/s links with 4
// workers and 4 servers, ResNet-18's push-pull took 570 ms against a 390 ms
// line-rate bound, the answers trailing the pushes by 100-150 ms
// (docs/benchmarks.md). With a small SO_SNDBUF the bytes queued per
// connection stay small, ZeroMQ's I/O thread fills the S sockets in turn and
// the flows advance together (490 ms). 64 KB (the kernel doubles it) still
// covers a 10 Gbit/s link's bandwidth-delay product at the 100 us round
// trips of one data centre per connection; 0 restores autotuning for long
// round trips.

std::string zmq_error() { return zmq_strerror(zmq_errno()); }

// Drops the reference a sent zmq message held (ZeroMQ's free callback).
void release_owner(void* /*data*/, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}

// A received zmq message as the owner of a Frame's bytes.
struct ReceivedPart {
  zmq_msg_t msg;
  ReceivedPart() { zmq_msg_init(&msg); }
  ~ReceivedPart() { zmq_msg_close(&msg); }
  ReceivedPart(const ReceivedPart&) = delete;
  ReceivedPart& operator=(const ReceivedPart&) = delete;
};

// `host` as a dotted IPv4 address ("localhost" -> "127.0.0.1"); "" if it
// does not resolve.
std::string numeric_ipv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return "";
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof(buf));
  freeaddrinfo(res);
  return buf;
}

void close_socket(void* s, int linger) {
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_close(s);
}

}  // namespace

Van::Van() {
  context_ = zmq_ctx_new();
  if (!context_) throw DistError(cat("cannot create a ZeroMQ context: ", zmq_error()));
}

Van::~Van() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, s] : senders_) close_socket(s, linger_ms_);
    senders_.clear();
  }
  if (receiver_) close_socket(receiver_, 0);
  zmq_ctx_term(context_);
}

int Van::bind(const std::string& host, int port) {
  receiver_ = zmq_socket(context_, ZMQ_ROUTER);
  if (!receiver_) throw DistError(cat("cannot create a ZeroMQ socket: ", zmq_error()));
  const std::string where = host.empty() ? "*" : host;
  // ZeroMQ binds interface names and addresses, not host names: resolve one.
  const std::string ip = where == "*" ? where : numeric_ipv4(where);
  const std::string addr = port == 0 ? cat("tcp://", ip, ":*") : cat("tcp://", ip, ":", port);
  if (ip.empty() || zmq_bind(receiver_, addr.c_str()) != 0) {
    const bool unresolved = ip.empty();
    const int err = unresolved ? 0 : zmq_errno();
    std::string why = unresolved ? std::string("the name does not resolve to an IPv4 address")
                                 : std::string(zmq_strerror(err));
    if (err == EADDRINUSE) {
      why += " (another job or scheduler uses the port? pick a free DMLC_PS_ROOT_PORT)";
    } else if (err == EADDRNOTAVAIL) {
      why += cat(" (", ip,
                 " is not an address of this machine; in Kubernetes set "
                 "DMLC_USE_KUBERNETES=1 so the scheduler binds 0.0.0.0)");
    }
    throw StoreError(cat("cannot listen on ", where, ":", port, ": ", why));
  }
  char endpoint[256] = {};
  size_t len = sizeof(endpoint);
  zmq_getsockopt(receiver_, ZMQ_LAST_ENDPOINT, endpoint, &len);
  const char* colon = std::strrchr(endpoint, ':');
  long long bound = 0;
  if (!colon || !parse_int(colon + 1, &bound)) {
    throw DistError(cat("cannot read the port ZeroMQ bound: '", endpoint, "'"));
  }
  return static_cast<int>(bound);
}

void Van::connect(int peer_id, const std::string& host, int port, int my_id, bool drop_queued) {
  void* s = zmq_socket(context_, ZMQ_DEALER);
  if (!s) throw DistError(cat("cannot create a ZeroMQ socket: ", zmq_error(), " (ulimit -n?)"));
  // Never block a sender on a slow or dead peer: an unbounded queue, and the
  // failure detector (heartbeats) bounds how long it grows.
  int hwm = 0;
  zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
  if (const int sndbuf = send_buffer_.load(); sndbuf > 0) {  // Note [Send buffers]
    zmq_setsockopt(s, ZMQ_SNDBUF, &sndbuf, sizeof(sndbuf));
  }
  if (my_id != kEmpty) {
    const std::string id = identity(my_id);
    zmq_setsockopt(s, ZMQ_ROUTING_ID, id.data(), id.size());
  }
  const std::string addr = cat("tcp://", host, ":", port);
  if (zmq_connect(s, addr.c_str()) != 0) {
    const std::string why = zmq_error();
    zmq_close(s);
    throw DistError(cat("cannot connect to node ", peer_id, " at ", host, ":", port, ": ", why));
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = senders_.find(peer_id);
  if (it != senders_.end()) close_socket(it->second, drop_queued ? 0 : linger_ms_.load());
  senders_[peer_id] = s;
}

bool Van::send(int peer_id, const Message& msg) {
  const std::string meta = encode_meta(msg.meta);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = senders_.find(peer_id);
  if (it == senders_.end()) return false;
  void* s = it->second;
  const size_t n = msg.data.size();
  auto send_frame = [&](std::string_view frame, const std::shared_ptr<const void>* owner,
                        bool more) {
    const int flags = ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0);
    if (!owner || !*owner || frame.size() < kZeroCopyBytes) {
      while (zmq_send(s, frame.data(), frame.size(), flags) < 0) {
        if (zmq_errno() != EINTR) return false;
      }
    } else {  // Note [Copies per hop]
      zmq_msg_t part;
      auto* hint = new std::shared_ptr<const void>(*owner);
      if (zmq_msg_init_data(&part, const_cast<char*>(frame.data()), frame.size(), release_owner,
                            hint) != 0) {
        delete hint;
        return false;
      }
      while (zmq_msg_send(&part, s, flags) < 0) {
        if (zmq_errno() != EINTR) {
          zmq_msg_close(&part);  // not sent: ZeroMQ calls release_owner now
          return false;
        }
      }
    }
    bytes_sent_ += frame.size();
    return true;
  };
  if (!send_frame(meta, nullptr, n > 0)) return false;
  for (size_t i = 0; i < n; ++i) {
    if (!send_frame(msg.data[i].view(), &msg.data[i].owner(), i + 1 < n)) return false;
  }
  return true;
}

std::optional<Received> Van::recv(std::chrono::milliseconds timeout) {
  zmq_pollitem_t item = {receiver_, 0, ZMQ_POLLIN, 0};
  const int rc = zmq_poll(&item, 1, static_cast<long>(timeout.count()));
  if (rc <= 0 || !(item.revents & ZMQ_POLLIN)) return std::nullopt;
  Received out;
  std::vector<Frame> frames;  // Note [Copies per hop]: the zmq messages themselves
  bool more = true;
  while (more) {
    auto part = std::make_shared<ReceivedPart>();
    while (zmq_msg_recv(&part->msg, receiver_, 0) < 0) {
      if (zmq_errno() != EINTR) {
        out.error = cat("receive failed: ", zmq_error());
        return out;
      }
    }
    more = zmq_msg_more(&part->msg);
    // Frames past the limit are read and dropped, so the next message starts
    // on a message boundary.
    if (frames.size() < kMaxFrames + 2) {
      const void* bytes = zmq_msg_data(&part->msg);
      const size_t size = zmq_msg_size(&part->msg);
      frames.push_back(Frame::share(std::move(part), bytes, size));
    }
  }
  out.msg.meta.sender = parse_identity(frames[0].view());
  if (frames.size() < 2) {
    out.error = "a message with no meta frame";
    return out;
  }
  if (frames.size() > kMaxFrames + 1) {
    out.error = cat("a message with more than ", kMaxFrames, " frames");
    return out;
  }
  std::string why;
  auto meta = decode_meta(frames[1].view(), &why);
  if (!meta) {
    out.error = why;
    return out;
  }
  const int sender = out.msg.meta.sender;
  out.msg.meta = std::move(*meta);
  out.msg.meta.sender = sender;
  for (size_t i = 2; i < frames.size(); ++i) out.msg.data.push_back(std::move(frames[i]));
  return out;
}

uint64_t Van::bytes_sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_sent_;
}

}  // namespace dtrain::ps
