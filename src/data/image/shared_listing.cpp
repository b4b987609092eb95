// Listings made once per job (data/image/shared_listing.h).
//
// Note [Shared listing]
// Listing ImageNet's training split in S3 is 1,282 ListObjectsV2 pages of
// 1,000 keys; a job of 1,000 ranks that each list it sends 1.28 million
// requests before its first step, and pays the request charges, for one
// answer. So when datasets open with a process group of more than one rank
// (open_dataset(options, pg)), the registry gives every split of that call
// one Storage shared with the group (Storage::share_with), and what opening
// asks S3 goes through share_from_rank0: rank 0 asks, every other rank waits
// in a broadcast and gets rank 0's answer:
//   - Storage::list of an s3:// folder (ImageFolder's scan, a WebDataset
//     directory's shards): names, sizes and ETags, about 30 bytes an object
//     in encode_listing's form (37 MB for ImageNet's 1.28 million names);
//   - Storage::is_directory of an s3:// location (the registry's probes of
//     DATA_DIR, train, val): one byte;
//   - a WebDataset shard in S3: its size, ETag and sample index
//     (Note [WebDataset order]), so the other ranks neither HEAD nor read it.
// Every rank makes the same calls in the same order, because each call's
// result is rank 0's on every rank, so every rank takes the same branches;
// each message starts with what it answers ("list s3://b/imagenet/train"),
// and a rank that asked something else (a different --data-dir) fails
// naming both instead of reading a wrong answer. A failure on rank 0 (no
// such bucket, access denied, an empty folder) is sent as a status and its
// one-line message, so every rank throws the same error at once instead of
// the others waiting out the group's timeout. The ranks get the same
// listing, so the same samples in the same order and the same data
// fingerprint (Note [Dataset fingerprints]) as if each had listed alone.
// The other ranks wait for rank 0's listing as long as the group's timeout
// (30 minutes by default); 1.28 million keys take about a minute from S3.
//
// Local folders are still listed by each rank: a local path may be a
// different disk on each node, and a rank must find its own files missing
// at open rather than at its first read. Packed datasets read one index.bin
// per rank (one GET each) and HEAD their shards, as before. Opening without
// a group (open_dataset(options), or a group of one rank) lists as before.

#include "data/image/shared_listing.h"

#include <ATen/ATen.h>

#include <cstring>

#include "common/strings.h"
#include "dtrain/comm.h"
#include "dtrain/errors.h"

