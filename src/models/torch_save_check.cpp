// The torch.save check (torch_save_check.h).
//
// Note [What the torch.save check covers]
// A torch.save file is a zip (stored entries, written by miniz through
// PyTorchStreamWriter, Zip64 once it passes 4 GiB) whose entries all sit in
// one top folder: data.pkl (a pickle, protocol 2), version, and data/<key>
// holding the raw bytes of each storage. The check:
//  - zip: finds the end-of-central-directory record (and its Zip64 form),
//    walks the central directory, and checks for every entry that its local
//    header, name and data lie inside the file and before the directory, that
//    it is stored (not compressed, not encrypted), that its CRC-32 matches and
//    that names are unique and under one top folder holding data.pkl and a
//    numeric version;
//  - pickle: decodes every opcode of data.pkl with its argument in bounds,
//    accepts only the opcodes LibTorch's unpickler implements, and simulates
//    the stack (marks included) and the memo, so no opcode pops an empty
//    stack, closes a missing mark, fetches an unset memo slot or sets one
//    out of order;
//  - tensors: a persistent id ('storage', <type>, key, location, numel) must
//    name an entry data/<key> of at least numel elements of <type>, and a
//    torch._utils._rebuild_tensor_v2 call on such a storage must address only
//    elements inside it (offset + sum((size - 1) * stride) < numel).
// Anything else (which globals the pickle calls, what the dict holds) is left
// to LibTorch and to the callers, which throw on it without crashing.

#include "models/torch_save_check.h"

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/printable.h"
#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::detail {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50;
constexpr uint32_t kEnd64LocatorSig = 0x07064b50;
// Bounds that no torch.save file comes near; they keep a hostile file from
// making the check itself slow or large.
constexpr uint64_t kMaxEntries = 1 << 20;
constexpr size_t kMaxStack = 1 << 20;
constexpr size_t kMaxMemo = 1 << 20;

// The first problem found, "<what> at byte <offset>"; caught in torch_save_problem.
struct Problem {
  std::string text;
};

class Failure {
 public:
  [[noreturn]] void at(uint64_t offset, const std::string& what) const {
    throw Problem{cat(what, " at byte ", offset)};
  }
};

