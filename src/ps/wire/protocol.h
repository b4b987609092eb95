#pragma once
// ps-lite's wire protocol: the message model and its PBMeta encoding.
//
// Note [ps-lite wire format]
// A ps-lite message on a ZeroMQ DEALER socket is one multi-part message:
// frame 0 is the meta, the protobuf (proto2) encoding of ps-lite's PBMeta
// (dmlc/ps-lite src/meta.proto); frames 1.. are raw little-endian arrays:
// keys (uint64), values, and optionally lengths (int32), their element types
// listed in meta.data_type (ps-lite's DataType enum). The receiving ROUTER
// prepends the sender's identity frame, "ps<id>" (absent before the scheduler
// has given the sender an id). The encoder below writes the fields ps-lite's
// Van::PackMeta sets, in field-number order as protobuf does, so the bytes are
// those a ps-lite node sends; the decoder accepts any valid encoding (fields
// in any order, unknown fields skipped) and rejects malformed input with a
// reason, never reading past the frame.
//
// Field numbers (meta.proto):
//   PBMeta:    head 1, body 2, control 3, request 4, push 5, simple_app 6,
//              app_id 7, timestamp 8, data_type 9 (packed), customer_id 10,
//              data_size 11, pull 12, priority 13
//   PBControl: cmd 1, node 2 (repeated), barrier_group 3, msg_sig 4
//   PBNode:    role 1, id 2, hostname 3, port 4, is_recovery 5, customer_id 10

#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::ps {

/// ps-lite's "unset" value for ids, timestamps, app ids and heads.
constexpr int kEmpty = INT_MAX;

/// Node ids and barrier groups (ps-lite base.h).
constexpr int kScheduler = 1;
constexpr int kServerGroup = 2;
constexpr int kWorkerGroup = 4;
constexpr int kAllGroups = kScheduler + kServerGroup + kWorkerGroup;

inline int server_rank_to_id(int rank) { return rank * 2 + 8; }
inline int worker_rank_to_id(int rank) { return rank * 2 + 9; }
inline int id_to_rank(int id) { return id < 8 ? 0 : (id - 8) / 2; }
inline bool is_server_id(int id) { return id >= 8 && id % 2 == 0; }
inline bool is_worker_id(int id) { return id >= 9 && id % 2 == 1; }

/// ps-lite's Node::Role values.
enum class Role : int { kServer = 0, kWorker = 1, kScheduler = 2 };
const char* role_name(Role role);

/// ps-lite's Control::Command values.
enum class Command : int {
  kEmpty = 0,
  kTerminate = 1,
  kAddNode = 2,
  kBarrier = 3,
  kAck = 4,
  kHeartbeat = 5,
};

/// ps-lite's DataType values (meta.data_type).
enum class DataType : int {
  kChar = 0,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUint8,
  kUint16,
  kUint32,
  kUint64,
  kFloat,
  kDouble,
  kOther
};

struct NodeInfo {
  Role role = Role::kServer;
  int id = kEmpty;
  std::string hostname;
  int port = kEmpty;
  bool is_recovery = false;
  int customer_id = 0;
};

struct Control {
  Command cmd = Command::kEmpty;
  std::vector<NodeInfo> node;
  int barrier_group = 0;
  uint64_t msg_sig = 0;
  bool empty() const { return cmd == Command::kEmpty; }
};

struct Meta {
  int head = kEmpty;
  std::string body;
  Control control;
  bool request = false;
  bool push = false;
  bool pull = false;
  bool simple_app = false;
  int app_id = kEmpty;
  int timestamp = kEmpty;
  std::vector<DataType> data_type;
  int customer_id = kEmpty;
  int data_size = 0;
  int priority = 0;
  // Not on the wire: the sender comes from the ROUTER's identity frame.
  int sender = kEmpty;
};

// Note [Frames share their bytes]
// A data frame is a read-only view of bytes with a shared owner that keeps
// them alive, as ps-lite's SArray is: copying a Frame (a Message kept for
// re-sending, the W replies of a round) copies no bytes. The Van sends big
// frames straight from the owner's memory (zmq_msg_init_data, the owner
// released in ZeroMQ's free callback) and receives each frame as the
// ZeroMQ message itself (the owner closes it), so a value crosses a hop
// without user-space copies; see Note [Copies per hop] in van.cpp. The bytes
// may sit at any address (ZeroMQ packs small received messages into one
// buffer): read multi-byte values with memcpy, never through a cast pointer.
// Owners must not change the bytes while a Frame may still be sent: a
// worker's push buffer (the copy made at the call, Note [Pushed arrays] in
// worker.cpp), the server's stored values by copy-on-write (Note [Replies share the stored
// value] in server.cpp).

/// The bytes of one data frame, shared (Note [Frames share their bytes]).
/// Copies are cheap and share the bytes; a Frame is immutable.
class Frame {
 public:
  Frame() = default;
  /// Takes `bytes` over (no copy).
  Frame(std::string bytes);  // NOLINT(google-explicit-constructor): frames read as strings
  /// Copies `n` bytes at `data`.
  Frame(const char* data, size_t n);
  /// Shares `n` bytes at `data`, which `owner` keeps alive and unchanged
  /// for as long as any copy of the Frame exists. A null owner borrows the
  /// bytes: only for a Frame that dies before they do (an in-process call);
  /// the Van copies such a frame when it sends it.
  static Frame share(std::shared_ptr<const void> owner, const void* data, size_t n);

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {data_, size_}; }
  /// What keeps the bytes alive (null for an empty frame).
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  std::shared_ptr<const void> owner_;
  const char* data_ = "";
  size_t size_ = 0;
};

/// A message: meta plus raw data frames (keys, values, lengths).
struct Message {
  Meta meta;
  std::vector<Frame> data;

  /// Appends a frame of `n` elements of type T (copied), recording its
  /// DataType and adding its bytes to meta.data_size (as ps-lite's AddData).
  template <typename T>
  void add_data(const T* values, size_t n, DataType type) {
    add_frame(Frame(reinterpret_cast<const char*>(values), n * sizeof(T)), type);
  }
  /// Appends `frame` without copying its bytes (as add_data otherwise).
  void add_frame(Frame frame, DataType type) {
    meta.data_type.push_back(type);
    meta.data_size += static_cast<int>(frame.size());
    data.push_back(std::move(frame));
  }
};

/// The PBMeta bytes ps-lite's Van::PackMeta writes for `meta`.
std::string encode_meta(const Meta& meta);

/// Decodes a PBMeta frame. On malformed input returns nullopt and sets
/// *error to the reason ("truncated varint at byte 3", ...).
std::optional<Meta> decode_meta(std::string_view bytes, std::string* error);

/// "ps<id>": the ZeroMQ identity of node `id`.
std::string identity(int id);
/// The node id of a "ps<id>" identity; kEmpty for anything else.
int parse_identity(std::string_view identity);

}  // namespace dtrain::ps
