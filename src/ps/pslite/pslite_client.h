#pragma once
// ps-lite's KVWorker request layout, as pure functions (no sockets) so tests
// check them against ps-lite's published layout directly.
//
// Note [ps-lite's key ranges]
// ps-lite routes a request by key, not by hashing: Postoffice splits the
// uint64 key space evenly, server r of S holding [kMaxKey/S·r,
// kMaxKey/S·(r+1)) with kMaxKey = 2^64−1, and KVWorker's DefaultSlicer cuts
// the caller's sorted keys at those bounds (std::lower_bound), sending each
// server the run of keys in its range with the matching values (k values
// per key when there are no lengths, else lens[i] for key i) and skipping
// servers with none. Keys at or past kMaxKey/S·S (the integer division's
// remainder) lie in no range: ps-lite's CHECK aborts there; here they are
// InvalidArgument. MXNet's client (worker.cpp, Note [Key placement]) picks
// the server itself and offsets its key into that server's range, so both
// agree on which server owns a ps-lite key.
//
// Note [ps-lite's request layout]
// KVWorker::Send writes, per non-empty slice: meta {app_id 0, customer_id,
// request, push, pull, head = cmd, timestamp, priority} and, when the slice
// has keys, frames keys (UINT64), vals (FLOAT for KVWorker<float>; an empty
// frame for a pull) and lens (INT32) only when the caller gave lengths.
// Every slice of one call carries the same timestamp; the servers answer
// with the same head and timestamp, and a pull's answer carries keys, vals
// and optionally lens, which AddPullCB checks against the request and
// concatenates in key order (the ranges are ordered by server rank, so in
// rank order).

#include <cstdint>
#include <string>
#include <vector>

#include "ps/wire/protocol.h"

namespace dtrain::ps {

struct KeyRange {
  uint64_t begin = 0;
  uint64_t end = 0;  // exclusive
};

/// Postoffice::GetServerKeyRanges for `num_servers` (>= 1) servers.
std::vector<KeyRange> server_key_ranges(int num_servers);

/// One server's part of a request: keys [key_begin, key_end) and values
/// [val_begin, val_end) of the caller's arrays.
struct PsLiteSlice {
  int server_rank = 0;
  size_t key_begin = 0, key_end = 0;
  size_t val_begin = 0, val_end = 0;
};

/// DefaultSlicer: the non-empty slices, in server order. `num_vals` values
/// (0 for a pull); `lens` empty or one length per key. Throws
/// InvalidArgument naming the rule a request breaks (unsorted keys, a key
/// in no range, values not a whole number per key, bad lengths), `op`
/// ("push", ...) first.
std::vector<PsLiteSlice> slice_by_key_ranges(const std::vector<uint64_t>& keys, size_t num_vals,
                                             const std::vector<int>& lens, int num_servers,
                                             const char* op);

/// What a request carries besides its arrays.
struct PsLiteCall {
  bool push = false;
  bool pull = false;
  int cmd = 0;
  int timestamp = 0;
  int customer_id = 0;
};

/// The message KVWorker::Send writes for `slice` (Note [ps-lite's request
/// layout]); `vals` empty for a pull, `lens` empty when not sent.
Message pslite_request(const PsLiteCall& call, const PsLiteSlice& slice,
                       const std::vector<uint64_t>& keys, const std::vector<float>& vals,
                       const std::vector<int>& lens);

/// AddPullCB: checks each slice's answer (`answers[i]` answers
/// `slices[i]`) and concatenates the values (and lengths when `lens` is not
/// null) into `vals` / `lens`, resizing an empty output, else requiring its
/// size. Returns "" or why the answers do not fit; writes nothing then.
std::string assemble_pull(const std::vector<uint64_t>& keys, const std::vector<PsLiteSlice>& slices,
                          const std::vector<Message>& answers, std::vector<float>* vals,
                          std::vector<int>* lens);

}  // namespace dtrain::ps
