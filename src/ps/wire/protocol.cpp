// PBMeta encoding (see Note [ps-lite wire format] in protocol.h).
#include "ps/wire/protocol.h"

#include "common/strings.h"

namespace dtrain::ps {
namespace {

constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

class Writer {
 public:
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void tag(int field, int wire_type) { varint(static_cast<uint64_t>(field) << 3 | wire_type); }
  // protobuf writes a negative int32 as its 64-bit two's complement (10 bytes).
  void int32(int field, int v) {
    tag(field, kVarint);
    varint(static_cast<uint64_t>(static_cast<int64_t>(v)));
  }
  void uint64(int field, uint64_t v) {
    tag(field, kVarint);
    varint(v);
  }
  void boolean(int field, bool v) {
    tag(field, kVarint);
    varint(v ? 1 : 0);
  }
  void bytes(int field, std::string_view v) {
    tag(field, kLengthDelimited);
    varint(v.size());
    out_.append(v);
  }
  std::string& str() { return out_; }

 private:
  std::string out_;
};

std::string encode_node(const NodeInfo& n) {
  Writer w;
  w.int32(1, static_cast<int>(n.role));
  w.int32(2, n.id);
  w.bytes(3, n.hostname);
  w.int32(4, n.port);
  w.boolean(5, n.is_recovery);
  w.int32(10, n.customer_id);
  return std::move(w.str());
}

std::string encode_control(const Control& c) {
  Writer w;
  w.int32(1, static_cast<int>(c.cmd));
  for (const auto& n : c.node) w.bytes(2, encode_node(n));
  if (c.cmd == Command::kBarrier) w.int32(3, c.barrier_group);
  if (c.cmd == Command::kAck) w.uint64(4, c.msg_sig);
  return std::move(w.str());
}

// A bounds-checked reader; every failure records a reason and stops.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool done() const { return pos_ >= in_.size() || !error_.empty(); }
  const std::string& error() const { return error_; }
  bool fail(const std::string& why) {
    if (error_.empty()) error_ = cat(why, " at byte ", pos_);
    return false;
  }
  bool varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= in_.size()) return fail("truncated varint");
      const auto b = static_cast<uint8_t>(in_[pos_++]);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return fail("varint longer than 10 bytes");
  }
  bool length_delimited(std::string_view* v) {
    uint64_t n = 0;
    if (!varint(&n)) return false;
    if (n > in_.size() - pos_) return fail(cat("length ", n, " runs past the end"));
    *v = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool skip(int wire_type) {
    uint64_t ignored = 0;
    std::string_view ignored_bytes;
    switch (wire_type) {
      case kVarint:
        return varint(&ignored);
      case kLengthDelimited:
        return length_delimited(&ignored_bytes);
      case kFixed64:
        return advance(8);
      case kFixed32:
        return advance(4);
      default:
        return fail(cat("unsupported wire type ", wire_type));
    }
  }
  // Reads a field's tag; false at the end or on error.
  bool tag(int* field, int* wire_type) {
    uint64_t t = 0;
    if (!varint(&t)) return false;
    *field = static_cast<int>(t >> 3);
    *wire_type = static_cast<int>(t & 7);
    if (*field == 0) return fail("field number 0");
    return true;
  }
  bool expect(int wire_type, int want, int field) {
    if (wire_type == want) return true;
    return fail(cat("field ", field, " has wire type ", wire_type, ", expected ", want));
  }

 private:
  bool advance(size_t n) {
    if (n > in_.size() - pos_) return fail("truncated fixed-width field");
    pos_ += n;
    return true;
  }
  std::string_view in_;
  size_t pos_ = 0;
  std::string error_;
};

// Reads a varint field into an int32 (protobuf truncates to the low 32 bits).
bool read_int(Reader& r, int wire_type, int field, int* out) {
  uint64_t v = 0;
  if (!r.expect(wire_type, kVarint, field) || !r.varint(&v)) return false;
  *out = static_cast<int>(static_cast<uint32_t>(v));
  return true;
}

