// Fuzz target: the rendezvous values kept in the store (src/launch/rendezvous/
// state.h): the round state, node records, participant tables, slot lists.
// Another program (or a corrupted store) may have written any bytes there.
//
// Input: byte 0 picks the decoder, the rest is the value. Every rejection
// must be a StoreError; an accepted value must keep its numbers (no silent
// narrowing) and re-encode to a value that decodes the same.
#include <cstdint>
#include <string>
#include <vector>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "fuzz/fuzz_util.h"
#include "launch/rendezvous/state.h"

using namespace dtrain::detail;
using dtrain::fuzz::fail;

namespace {

long long number(const std::string& text) {
  long long v = 0;
  if (!dtrain::parse_int(text, &v)) fail("a decoder accepted the non-number '" + text + "'");
  return v;
}

void check_record(const NodeRecord& r, const std::string& text) {
  std::vector<std::string> f = dtrain::split(text, '\t');
  if (r.local_world_size != number(f[2]) || r.fixed_rank != number(f[3])) {
    fail("node record '" + text + "' decoded to other numbers");
  }
  NodeRecord again = NodeRecord::decode(r.encode(), "fuzz");
  if (again.encode() != r.encode()) fail("node record does not survive encode/decode");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int which = data[0] % 4;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (which) {
      case 0: {
        RoundState s = RoundState::decode(text, "fuzz");
        std::vector<std::string> f = dtrain::split(text, ' ');
        if (s.round != number(f[0])) fail("state '" + text + "' decoded to another round");
        if (s.status == RoundState::Status::kComplete &&
            (s.participants != number(f[2]) || s.table_slot != number(f[3]))) {
          fail("state '" + text + "' decoded to other numbers");
        }
        RoundState again = RoundState::decode(s.encode(), "fuzz");
        if (again.encode() != s.encode()) fail("state does not survive encode/decode");
        break;
      }
      case 1:
        check_record(NodeRecord::decode(text, "fuzz"), text);
        break;
      case 2: {
        std::vector<NodeRecord> table = decode_table(text, "fuzz");
        std::vector<NodeRecord> again = decode_table(encode_table(table), "fuzz");
        if (encode_table(again) != encode_table(table))
          fail("table does not survive encode/decode");
        break;
      }
      case 3: {
        std::vector<int64_t> slots = decode_slots(text, "fuzz");
        if (decode_slots(encode_slots(slots), "fuzz") != slots) fail("slots change through encode");
        break;
      }
    }
  } catch (const dtrain::StoreError& e) {
    if (std::string(e.what()).find("fuzz") == std::string::npos) fail("error does not name where");
  }
  return 0;
}
