#include "objstore/sigv4.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <algorithm>
#include <ctime>
#include <memory>

#include "common/strings.h"

namespace dtrain::objstore {

// Note [SigV4]
// Signature Version 4 (AWS's "Create a signed AWS API request"):
//   canonical request = METHOD \n URI \n QUERY \n HEADERS \n SIGNED \n PAYLOAD
//   string to sign    = AWS4-HMAC-SHA256 \n date \n scope \n hex(sha256(canonical))
//   signing key       = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, yyyymmdd), region),
//                            service), "aws4_request")
// dtrain builds it itself rather than through libcurl's CURLOPT_AWS_SIGV4:
// 7.88's does not sort query parameters (curl#9717), mis-encodes values with
// '/' or ':' (#11794) and keys with '=' (#13754), and mishandles the payload
// hash header (#8935). The query string dtrain sends is the canonical one
// (canonical_query), so what is signed and what is sent cannot differ. Only
// the primitives (SHA-256, HMAC) come from OpenSSL.

namespace {

// Note [Fetched once]
// OpenSSL 3 looks an algorithm up in its providers at every use of the
// legacy EVP_sha256()/HMAC() entry points (a locked property query). SHA-256
// and HMAC are fetched once, on first use (thread-safe statics, never
// changed or freed after: a thread signing during exit finds them), and each
// call makes only its own context.
const EVP_MD* sha256_md() {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  if (!md) throw Error("OpenSSL: SHA256 is not available");
  return md;
}

struct MacCtxDeleter {
  void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }
};
using MacCtx = std::unique_ptr<EVP_MAC_CTX, MacCtxDeleter>;

// An HMAC context with its digest set and no key, copied for each use.
const EVP_MAC_CTX* hmac_sha256_template() {
  static EVP_MAC_CTX* const ctx = [] {
    EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    MacCtx c(mac ? EVP_MAC_CTX_new(mac) : nullptr);
    EVP_MAC_free(mac);  // the context holds its own reference
    char digest_name[] = "SHA256";
    const OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
        OSSL_PARAM_construct_end()};
    if (c && EVP_MAC_CTX_set_params(c.get(), params) != 1) c.reset();
    return c.release();
  }();
  if (!ctx) throw Error("OpenSSL: HMAC-SHA256 is not available");
  return ctx;
}

std::string digest(const EVP_MD* md, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), out, &len, md, nullptr) != 1) {
    throw Error("OpenSSL EVP_Digest failed");
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string trim_and_collapse(std::string_view value) {
  std::string out;
  bool space = false;
  for (char c : value) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Lower-cased names, sorted; values of repeated names joined by ','.
Pairs canonical_headers(const Pairs& headers) {
  Pairs sorted;
  for (const auto& [name, value] : headers)
    sorted.emplace_back(lower(name), trim_and_collapse(value));
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  Pairs merged;
  for (auto& header : sorted) {
    if (!merged.empty() && merged.back().first == header.first) {
      merged.back().second += "," + header.second;
    } else {
      merged.push_back(std::move(header));
    }
  }
  return merged;
}

}  // namespace
}  // namespace dtrain::objstore

namespace dtrain {
std::string sha256_hex(std::string_view data) {
  return objstore::hex(objstore::digest(objstore::sha256_md(), data));
}
}  // namespace dtrain

namespace dtrain::objstore {

std::string hmac_sha256(std::string_view key, std::string_view data) {
  MacCtx ctx(EVP_MAC_CTX_dup(hmac_sha256_template()));
  unsigned char out[EVP_MAX_MD_SIZE];
  size_t len = 0;
  if (!ctx ||
      EVP_MAC_init(ctx.get(), reinterpret_cast<const unsigned char*>(key.data()), key.size(),
                   nullptr) != 1 ||
      EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(data.data()), data.size()) !=
          1 ||
      EVP_MAC_final(ctx.get(), out, &len, sizeof(out)) != 1) {
    throw Error("OpenSSL HMAC-SHA256 failed");
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string md5(std::string_view data) { return digest(EVP_md5(), data); }

std::string md5_base64(std::string_view data) {
  std::string raw = md5(data);
  std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(raw.data()),
                          static_cast<int>(raw.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string uri_encode(std::string_view text, bool keep_slash) {
  static const char* digits = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += digits[c >> 4];
      out += digits[c & 15];
    }
  }
  return out;
}

std::string uri_decode(std::string_view text, bool plus_is_space) {
  auto value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && value(text[i + 1]) >= 0 &&
        value(text[i + 2]) >= 0) {
      out += static_cast<char>(value(text[i + 1]) * 16 + value(text[i + 2]));
      i += 2;
    } else {
      out += plus_is_space && text[i] == '+' ? ' ' : text[i];
    }
  }
  return out;
}

