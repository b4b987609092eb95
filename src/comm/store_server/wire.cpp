#include "comm/store_server/wire.h"

#include <array>
#include <cstring>

#include "common/strings.h"

namespace dtrain::store_server {
namespace {

// Query codes by dialect, indexed by the wire byte (Note [Dialect detection]).
constexpr std::array<Op, 13> kLegacyOps = {
    Op::kSet,      Op::kCompareSet, Op::kGet,       Op::kAdd,       Op::kCheck,
    Op::kWait,     Op::kNumKeys,    Op::kWatchKey,  Op::kDeleteKey, Op::kAppend,
    Op::kMultiGet, Op::kMultiSet,   Op::kCancelWait};
constexpr std::array<Op, 18> kValidateOps = {
    Op::kValidate,   Op::kSet,     Op::kCompareSet, Op::kGet,      Op::kAdd,      Op::kCheck,
    Op::kWait,       Op::kNumKeys, Op::kDeleteKey,  Op::kAppend,   Op::kMultiGet, Op::kMultiSet,
    Op::kCancelWait, Op::kPing,    Op::kQueuePush,  Op::kQueuePop, Op::kQueueLen, Op::kListKeys};

// Note [Dialect detection]: the longest first key a legacy SET may have.
constexpr std::uint64_t kMaxLegacyFirstKey = 1024 * 1024;

// Reads fields from the front of a buffer. Every read returns false when the
// buffer ends first; a length beyond the limits sets `error` instead.
class Cursor {
 public:
  // A dry cursor walks the length fields without copying keys or values.
  Cursor(const std::uint8_t* data, std::size_t n, const WireLimits& limits, bool dry = false)
      : dry(dry), data_(data), n_(n), limits_(limits) {}

