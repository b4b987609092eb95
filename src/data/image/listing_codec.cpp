// The encoding of Note [Shared listing] (shared_listing.cpp): varints,
// length-prefixed strings, and listings front-coded by name.

#include "data/image/listing_codec.h"

#include <cstring>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::image {
namespace {

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

}  // namespace dtrain::image