std::string amz_date(std::chrono::system_clock::time_point time) {
  std::time_t t = std::chrono::system_clock::to_time_t(time);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string canonical_query(const Pairs& query) {
  Pairs encoded;
  for (const auto& [key, value] : query) {
    encoded.emplace_back(uri_encode(key, false), uri_encode(value, false));
  }
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [key, value] : encoded) {
    if (!out.empty()) out += '&';
    out += key + "=" + value;
  }
  return out;
}

namespace {

std::string names_of(const Pairs& canonical) {
  std::string out;
  for (const auto& header : canonical) {
    if (!out.empty()) out += ';';
    out += header.first;
  }
  return out;
}

// The canonical request from headers made canonical once (a request signs
// with them twice: in the canonical request and as SignedHeaders).
std::string canonical_request(const SignableRequest& request, const Pairs& canonical,
                              const std::string& signed_names) {
  std::string out;
  out.reserve(512);
  out.append(request.method).append("\n").append(request.canonical_uri).append("\n");
  out.append(canonical_query(request.query)).append("\n");
  for (const auto& [name, value] : canonical) out.append(name).append(":").append(value) += '\n';
  out.append("\n").append(signed_names).append("\n").append(request.payload_hash);
  return out;
}

}  // namespace

std::string signed_headers(const SignableRequest& request) {
  return names_of(canonical_headers(request.headers));
}

std::string canonical_request(const SignableRequest& request) {
  const Pairs canonical = canonical_headers(request.headers);
  return canonical_request(request, canonical, names_of(canonical));
}

namespace {

std::string signing_key(const std::string& secret, const std::string& day,
                        const std::string& region, const std::string& service) {
  std::string key = hmac_sha256("AWS4" + secret, day);
  key = hmac_sha256(key, region);
  key = hmac_sha256(key, service);
  return hmac_sha256(key, "aws4_request");
}

}  // namespace

// Note [Signing key once a day]
// The signing key depends only on the secret, the day, the region and the
// service, yet derives through four HMACs. OpenSSL was about 7% of the
// fetch threads' CPU in a profile of an S3 epoch (88 KB GETs) before this
// and Note [Fetched once], 5% after. A client
// signs thousands of requests a second with the same four, so it keeps the
// last key; a new secret (refreshed credentials) or day derives a new one.
std::string SigningKeys::get(const std::string& secret, const std::string& day,
                             const std::string& region, const std::string& service) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!key_.empty() && day == day_ && secret == secret_ && region == region_ &&
        service == service_) {
      return key_;
    }
  }
  std::string key = signing_key(secret, day, region, service);  // no lock held meanwhile
  std::lock_guard<std::mutex> lock(mu_);
  secret_ = secret;
  day_ = day;
  region_ = region;
  service_ = service;
  key_ = key;
  return key;
}

std::string authorization(const SignableRequest& request, const Credentials& credentials,
                          const std::string& region, const std::string& service,
                          const std::string& date, SigningKeys* keys) {
  const std::string day = date.substr(0, 8);
  const std::string scope = cat(day, "/", region, "/", service, "/aws4_request");
  const Pairs canonical = canonical_headers(request.headers);
  const std::string signed_names = names_of(canonical);
  const std::string to_sign = cat("AWS4-HMAC-SHA256\n", date, "\n", scope, "\n",
                                  sha256_hex(canonical_request(request, canonical, signed_names)));
  const std::string key = keys ? keys->get(credentials.secret_access_key, day, region, service)
                               : signing_key(credentials.secret_access_key, day, region, service);
  return cat("AWS4-HMAC-SHA256 Credential=", credentials.access_key_id, "/", scope,
             ", SignedHeaders=", signed_names, ", Signature=", hex(hmac_sha256(key, to_sign)));
}

}  // namespace dtrain::objstore
