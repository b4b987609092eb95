// ps-lite's slicer and message layout (Note [ps-lite's key ranges], Note
// [ps-lite's request layout] in pslite_client.h).
#include "ps/pslite/pslite_client.h"

#include <algorithm>
#include <cstring>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "ps/server/server.h"  // kMaxKey

namespace dtrain::ps {
namespace {

// Appends elements [begin, end) of `v` as a frame of `type`; an empty range
// is an empty frame, as ps-lite sends for a pull's values.
template <typename T>
void add_range(Message& msg, const std::vector<T>& v, size_t begin, size_t end, DataType type) {
  static const T kNothing{};
  msg.add_data(end > begin ? v.data() + begin : &kNothing, end - begin, type);
}

const char* type_name(DataType t) {
  static const char* const kNames[] = {"CHAR",   "INT8",   "INT16",  "INT32", "INT64",  "UINT8",
                                       "UINT16", "UINT32", "UINT64", "FLOAT", "DOUBLE", "OTHER"};
  const int i = static_cast<int>(t);
  return i >= 0 && i < 12 ? kNames[i] : "an unknown type";
}

// Why answer frame `i` of server `rank` is not of `want`; "" when it is (or
// the sender listed no types, which ps-lite never does but costs nothing).
std::string frame_type_error(const Message& a, size_t i, DataType want, int rank) {
  if (a.meta.data_type.size() != a.data.size() || a.meta.data_type[i] == want) return "";
  return cat("server ", rank, " answered frame ", i, " as ", type_name(a.meta.data_type[i]),
             ", expected ", type_name(want),
             want == DataType::kFloat ? " (a ps-lite KVServer<float> answers FLOAT values)" : "");
}

}  // namespace

std::vector<KeyRange> server_key_ranges(int num_servers) {
  std::vector<KeyRange> ranges;
  const uint64_t span = kMaxKey / static_cast<uint64_t>(std::max(num_servers, 1));
  for (int i = 0; i < num_servers; ++i) {
    ranges.push_back(
        KeyRange{span * static_cast<uint64_t>(i), span * static_cast<uint64_t>(i + 1)});
  }
  return ranges;
}

std::vector<PsLiteSlice> slice_by_key_ranges(const std::vector<uint64_t>& keys, size_t num_vals,
                                             const std::vector<int>& lens, int num_servers,
                                             const char* op) {
  if (num_servers < 1) {
    throw InvalidArgument(cat(op, ": a ps-lite job needs at least one server (DMLC_NUM_SERVER)"));
  }
  if (keys.empty()) {
    if (num_vals > 0 || !lens.empty()) {
      throw InvalidArgument(cat(op, " of no keys with ", num_vals, " values and ", lens.size(),
                                " lengths: pass one key per value group"));
    }
    return {};
  }
  for (size_t i = 1; i < keys.size(); ++i) {
    if (keys[i] < keys[i - 1]) {
      throw InvalidArgument(cat(op,
                                ": keys must be in ascending order (ps-lite's slicer cuts "
                                "them at the servers' key ranges); key ",
                                i, " (", keys[i], ") is below key ", i - 1, " (", keys[i - 1],
                                "); sort the keys with their values"));
    }
  }
  const std::vector<KeyRange> ranges = server_key_ranges(num_servers);
  if (keys.back() >= ranges.back().end) {
    throw InvalidArgument(cat(op, ": key ", keys.back(), " lies in no server's key range (",
                              num_servers, " servers hold keys below ", ranges.back().end,
                              " = kMaxKey/S·S); use smaller keys"));
  }
  // The values of each key: k per key, or lens[i].
  size_t k = 0;
  std::vector<size_t> offsets;  // with lens: value offset of each key, and the end
  if (lens.empty()) {
    if (num_vals % keys.size() != 0) {
      throw InvalidArgument(cat(op, " of ", keys.size(), " keys with ", num_vals,
                                " values: without lengths every key has the same number of "
                                "values; pass lens"));
    }
    k = num_vals / keys.size();
  } else {
    if (lens.size() != keys.size()) {
      throw InvalidArgument(
          cat(op, " of ", keys.size(), " keys with ", lens.size(), " lengths: give one per key"));
    }
    offsets.push_back(0);
    for (size_t i = 0; i < lens.size(); ++i) {
      if (lens[i] < 0)
        throw InvalidArgument(cat(op, ": length ", i, " is negative (", lens[i], ")"));
      offsets.push_back(offsets.back() + static_cast<size_t>(lens[i]));
    }
    if (offsets.back() != num_vals) {
      throw InvalidArgument(cat(op, ": the lengths add up to ", offsets.back(), " values but ",
                                num_vals, " were given"));
    }
  }
  std::vector<PsLiteSlice> slices;
  size_t pos = static_cast<size_t>(std::lower_bound(keys.begin(), keys.end(), ranges[0].begin) -
                                   keys.begin());
  for (int r = 0; r < num_servers; ++r) {
    const size_t end =
        static_cast<size_t>(std::lower_bound(keys.begin() + static_cast<std::ptrdiff_t>(pos),
                                             keys.end(), ranges[r].end) -
                            keys.begin());
    if (end > pos) {
      PsLiteSlice s{r, pos, end, 0, 0};
      s.val_begin = lens.empty() ? pos * k : offsets[pos];
      s.val_end = lens.empty() ? end * k : offsets[end];
      slices.push_back(s);
    }
    pos = end;
  }
  return slices;
}

Message pslite_request(const PsLiteCall& call, const PsLiteSlice& slice,
                       const std::vector<uint64_t>& keys, const std::vector<float>& vals,
                       const std::vector<int>& lens) {
  Message msg;
  msg.meta.app_id = 0;
  msg.meta.customer_id = call.customer_id;
  msg.meta.request = true;
  msg.meta.push = call.push;
  msg.meta.pull = call.pull;
  msg.meta.head = call.cmd;
  msg.meta.timestamp = call.timestamp;
  msg.meta.priority = 0;
  add_range(msg, keys, slice.key_begin, slice.key_end, DataType::kUint64);
  add_range(msg, vals, vals.empty() ? 0 : slice.val_begin, vals.empty() ? 0 : slice.val_end,
            DataType::kFloat);
  static_assert(sizeof(int) == 4, "ps-lite's lens are INT32");
  if (!lens.empty()) add_range(msg, lens, slice.key_begin, slice.key_end, DataType::kInt32);
  return msg;
}

std::string assemble_pull(const std::vector<uint64_t>& keys, const std::vector<PsLiteSlice>& slices,
                          const std::vector<Message>& answers, std::vector<float>* vals,
                          std::vector<int>* lens) {
  size_t total_vals = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const PsLiteSlice& s = slices[i];
    const Message& a = answers.at(i);
    const int rank = s.server_rank;
    const size_t n = s.key_end - s.key_begin;
    if (a.data.size() < 2 || a.data.size() > 3) {
      return cat("server ", rank, " answered the pull with ", a.data.size(),
                 " frames; expected keys, values and optional lengths");
    }
    for (auto [frame, type] : {std::pair<size_t, DataType>{0, DataType::kUint64},
                               {1, DataType::kFloat},
                               {2, DataType::kInt32}}) {
      if (frame >= a.data.size()) break;
      const std::string why = frame_type_error(a, frame, type, rank);
      if (!why.empty()) return why;
    }
    if (a.data[0].size() != n * sizeof(uint64_t) ||
        std::memcmp(a.data[0].data(), keys.data() + s.key_begin, n * sizeof(uint64_t)) != 0) {
      return cat("server ", rank, " answered ", a.data[0].size() / sizeof(uint64_t),
                 " keys that are not the ", n, " keys the pull asked it for");
    }
    if (a.data[1].size() % sizeof(float) != 0) {
      return cat("server ", rank, " answered ", a.data[1].size(),
                 " bytes of values, not a whole number of floats");
    }
    if (lens && (a.data.size() < 3 || a.data[2].size() != n * sizeof(int))) {
      return cat("server ", rank, " answered no length for each of its ", n,
                 " keys, but the pull asked for lengths");
    }
    total_vals += a.data[1].size() / sizeof(float);
  }
  if (!vals->empty() && vals->size() != total_vals) {
    return cat("the pull's output holds ", vals->size(), " values but the servers answered ",
               total_vals, "; pass an empty vector or one of that size");
  }
  if (lens && !lens->empty() && lens->size() != keys.size()) {
    return cat("the pull's lengths output holds ", lens->size(), " entries for ", keys.size(),
               " keys; pass an empty vector or one of that size");
  }
  vals->resize(total_vals);
  if (lens) lens->resize(keys.size());
  size_t at = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const Message& a = answers[i];
    if (!a.data[1].empty()) std::memcpy(vals->data() + at, a.data[1].data(), a.data[1].size());
    at += a.data[1].size() / sizeof(float);
    if (lens && !a.data[2].empty()) {
      std::memcpy(lens->data() + slices[i].key_begin, a.data[2].data(), a.data[2].size());
    }
  }
  return "";
}

}  // namespace dtrain::ps