// Little-endian reads; callers check the bounds first.
uint64_t le(const char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

struct Entry {
  uint64_t data = 0;  // offset of the entry's bytes in the file
  uint64_t size = 0;
};

// ---- zip -------------------------------------------------------------------------

std::map<std::string, Entry> read_zip(const char* d, uint64_t n, const Failure& fail,
                                      std::string* folder) {
  if (n < 4 || le(d, 4) != kLocalSig) fail.at(0, "no zip local header (PK\\3\\4)");
  if (n < 22) fail.at(n, "the file ends before a zip directory");
  // The end record is the last 22 bytes plus a comment of up to 64 KiB.
  uint64_t end = n;
  for (uint64_t at = n - 22;; --at) {
    if (le(d + at, 4) == kEndSig && at + 22 + le(d + at + 20, 2) == n) {
      end = at;
      break;
    }
    if (at == 0 || n - at > 22 + 0xffff) break;
  }
  if (end == n) fail.at(n, "no zip end-of-directory record");
  uint64_t entries = le(d + end + 10, 2);
  uint64_t dir_size = le(d + end + 12, 4);
  uint64_t dir_at = le(d + end + 16, 4);
  // Note [Zip64 records win]: LibTorch's reader (miniz) reads the Zip64 end
  // record whenever a locator precedes the end record, and then uses its
  // directory size and offset whatever the classic record says (torch.save
  // always writes both). So the check does the same; a fuzzed Zip64 offset
  // near 2^64 behind a sane classic record made miniz's own bounds check
  // wrap and read before the buffer (fuzz/corpus/torch_save/
  // regression-zip64-offset-wraps).
  const bool has_locator = end >= 20 && le(d + end - 20, 4) == kEnd64LocatorSig;
  if (has_locator || entries == 0xffff || dir_size == 0xffffffff || dir_at == 0xffffffff) {
    if (!has_locator) fail.at(end, "a Zip64 directory without its locator");
    const uint64_t end64 = le(d + end - 20 + 8, 8);
    if (end64 > end - 20 || end - 20 - end64 < 56 || le(d + end64, 4) != kEnd64Sig) {
      fail.at(end - 20, "a Zip64 locator pointing at no Zip64 end record");
    }
    entries = le(d + end64 + 32, 8);
    dir_size = le(d + end64 + 40, 8);
    dir_at = le(d + end64 + 48, 8);
    if (le(d + end64 + 24, 8) != entries) {
      fail.at(end64 + 24, "a Zip64 end record whose entry counts disagree");
    }
    end = end64;
  }
  if (dir_at > end || dir_size > end - dir_at) fail.at(end, "a zip directory outside the file");
  if (entries == 0 || entries > kMaxEntries) fail.at(end, cat("a zip of ", entries, " entries"));

  std::map<std::string, Entry> out;
  std::string top;
  uint64_t at = dir_at;
  const uint64_t dir_end = dir_at + dir_size;
  for (uint64_t i = 0; i < entries; ++i) {
    if (dir_end - at < 46 || le(d + at, 4) != kCentralSig) fail.at(at, "a broken zip directory");
    const uint64_t flags = le(d + at + 8, 2), method = le(d + at + 10, 2);
    const uint32_t crc = static_cast<uint32_t>(le(d + at + 16, 4));
    uint64_t csize = le(d + at + 20, 4), usize = le(d + at + 24, 4);
    const uint64_t name_len = le(d + at + 28, 2), extra_len = le(d + at + 30, 2),
                   comment_len = le(d + at + 32, 2);
    uint64_t local = le(d + at + 42, 4);
    if (dir_end - at - 46 < name_len + extra_len + comment_len) {
      fail.at(at, "a zip directory entry longer than the directory");
    }
    const std::string name(d + at + 46, name_len);
    const std::string shown = printable(name);
    // Zip64 extra field: the 64-bit values of the fields saturated above.
    for (uint64_t x = at + 46 + name_len; x + 4 <= at + 46 + name_len + extra_len;) {
      const uint64_t id = le(d + x, 2), len = le(d + x + 2, 2);
      if (x + 4 + len > at + 46 + name_len + extra_len) fail.at(x, "a zip extra field too long");
      if (id == 1) {
        uint64_t y = x + 4;
        for (uint64_t* field : {&usize, &csize, &local}) {
          if (*field != 0xffffffff) continue;
          if (y + 8 > x + 4 + len) fail.at(x, "a short Zip64 extra field");
          *field = le(d + y, 8);
          y += 8;
        }
      }
      x += 4 + len;
    }
    if (flags & 1) fail.at(at, cat("entry '", shown, "' is encrypted"));
    if (method != 0) {
      fail.at(at, cat("entry '", shown, "' is compressed (method ", method,
                      "); torch.save stores entries uncompressed"));
    }
    if (csize != usize) fail.at(at, cat("entry '", shown, "' has two different sizes"));
    if (local > dir_at || dir_at - local < 30 || le(d + local, 4) != kLocalSig) {
      fail.at(at, cat("entry '", shown, "' points at byte ", local, ", where no local header is"));
    }
    const uint64_t data = local + 30 + le(d + local + 26, 2) + le(d + local + 28, 2);
    if (data > dir_at || csize > dir_at - data) {
      fail.at(local, cat("entry '", shown, "' (", csize, " bytes) runs past the zip directory"));
    }
    if (static_cast<uint32_t>(crc32_z(0L, reinterpret_cast<const Bytef*>(d + data), csize)) !=
        crc) {
      fail.at(data, cat("entry '", shown, "' fails its CRC-32"));
    }
    const size_t slash = name.find('/');
    if (slash == std::string::npos || slash == 0) {
      fail.at(at, cat("entry '", shown, "' is not inside the archive's folder"));
    }
    if (top.empty()) top = name.substr(0, slash + 1);
    // PyTorch 2.x adds .data/serialization_id beside the archive's folder.
    if (name.compare(0, top.size(), top) != 0 && name.rfind(".data/", 0) != 0) {
      fail.at(at,
              cat("entry '", shown, "' is outside the archive's folder '", printable(top), "'"));
    }
    if (!out.emplace(name, Entry{data, csize}).second) {
      fail.at(at, cat("entry '", shown, "' appears twice"));
    }
    at += 46 + name_len + extra_len + comment_len;
  }
  if (out.find(top + "data.pkl") == out.end())
    fail.at(dir_at, cat("no '", printable(top), "data.pkl'"));
  // LibTorch parses the format version before anything else.
  auto version = out.find(top + "version");
  if (version == out.end()) fail.at(dir_at, cat("no '", printable(top), "version'"));
  std::string_view digits(d + version->second.data, version->second.size);
  while (!digits.empty() && (digits.back() == '\n' || digits.back() == '\r')) {
    digits.remove_suffix(1);
  }
  if (digits.empty() || digits.size() > 18 ||
      digits.find_first_not_of("0123456789") != std::string_view::npos) {
    fail.at(version->second.data,
            cat("the format version '", printable(digits), "' is not a number"));
  }
  *folder = top;
  return out;
}

// ---- pickle ------------------------------------------------------------------------

// What the simulation knows about a stack item: enough to follow a storage's
// persistent id and a tensor's rebuild call; everything else is kOther.
struct Item {
  enum Kind { kMark, kInt, kStr, kGlobal, kTuple, kStorage, kOther } kind = kOther;
  int64_t number = 0;  // kInt: the value; kStorage: elements
  // kStr, kGlobal ("module.name"); shared, so memo and stack copies are cheap.
  std::shared_ptr<const std::string> text;
  const std::string& str() const {
    static const std::string none;
    return text ? *text : none;
  }
  std::shared_ptr<const std::vector<Item>> items;  // kTuple
};

int64_t element_size(const std::string& storage_type) {
  static const std::unordered_map<std::string, int64_t> sizes = {{"torch.DoubleStorage", 8},
                                                                 {"torch.FloatStorage", 4},
                                                                 {"torch.HalfStorage", 2},
                                                                 {"torch.LongStorage", 8},
                                                                 {"torch.IntStorage", 4},
                                                                 {"torch.ShortStorage", 2},
                                                                 {"torch.CharStorage", 1},
                                                                 {"torch.ByteStorage", 1},
                                                                 {"torch.BoolStorage", 1},
                                                                 {"torch.BFloat16Storage", 2},
                                                                 {"torch.ComplexDoubleStorage", 16},
                                                                 {"torch.ComplexFloatStorage", 8},
                                                                 {"torch.QInt8Storage", 1},
                                                                 {"torch.QUInt8Storage", 1},
                                                                 {"torch.QInt32Storage", 4},
                                                                 {"torch.UntypedStorage", 1}};
  auto it = sizes.find(storage_type);
  return it == sizes.end() ? 0 : it->second;
}

class PickleCheck {
 public:
  PickleCheck(const char* d, uint64_t begin, uint64_t size, const std::string& folder,
              const std::map<std::string, Entry>& entries, const Failure& fail)
      : d_(d), begin_(begin), end_(begin + size), folder_(folder), entries_(entries), fail_(fail) {}

  void run() {
    at_ = begin_;
    for (;;) {
      if (at_ >= end_) fail_.at(at_, "data.pkl ends without STOP");
      op_at_ = at_;
      const uint8_t op = static_cast<uint8_t>(d_[at_++]);
      if (op == '.') {  // STOP
        if (stack_.empty()) fail_.at(op_at_, "the pickle stops with nothing on its stack");
        return;
      }
      step(op);
      if (stack_.size() > kMaxStack) fail_.at(op_at_, "the pickle's stack grows past 2^20 items");
    }
  }

 private:
  const char* need(uint64_t n) {
    if (end_ - at_ < n) fail_.at(at_, "data.pkl is truncated inside an opcode's argument");
    const char* p = d_ + at_;
    at_ += n;
    return p;
  }
  uint64_t arg(int n) { return le(need(n), n); }
  std::string line() {
    const char* p = d_ + at_;
    const void* nl = std::memchr(p, '\n', std::min<uint64_t>(end_ - at_, 4096));
    if (nl == nullptr) fail_.at(at_, "a GLOBAL name without its newline");
    const size_t n = static_cast<const char*>(nl) - p;
    at_ += n + 1;
    return std::string(p, n);
  }
  Item pop() {
    if (stack_.empty() || stack_.back().kind == Item::kMark) {
      fail_.at(op_at_, cat("opcode 0x", hex(), " pops an empty stack"));
    }
    Item v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Item& top() {
    if (stack_.empty() || stack_.back().kind == Item::kMark) {
      fail_.at(op_at_, cat("opcode 0x", hex(), " needs an item on the stack"));
    }
    return stack_.back();
  }
  // The items above the topmost mark, the mark removed.
  std::vector<Item> pop_mark() {
    size_t m = stack_.size();
    while (m > 0 && stack_[m - 1].kind != Item::kMark) --m;
    if (m == 0) fail_.at(op_at_, cat("opcode 0x", hex(), " without a MARK"));
    std::vector<Item> items(std::make_move_iterator(stack_.begin() + static_cast<long>(m)),
                            std::make_move_iterator(stack_.end()));
    stack_.resize(m - 1);
    return items;
  }
  std::string hex() const {
    static const char* digits = "0123456789abcdef";
    const uint8_t op = static_cast<uint8_t>(d_[op_at_]);
    return {digits[op >> 4], digits[op & 15]};
  }
  static Item tuple(std::vector<Item> items) {
    Item t;
    t.kind = Item::kTuple;
    t.items = std::make_shared<const std::vector<Item>>(std::move(items));
    return t;
  }
  static Item other() { return Item{}; }
  static Item mark() {
    Item m;
    m.kind = Item::kMark;
    return m;
  }
  static Item integer(int64_t v) {
    Item i;
    i.kind = Item::kInt;
    i.number = v;
    return i;
  }
  static Item str(const char* p, uint64_t n) {
    Item i;
    i.kind = Item::kStr;
    i.text = std::make_shared<const std::string>(p, n);
    return i;
  }
  void put(uint64_t index) {
    // Picklers number memo slots 0, 1, 2, ...; LibTorch's unpickler keeps them
    // in a vector sized by the largest slot, so a slot far ahead would make it
    // allocate gigabytes (found by fuzz/torch_save_load.cpp).
    if (index > memo_.size() || index >= kMaxMemo) {
      fail_.at(op_at_, cat("memo slot ", index, " is set before slot ", memo_.size()));
    }
    memo_[index] = top();
  }
  void get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail_.at(op_at_, cat("memo slot ", index, " is read before it is set"));
    stack_.push_back(it->second);
  }

  void step(uint8_t op) {
    switch (op) {
      case 0x80: {  // PROTO
        const uint64_t v = arg(1);
        if (v < 2 || v > 5) fail_.at(op_at_, cat("pickle protocol ", v));
        return;
      }
      case '(':
        stack_.push_back(mark());
        return;  // MARK
      case '0':
        pop();
        return;  // POP
      case 'N':
      case 0x88:
      case 0x89:
        stack_.push_back(other());
        return;  // NONE, NEWTRUE/FALSE
      case 'K':
        stack_.push_back(integer(static_cast<int64_t>(arg(1))));
        return;  // BININT1
      case 'M':
        stack_.push_back(integer(static_cast<int64_t>(arg(2))));
        return;  // BININT2
      case 'J':
        stack_.push_back(integer(static_cast<int32_t>(arg(4))));
        return;     // BININT
      case 0x8a: {  // LONG1: little-endian two's complement of n bytes
        const uint64_t n = arg(1);
        if (n > 8) fail_.at(op_at_, cat("a LONG1 of ", n, " bytes (LibTorch reads at most 8)"));
        const uint64_t raw = n == 0 ? 0 : le(need(n), static_cast<int>(n));
        int64_t v = static_cast<int64_t>(raw);
        if (n > 0 && n < 8 && (raw >> (8 * n - 1)) & 1) v -= int64_t{1} << (8 * n - 1) << 1;
        stack_.push_back(integer(v));
        return;
      }
      case 'G':
        need(8);
        stack_.push_back(other());
        return;    // BINFLOAT
      case 'X': {  // BINUNICODE
        const uint64_t n = arg(4);
        stack_.push_back(str(need(n), n));
        return;
      }
      case 'U': {  // SHORT_BINSTRING
        const uint64_t n = arg(1);
        stack_.push_back(str(need(n), n));
        return;
      }
      case 'T': {  // BINSTRING
        const int64_t n = static_cast<int32_t>(arg(4));
        if (n < 0) fail_.at(op_at_, "a BINSTRING of negative length");
        stack_.push_back(str(need(static_cast<uint64_t>(n)), static_cast<uint64_t>(n)));
        return;
      }
      case 'c': {  // GLOBAL module\nname\n
        Item g;
        g.kind = Item::kGlobal;
        std::string module = line();
        g.text = std::make_shared<const std::string>(module + "." + line());
        stack_.push_back(std::move(g));
        return;
      }
      case 'q':
        put(arg(1));
        return;  // BINPUT
      case 'r':
        put(arg(4));
        return;  // LONG_BINPUT
      case 'h':
        get(arg(1));
        return;  // BINGET
      case 'j':
        get(arg(4));
        return;  // LONG_BINGET
      case ')':
        stack_.push_back(tuple({}));
        return;  // EMPTY_TUPLE
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        std::vector<Item> items(op - 0x84);
        for (size_t i = items.size(); i-- > 0;) items[i] = pop();
        stack_.push_back(tuple(std::move(items)));
        return;
      }
      case 't':
        stack_.push_back(tuple(pop_mark()));
        return;  // TUPLE
      case ']':
      case '}':
        stack_.push_back(other());
        return;  // EMPTY_LIST, EMPTY_DICT
      case 'l':
        pop_mark();
        stack_.push_back(other());
        return;    // LIST
      case 'd': {  // DICT
        if (pop_mark().size() % 2 != 0) fail_.at(op_at_, "a DICT of an odd number of items");
        stack_.push_back(other());
        return;
      }
      case 'a':
        pop();
        top();
        return;  // APPEND
      case 'e':
        pop_mark();
        top();
        return;  // APPENDS
      case 's':
        pop();
        pop();
        top();
        return;  // SETITEM
      case 'u':  // SETITEMS
        if (pop_mark().size() % 2 != 0) fail_.at(op_at_, "SETITEMS of an odd number of items");
        top();
        return;
      case 'b':
        pop();
        top();
        return;  // BUILD
      case 0x81:
        pop();
        pop();
        stack_.push_back(other());
        return;    // NEWOBJ
      case 'R': {  // REDUCE
        Item args = pop();
        Item callable = pop();
        stack_.push_back(reduce(callable, args));
        return;
      }
      case 'Q':
        stack_.push_back(storage(pop()));
        return;  // BINPERSID
      default:
        fail_.at(op_at_,
                 cat("pickle opcode 0x", hex(), ", which LibTorch's unpickler does not read"));
    }
  }

  // A persistent id: ('storage', <storage type>, key, location, numel).
  Item storage(const Item& pid) {
    const std::vector<Item>* f = pid.kind == Item::kTuple ? pid.items.get() : nullptr;
    if (f == nullptr || f->size() != 5 || (*f)[0].kind != Item::kStr ||
        (*f)[0].str() != "storage" || (*f)[1].kind != Item::kGlobal || (*f)[2].kind != Item::kStr ||
        (*f)[4].kind != Item::kInt) {
      fail_.at(op_at_, "a persistent id that is not ('storage', type, key, location, numel)");
    }
    const int64_t itemsize = element_size((*f)[1].str());
    if (itemsize == 0)
      fail_.at(op_at_, cat("unknown storage type '", printable((*f)[1].str()), "'"));
    const std::string& key = (*f)[2].str();
    const std::string shown = printable(key);
    auto it = entries_.find(folder_ + "data/" + key);
    if (it == entries_.end())
      fail_.at(op_at_, cat("storage '", shown, "' has no data/", shown, " entry"));
    const int64_t numel = (*f)[4].number;
    if (numel < 0 || static_cast<uint64_t>(numel) > it->second.size / itemsize) {
      fail_.at(op_at_, cat("storage '", shown, "' claims ", numel, " elements of ", itemsize,
                           " bytes but data/", shown, " holds ", it->second.size, " bytes"));
    }
    Item s;
    s.kind = Item::kStorage;
    s.number = numel;
    return s;
  }

  // torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...): the
  // view must stay inside the storage. Other calls are LibTorch's business.
  Item reduce(const Item& callable, const Item& args) {
    if (callable.kind != Item::kGlobal || callable.str() != "torch._utils._rebuild_tensor_v2" ||
        args.kind != Item::kTuple || args.items->size() < 4 ||
        (*args.items)[0].kind != Item::kStorage) {
      return other();
    }
    const std::vector<Item>& a = *args.items;
    if (a[1].kind != Item::kInt || a[2].kind != Item::kTuple || a[3].kind != Item::kTuple ||
        a[2].items->size() != a[3].items->size()) {
      fail_.at(op_at_, "a tensor whose offset, size or stride is not integers of one rank");
    }
    const int64_t numel = a[0].number;
    const int64_t offset = a[1].number;
    if (offset < 0) fail_.at(op_at_, cat("a tensor at storage offset ", offset));
    // The last element addressed: offset + sum((size - 1) * stride).
    __int128 last = offset;
    bool empty = false;
    for (size_t i = 0; i < a[2].items->size(); ++i) {
      const Item& size = (*a[2].items)[i];
      const Item& stride = (*a[3].items)[i];
      if (size.kind != Item::kInt || stride.kind != Item::kInt || size.number < 0 ||
          stride.number < 0) {
        fail_.at(op_at_, "a tensor with a size or stride that is not a non-negative integer");
      }
      if (size.number == 0) empty = true;
      last += static_cast<__int128>(size.number - (size.number > 0 ? 1 : 0)) * stride.number;
    }
    if (!empty && last >= numel) {
      fail_.at(op_at_, cat("a tensor reaches element ",
                           static_cast<int64_t>(std::min<__int128>(last, INT64_MAX)),
                           " of a storage of ", numel, " elements"));
    }
    return other();
  }

  const char* d_;
  uint64_t begin_, end_;
  const std::string& folder_;
  const std::map<std::string, Entry>& entries_;
  const Failure& fail_;
  uint64_t at_ = 0, op_at_ = 0;
  std::vector<Item> stack_;
  std::unordered_map<uint64_t, Item> memo_;
};

}  // namespace

std::optional<std::string> torch_save_problem(const char* data, size_t size) {
  const Failure fail;
  try {
    std::string folder;
    const std::map<std::string, Entry> entries = read_zip(data, size, fail, &folder);
    const Entry& pkl = entries.at(folder + "data.pkl");
    PickleCheck(data, pkl.data, pkl.size, folder, entries, fail).run();
  } catch (const Problem& p) {
    return p.text;
  }
  return std::nullopt;
}

void check_torch_save(const char* data, size_t size, const std::string& origin) {
  if (auto problem = torch_save_problem(data, size)) {
    throw DataError(
        cat(origin, ": ", *problem, "; the file is damaged or not written by torch.save"));
  }
}

}  // namespace dtrain::detail
