#pragma once
// The byte format of c10d's TCPStore queries in the two dialects that
// dtrain's store server speaks, decoded into one dialect-free Query. Torch-free.
//
// Both dialects frame values the same way: integers are little-endian in the
// host's layout (c10d copies them raw), a string or byte vector is a uint64
// length followed by the bytes, a key list is a uint64 count followed by that
// many strings. They differ in the first byte of each query (the query code)
// and in how a connection opens:
//
//   legacy (PyTorch 1.13's TCPStore, which 2.0/2.1 extended): no greeting;
//     codes SET 0, COMPARE_SET 1, GET 2, ADD 3, CHECK 4, WAIT 5, GETNUMKEYS 6,
//     WATCH_KEY 7, DELETE_KEY 8, then (not in 1.13) APPEND 9, MULTI_GET 10,
//     MULTI_SET 11, CANCEL_WAIT 12.
//   validate (PyTorch 2.x's TCPStore, byte-checked against 2.11): the first
//     query is VALIDATE (code 0) + uint32 0x3C85F7CE; then SET 1,
//     COMPARE_SET 2, GET 3, ADD 4, CHECK 5, WAIT 6, GETNUMKEYS 7,
//     DELETE_KEY 8, APPEND 9, MULTI_GET 10, MULTI_SET 11, CANCEL_WAIT 12,
//     PING 13 (+ uint32 nonce, echoed), QUEUE_PUSH 14, QUEUE_POP 15,
//     QUEUE_LEN 16, LIST_KEYS 17.
//
// Note [Dialect detection]
// A connection's dialect is decided by its first bytes. A validate-dialect
// client always opens with 0x00 followed by the magic number's bytes
// CE F7 85 3C; a legacy client opens with any legacy code, and when that code
// is SET (0x00) the next 8 bytes are its key's length, which would read as at
// least 0x3C85F7CE (about 1 GB, beyond any key limit) if they started with the
// magic number's bytes. So: first byte 1..12 -> legacy; first byte 0 and the
// next four bytes the magic -> validate; first byte 0 and a key length up to
// 1 MiB -> legacy; anything else (another release's greeting, a per-query magic number, a
// stray HTTP request) -> unknown, which the server reports in one line and
// closes.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::store_server {

using Bytes = std::vector<std::uint8_t>;

enum class Dialect {
  kUndecided,  ///< fewer bytes than the decision needs
  kLegacy,     ///< PyTorch 1.13's TCPStore (also 2.0/2.1's extensions)
  kValidate,   ///< PyTorch 2.x's TCPStore (VALIDATE + magic number, PING)
  kUnknown,    ///< neither: reported and closed
};

/// "legacy (PyTorch 1.13)", "validate (PyTorch 2.x)", ...: for log lines.
const char* dialect_name(Dialect d);

/// The validate dialect's magic number (c10d::detail::validationMagicNumber).
constexpr std::uint32_t kValidateMagic = 0x3C85F7CE;

/// Decides a connection's dialect from its first `n` bytes (Note [Dialect
/// detection]); kUndecided while more bytes are needed.
Dialect detect_dialect(const std::uint8_t* data, std::size_t n);

/// A query with the dialect taken out.
enum class Op {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kNumKeys,
  kWatchKey,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kQueuePush,
  kQueuePop,
  kQueueLen,
  kListKeys,
};

/// The query's name as c10d spells it (SET, COMPARE_SET, ...).
const char* op_name(Op op);

struct Query {
  Op op = Op::kSet;
  /// SET/GET/ADD/...: one key; CHECK/WAIT/MULTI_GET/MULTI_SET: several.
  std::vector<std::string> keys;
  /// SET/APPEND/QUEUE_PUSH: one value; COMPARE_SET: expected, desired;
  /// MULTI_SET: one per key.
  std::vector<Bytes> values;
  /// ADD: the increment; VALIDATE/PING: the magic number / nonce.
  std::int64_t number = 0;
};

/// Limits that keep one connection's memory bounded.
struct WireLimits {
  /// Longest key accepted (c10d's libuv server allows 8 KiB).
  std::size_t max_key_bytes = 64 * 1024;
  /// Most keys in one CHECK/WAIT/MULTI_* query (c10d's libuv server: 128 Ki).
  std::size_t max_keys = 128 * 1024;
  /// Largest query (and so the most input buffered per connection).
  std::size_t max_query_bytes = 128u * 1024 * 1024;
};

enum class ParseStatus { kNeedMore, kOk, kMalformed };

struct ParseResult {
  ParseStatus status = ParseStatus::kNeedMore;
  std::size_t consumed = 0;  ///< bytes of the query when kOk
  std::string error;         ///< why, when kMalformed
};

/// Parses one query of dialect `d` (kLegacy or kValidate) from the front of
/// data[0, n). kNeedMore: the query is not complete yet (nothing consumed);
/// kMalformed: an unknown code or a length beyond `limits`.
ParseResult parse_query(Dialect d, const std::uint8_t* data, std::size_t n,
                        const WireLimits& limits, Query* out);

/// Encodes `q` as a client of dialect `d` sends it (tests and the probe).
Bytes encode_query(Dialect d, const Query& q);

/// Response encoders shared by both dialects (appending to `out`).
void put_u8(Bytes* out, std::uint8_t v);
void put_u32(Bytes* out, std::uint32_t v);
void put_i64(Bytes* out, std::int64_t v);
void put_bytes(Bytes* out, const std::uint8_t* data, std::size_t n);
inline void put_bytes(Bytes* out, const Bytes& v) { put_bytes(out, v.data(), v.size()); }
inline void put_string(Bytes* out, const std::string& s) {
  put_bytes(out, reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
}

/// c10d's response codes (the same numbers in both dialects).
constexpr std::uint8_t kCheckReady = 0, kCheckNotReady = 1;
constexpr std::uint8_t kStopWaiting = 0, kWaitCanceled = 1;
/// Legacy WATCH_KEY notifications (KEY_CALLBACK_REGISTERED acknowledges).
constexpr std::uint8_t kKeyUpdated = 0, kKeyCreated = 1, kKeyDeleted = 2,
                       kKeyCallbackRegistered = 3, kKeyAppended = 4;

}  // namespace dtrain::store_server