bool read_bool(Reader& r, int wire_type, int field, bool* out) {
  uint64_t v = 0;
  if (!r.expect(wire_type, kVarint, field) || !r.varint(&v)) return false;
  *out = v != 0;
  return true;
}

bool decode_node(std::string_view bytes, NodeInfo* n, std::string* error) {
  Reader r(bytes);
  int field = 0, wt = 0, role = 0;
  bool has_role = false;
  while (!r.done() && r.tag(&field, &wt)) {
    bool ok = true;
    switch (field) {
      case 1:
        ok = read_int(r, wt, field, &role);
        has_role = true;
        break;
      case 2:
        ok = read_int(r, wt, field, &n->id);
        break;
      case 3: {
        std::string_view s;
        ok = r.expect(wt, kLengthDelimited, field) && r.length_delimited(&s);
        n->hostname = std::string(s);
        break;
      }
      case 4:
        ok = read_int(r, wt, field, &n->port);
        break;
      case 5:
        ok = read_bool(r, wt, field, &n->is_recovery);
        break;
      case 10:
        ok = read_int(r, wt, field, &n->customer_id);
        break;
      default:
        ok = r.skip(wt);
    }
    if (!ok) break;
  }
  if (!r.error().empty()) return *error = cat("PBNode: ", r.error()), false;
  if (!has_role) return *error = "PBNode: required field role (1) is missing", false;
  if (role < 0 || role > 2) return *error = cat("PBNode: role ", role, " is not 0, 1 or 2"), false;
  n->role = static_cast<Role>(role);
  return true;
}

bool decode_control(std::string_view bytes, Control* c, std::string* error) {
  Reader r(bytes);
  int field = 0, wt = 0, cmd = 0;
  bool has_cmd = false;
  while (!r.done() && r.tag(&field, &wt)) {
    bool ok = true;
    switch (field) {
      case 1:
        ok = read_int(r, wt, field, &cmd);
        has_cmd = true;
        break;
      case 2: {
        std::string_view s;
        ok = r.expect(wt, kLengthDelimited, field) && r.length_delimited(&s);
        if (ok) {
          NodeInfo n;
          if (!decode_node(s, &n, error)) return false;
          c->node.push_back(std::move(n));
        }
        break;
      }
      case 3:
        ok = read_int(r, wt, field, &c->barrier_group);
        break;
      case 4:
        ok = r.expect(wt, kVarint, field) && r.varint(&c->msg_sig);
        break;
      default:
        ok = r.skip(wt);
    }
    if (!ok) break;
  }
  if (!r.error().empty()) return *error = cat("PBControl: ", r.error()), false;
  if (!has_cmd) return *error = "PBControl: required field cmd (1) is missing", false;
  c->cmd = static_cast<Command>(cmd);
  return true;
}

bool decode_data_types(Reader& r, int wt, std::vector<DataType>* out, std::string* error) {
  if (wt == kVarint) {  // an unpacked element, which parsers must also accept
    uint64_t v = 0;
    if (!r.varint(&v)) return false;
    out->push_back(static_cast<DataType>(static_cast<int>(v)));
    return true;
  }
  std::string_view s;
  if (!r.expect(wt, kLengthDelimited, 9) || !r.length_delimited(&s)) return false;
  Reader packed(s);
  while (!packed.done()) {
    uint64_t v = 0;
    if (!packed.varint(&v)) return *error = cat("PBMeta.data_type: ", packed.error()), false;
    out->push_back(static_cast<DataType>(static_cast<int>(v)));
  }
  return true;
}

}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::kServer:
      return "server";
    case Role::kWorker:
      return "worker";
    case Role::kScheduler:
      return "scheduler";
  }
  return "unknown";
}