  template <typename T>
  bool value(T* v) {
    if (n_ - pos_ < sizeof(T)) return false;
    std::memcpy(v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  // The next length-prefixed field: its start in `*at` and length in `*len`.
  bool field(std::size_t max, const char* what, std::size_t* at, std::uint64_t* len) {
    if (!value(len)) return false;
    if (*len > max) {
      error = cat(what, " of ", *len, " bytes exceeds the limit of ", max);
      return false;
    }
    if (pos_ + *len > limits_.max_query_bytes) {
      error = cat("query larger than ", limits_.max_query_bytes, " bytes");
      return false;
    }
    if (n_ - pos_ < *len) return false;
    *at = pos_;
    pos_ += *len;
    return true;
  }
  bool key(std::string* s) {
    std::size_t at = 0;
    std::uint64_t len = 0;
    if (!field(limits_.max_key_bytes, "key", &at, &len)) return false;
    if (!dry) s->assign(reinterpret_cast<const char*>(data_ + at), len);
    return true;
  }
  bool bytes(Bytes* b) {
    std::size_t at = 0;
    std::uint64_t len = 0;
    if (!field(limits_.max_query_bytes, "value", &at, &len)) return false;
    if (!dry) b->assign(data_ + at, data_ + at + len);
    return true;
  }
  bool count(std::uint64_t* c) {
    if (!value(c)) return false;
    if (*c > limits_.max_keys) {
      error = cat("key count ", *c, " exceeds the limit of ", limits_.max_keys);
      return false;
    }
    return true;
  }
  std::size_t pos() const { return pos_; }
  std::string error;
  const bool dry;

 private:
  const std::uint8_t* data_;
  std::size_t n_;
  std::size_t pos_ = 0;
  const WireLimits& limits_;
};

// Reads the arguments of `q.op`; false when incomplete or malformed.
bool parse_args(Cursor& c, Query& q) {
  auto one_key = [&] {
    q.keys.resize(1);
    return c.key(&q.keys[0]);
  };
  auto key_list = [&](bool with_values) {
    std::uint64_t count = 0;
    if (!c.count(&count)) return false;
    std::string scratch_key;
    Bytes scratch_value;
    if (!c.dry) {
      q.keys.resize(count);
      if (with_values) q.values.resize(count);
    }
    for (std::uint64_t i = 0; i < count; ++i) {
      if (!c.key(c.dry ? &scratch_key : &q.keys[i])) return false;
      if (with_values && !c.bytes(c.dry ? &scratch_value : &q.values[i])) return false;
    }
    return true;
  };
  switch (q.op) {
    case Op::kValidate:
    case Op::kPing: {
      std::uint32_t v = 0;
      if (!c.value(&v)) return false;
      q.number = v;
      return true;
    }
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      q.values.resize(1);
      return one_key() && c.bytes(&q.values[0]);
    case Op::kCompareSet:
      q.values.resize(2);
      return one_key() && c.bytes(&q.values[0]) && c.bytes(&q.values[1]);
    case Op::kAdd:
      return one_key() && c.value(&q.number);
    case Op::kGet:
    case Op::kWatchKey:
    case Op::kDeleteKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
      return one_key();
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      return key_list(false);
    case Op::kMultiSet:
      return key_list(true);
    case Op::kNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
      return true;
  }
  return false;
}

}  // namespace

const char* dialect_name(Dialect d) {
  switch (d) {
    case Dialect::kUndecided:
      return "undecided";
    case Dialect::kLegacy:
      return "legacy (PyTorch 1.13 TCPStore)";
    case Dialect::kValidate:
      return "validate (PyTorch 2.x TCPStore)";
    case Dialect::kUnknown:
      return "unknown";
  }
  return "unknown";
}

const char* op_name(Op op) {
  static const char* const kNames[] = {"VALIDATE",  "SET",         "COMPARE_SET", "GET",
                                       "ADD",       "CHECK",       "WAIT",        "GETNUMKEYS",
                                       "WATCH_KEY", "DELETE_KEY",  "APPEND",      "MULTI_GET",
                                       "MULTI_SET", "CANCEL_WAIT", "PING",        "QUEUE_PUSH",
                                       "QUEUE_POP", "QUEUE_LEN",   "LIST_KEYS"};
  return kNames[static_cast<int>(op)];
}

Dialect detect_dialect(const std::uint8_t* data, std::size_t n) {
  if (n == 0) return Dialect::kUndecided;
  if (data[0] >= 1 && data[0] < kLegacyOps.size()) return Dialect::kLegacy;
  if (data[0] != 0) return Dialect::kUnknown;
  if (n < 5) return Dialect::kUndecided;
  std::uint32_t magic = 0;
  std::memcpy(&magic, data + 1, sizeof(magic));
  if (magic == kValidateMagic) return Dialect::kValidate;
  // A legacy SET: its key length follows. No client sends a key of a
  // megabyte; a length beyond that is another dialect's greeting.
  if (n < 9) return Dialect::kUndecided;
  std::uint64_t key_len = 0;
  std::memcpy(&key_len, data + 1, sizeof(key_len));
  return key_len <= kMaxLegacyFirstKey ? Dialect::kLegacy : Dialect::kUnknown;
}

ParseResult parse_query(Dialect d, const std::uint8_t* data, std::size_t n,
                        const WireLimits& limits, Query* out) {
  ParseResult r;
  if (n == 0) return r;
  const std::uint8_t code = data[0];
  Query q;
  if (d == Dialect::kLegacy && code < kLegacyOps.size()) {
    q.op = kLegacyOps[code];
  } else if (d == Dialect::kValidate && code < kValidateOps.size()) {
    q.op = kValidateOps[code];
  } else {
    r.status = ParseStatus::kMalformed;
    r.error =
        d == Dialect::kValidate
            ? cat("query code ", int{code}, " is none of the ", dialect_name(d),
                  " queries dtrain serves (0-17, up to 2.11's LIST_KEYS): a newer "
                  "PyTorch's query?")
            : cat("query code ", int{code}, " is none of the ", dialect_name(d), " queries (0-12)");
    return r;
  }
  // Note [Dry walk first]: a query arrives over many reads and is parsed
  // after each; walking its length fields without copying keeps a 128 MiB
  // MULTI_SET from being copied once per read (quadratic in its size).
  Cursor walk(data + 1, n - 1, limits, /*dry=*/true);
  Query scratch;
  scratch.op = q.op;
  const bool complete = parse_args(walk, scratch);
  Cursor c(data + 1, n - 1, limits);
  if (!complete || !parse_args(c, q)) {
    if (!walk.error.empty()) c.error = walk.error;
    if (!c.error.empty()) {
      r.status = ParseStatus::kMalformed;
      r.error = cat(op_name(q.op), ": ", c.error);
    } else if (n > limits.max_query_bytes) {
      r.status = ParseStatus::kMalformed;
      r.error = cat(op_name(q.op), ": query larger than ", limits.max_query_bytes, " bytes");
    }
    return r;
  }
  r.status = ParseStatus::kOk;
  r.consumed = 1 + c.pos();
  *out = std::move(q);
  return r;
}

Bytes encode_query(Dialect d, const Query& q) {
  Bytes out;
  std::uint8_t code = 0;
  bool found = false;
  if (d == Dialect::kLegacy) {
    for (std::size_t i = 0; i < kLegacyOps.size(); ++i) {
      if (kLegacyOps[i] == q.op) code = static_cast<std::uint8_t>(i), found = true;
    }
  } else {
    for (std::size_t i = 0; i < kValidateOps.size(); ++i) {
      if (kValidateOps[i] == q.op) code = static_cast<std::uint8_t>(i), found = true;
    }
  }
  if (!found) return out;
  put_u8(&out, code);
  auto key_list = [&](bool with_values) {
    put_i64(&out, static_cast<std::int64_t>(q.keys.size()));
    for (std::size_t i = 0; i < q.keys.size(); ++i) {
      put_string(&out, q.keys[i]);
      if (with_values) put_bytes(&out, q.values.at(i));
    }
  };
  switch (q.op) {
    case Op::kValidate:
    case Op::kPing:
      put_u32(&out, static_cast<std::uint32_t>(q.number));
      break;
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      put_string(&out, q.keys.at(0));
      put_bytes(&out, q.values.at(0));
      break;
    case Op::kCompareSet:
      put_string(&out, q.keys.at(0));
      put_bytes(&out, q.values.at(0));
      put_bytes(&out, q.values.at(1));
      break;
    case Op::kAdd:
      put_string(&out, q.keys.at(0));
      put_i64(&out, q.number);
      break;
    case Op::kGet:
    case Op::kWatchKey:
    case Op::kDeleteKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
      put_string(&out, q.keys.at(0));
      break;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      key_list(false);
      break;
    case Op::kMultiSet:
      key_list(true);
      break;
    case Op::kNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
      break;
  }
  return out;
}

void put_u8(Bytes* out, std::uint8_t v) { out->push_back(v); }

template <typename T>
static void put_raw(Bytes* out, T v) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
  out->insert(out->end(), p, p + sizeof(T));
}

void put_u32(Bytes* out, std::uint32_t v) { put_raw(out, v); }
void put_i64(Bytes* out, std::int64_t v) { put_raw(out, v); }
void put_bytes(Bytes* out, const std::uint8_t* data, std::size_t n) {
  put_raw<std::uint64_t>(out, n);
  out->insert(out->end(), data, data + n);
}

}  // namespace dtrain::store_server