namespace dtrain::image {
namespace {

constexpr uint64_t kOk = 0, kInvalidArgument = 1, kOtherError = 2;

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// S3's ETag of an object put whole: "<32 lowercase hex digits>", quotes included.
bool is_md5_etag(const std::string& etag) {
  if (etag.size() != 34 || etag.front() != '"' || etag.back() != '"') return false;
  for (size_t i = 1; i < 33; ++i) {
    if (hex_digit(etag[i]) < 0) return false;
  }
  return true;
}

// The message every rank throws for rank 0's failure.
std::string failure_line(const std::string& message, const ProcessGroup& pg) {
  return cat(first_line(message), " (rank 0 of ", pg.size(),
             " opens S3 datasets for every rank: Note [Shared listing])");
}

// `bytes` of rank 0 on every rank: its length, then a uint8 tensor.
std::string broadcast_from_rank0(const ProcessGroup& pg, std::string bytes) {
  const bool root = pg.rank() == 0;
  std::vector<at::Tensor> length{
      at::full({1}, root ? static_cast<int64_t>(bytes.size()) : int64_t{0}, at::kLong)};
  pg.broadcast(length);
  const int64_t n = length[0].item<int64_t>();
  if (n == 0) return root ? std::move(bytes) : std::string();
  std::vector<at::Tensor> data{root ? at::from_blob(bytes.data(), {n}, at::kByte)
                                    : at::empty({n}, at::kByte)};
  pg.broadcast(data);
  if (root) return bytes;
  const at::Tensor got = data[0].contiguous();
  return std::string(reinterpret_cast<const char*>(got.data_ptr<uint8_t>()),
                     static_cast<size_t>(n));
}

}  // namespace

void WireWriter::u64(uint64_t v) {
  while (v >= 0x80) {
    out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out_.push_back(static_cast<char>(v));
}

void WireWriter::bytes(std::string_view s) {
  u64(s.size());
  out_.append(s);
}

void WireWriter::raw(const void* data, size_t n) { out_.append(static_cast<const char*>(data), n); }

void WireReader::fail(const char* why) const {
  throw DataError(cat(what_, " is malformed at byte ", at_, " of ", in_.size(), ": ", why,
                      " (rank 0 and this rank run different dtrain builds?)"));
}

uint64_t WireReader::u64() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at_ >= in_.size()) fail("it ends inside a number");
    const auto b = static_cast<uint8_t>(in_[at_++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  fail("a number is longer than 64 bits");
}

std::string_view WireReader::raw(size_t n) {
  if (n > in_.size() - at_) fail("it ends inside a string");
  const std::string_view s = in_.substr(at_, n);
  at_ += n;
  return s;
}

std::string_view WireReader::bytes() { return raw(static_cast<size_t>(u64())); }

std::string_view WireReader::rest() { return raw(in_.size() - at_); }

std::string encode_listing(const std::vector<Listed>& listing) {
  WireWriter w;
  w.u64(listing.size());
  const std::string* previous = nullptr;
  for (const Listed& o : listing) {
    size_t shared = 0;
    if (previous) {
      const size_t most = std::min(previous->size(), o.name.size());
      while (shared < most && (*previous)[shared] == o.name[shared]) ++shared;
    }
    w.u64(shared);
    w.bytes(std::string_view(o.name).substr(shared));
    w.u64(static_cast<uint64_t>(o.size));
    if (is_md5_etag(o.etag)) {  // tag 0, then the 16 bytes
      w.u64(0);
      uint8_t md5[16];
      for (size_t i = 0; i < 16; ++i) {
        md5[i] =
            static_cast<uint8_t>(hex_digit(o.etag[1 + 2 * i]) << 4 | hex_digit(o.etag[2 + 2 * i]));
      }
      w.raw(md5, sizeof md5);
    } else {  // tag length + 1, then the ETag as it is (multipart "...-N", or none)
      w.u64(o.etag.size() + 1);
      w.raw(o.etag.data(), o.etag.size());
    }
    previous = &o.name;
  }
  return std::move(w.str());
}

std::vector<Listed> decode_listing(std::string_view bytes, const std::string& what) {
  WireReader r(bytes, what);
  const uint64_t count = r.u64();
  if (count > bytes.size()) r.fail("it claims more objects than it has bytes");
  std::vector<Listed> out(static_cast<size_t>(count));
  static const char* digits = "0123456789abcdef";
  for (size_t i = 0; i < out.size(); ++i) {
    Listed& o = out[i];
    const uint64_t shared = r.u64();
    if (shared > (i == 0 ? 0 : out[i - 1].name.size())) r.fail("a name shares more than it can");
    o.name.assign(i == 0 ? std::string() : out[i - 1].name.substr(0, shared));
    o.name.append(r.bytes());
    o.size = static_cast<int64_t>(r.u64());
    const uint64_t tag = r.u64();
    if (tag == 0) {
      const std::string_view md5 = r.raw(16);
      o.etag.reserve(34);
      o.etag.push_back('"');
      for (char c : md5) {
        const auto b = static_cast<uint8_t>(c);
        o.etag.push_back(digits[b >> 4]);
        o.etag.push_back(digits[b & 15]);
      }
      o.etag.push_back('"');
    } else {
      o.etag.assign(r.raw(static_cast<size_t>(tag - 1)));
    }
  }
  if (!r.done()) r.fail("bytes follow the last object");
  return out;
}

std::string share_from_rank0(const ProcessGroup& pg, const std::string& what,
                             const std::function<std::string()>& produce) {
  if (pg.size() == 1) return produce();
  std::string message;
  if (pg.rank() == 0) {
    uint64_t status = kOk;
    std::string payload;
    try {
      payload = produce();
    } catch (const InvalidArgument& e) {
      status = kInvalidArgument;
      payload = e.what();
    } catch (const std::exception& e) {
      status = kOtherError;
      payload = e.what();
    }
    WireWriter w;
    w.bytes(what);
    w.u64(status);
    w.str().append(payload);
    message = std::move(w.str());
  }
  message = broadcast_from_rank0(pg, std::move(message));
  WireReader r(message, cat("rank ", pg.rank(), ": the answer rank 0 sent for '", what, "'"));
  const std::string_view asked = r.bytes();
  const uint64_t status = r.u64();
  if (asked != what) {
    throw DataError(cat("rank ", pg.rank(), " opens '", what, "' but rank 0 opened '", asked,
                        "': every rank must open the same datasets in the same order (give "
                        "every rank the same --dataset and --data-dir)"));
  }
  std::string payload(r.rest());
  if (status == kInvalidArgument) throw InvalidArgument(failure_line(payload, pg));
  if (status != kOk) throw DataError(failure_line(payload, pg));
  return payload;
}

}  // namespace dtrain::image