std::string encode_meta(const Meta& m) {
  Writer w;
  w.int32(1, m.head);
  if (!m.body.empty()) w.bytes(2, m.body);
  if (!m.control.empty()) w.bytes(3, encode_control(m.control));
  w.boolean(4, m.request);
  w.boolean(5, m.push);
  w.boolean(6, m.simple_app);
  if (m.app_id != kEmpty) w.int32(7, m.app_id);
  if (m.timestamp != kEmpty) w.int32(8, m.timestamp);
  if (!m.data_type.empty()) {
    Writer packed;
    for (auto d : m.data_type) packed.varint(static_cast<uint64_t>(static_cast<int64_t>(d)));
    w.bytes(9, packed.str());
  }
  w.int32(10, m.customer_id);
  w.int32(11, m.data_size);
  w.boolean(12, m.pull);
  w.int32(13, m.priority);
  return std::move(w.str());
}

std::optional<Meta> decode_meta(std::string_view bytes, std::string* error) {
  Meta m;
  m.head = 0;  // protobuf's default for an absent optional int32
  m.customer_id = 0;
  Reader r(bytes);
  int field = 0, wt = 0;
  std::string nested_error;
  while (!r.done() && r.tag(&field, &wt)) {
    bool ok = true;
    std::string_view s;
    switch (field) {
      case 1:
        ok = read_int(r, wt, field, &m.head);
        break;
      case 2:
        ok = r.expect(wt, kLengthDelimited, field) && r.length_delimited(&s);
        m.body = std::string(s);
        break;
      case 3:
        ok = r.expect(wt, kLengthDelimited, field) && r.length_delimited(&s);
        if (ok && !decode_control(s, &m.control, &nested_error)) {
          *error = cat("PBMeta.control: ", nested_error);
          return std::nullopt;
        }
        break;
      case 4:
        ok = read_bool(r, wt, field, &m.request);
        break;
      case 5:
        ok = read_bool(r, wt, field, &m.push);
        break;
      case 6:
        ok = read_bool(r, wt, field, &m.simple_app);
        break;
      case 7:
        ok = read_int(r, wt, field, &m.app_id);
        break;
      case 8:
        ok = read_int(r, wt, field, &m.timestamp);
        break;
      case 9:
        ok = decode_data_types(r, wt, &m.data_type, &nested_error);
        if (!ok && !nested_error.empty()) return *error = nested_error, std::nullopt;
        break;
      case 10:
        ok = read_int(r, wt, field, &m.customer_id);
        break;
      case 11:
        ok = read_int(r, wt, field, &m.data_size);
        break;
      case 12:
        ok = read_bool(r, wt, field, &m.pull);
        break;
      case 13:
        ok = read_int(r, wt, field, &m.priority);
        break;
      default:
        ok = r.skip(wt);
    }
    if (!ok) break;
  }
  if (!r.error().empty()) {
    *error = cat("PBMeta: ", r.error());
    return std::nullopt;
  }
  return m;
}

Frame::Frame(std::string bytes) {
  if (bytes.empty()) return;
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  data_ = owned->data();
  size_ = owned->size();
  owner_ = std::move(owned);
}

Frame::Frame(const char* data, size_t n) : Frame(std::string(data, n)) {}

Frame Frame::share(std::shared_ptr<const void> owner, const void* data, size_t n) {
  Frame f;
  if (n == 0) return f;
  f.owner_ = std::move(owner);
  f.data_ = static_cast<const char*>(data);
  f.size_ = n;
  return f;
}

std::string identity(int id) { return cat("ps", id); }

int parse_identity(std::string_view s) {
  if (s.size() < 3 || s.size() > 12 || s[0] != 'p' || s[1] != 's') return kEmpty;
  long long id = 0;
  for (size_t i = 2; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return kEmpty;
    id = id * 10 + (s[i] - '0');
  }
  return id > 0 && id < kEmpty ? static_cast<int>(id) : kEmpty;
}

}  // namespace dtrain::ps
