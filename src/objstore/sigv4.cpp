#include "objstore/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <ctime>

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
  return objstore::hex(objstore::digest(EVP_sha256(), data));
}
}  // namespace dtrain

namespace dtrain::objstore {

std::string hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len)) {
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

std::string signed_headers(const SignableRequest& request) {
  std::vector<std::string> names;
  for (const auto& header : canonical_headers(request.headers)) names.push_back(header.first);
  return join(names, ";");
}

std::string canonical_request(const SignableRequest& request) {
  std::string headers;
  for (const auto& [name, value] : canonical_headers(request.headers)) {
    headers += name + ":" + value + "\n";
  }
  return cat(request.method, "\n", request.canonical_uri, "\n", canonical_query(request.query),
             "\n", headers, "\n", signed_headers(request), "\n", request.payload_hash);
}

std::string authorization(const SignableRequest& request, const Credentials& credentials,
                          const std::string& region, const std::string& service,
                          const std::string& date) {
  const std::string day = date.substr(0, 8);
  const std::string scope = cat(day, "/", region, "/", service, "/aws4_request");
  const std::string to_sign =
      cat("AWS4-HMAC-SHA256\n", date, "\n", scope, "\n", sha256_hex(canonical_request(request)));
  std::string key = hmac_sha256("AWS4" + credentials.secret_access_key, day);
  key = hmac_sha256(key, region);
  key = hmac_sha256(key, service);
  key = hmac_sha256(key, "aws4_request");
  return cat("AWS4-HMAC-SHA256 Credential=", credentials.access_key_id, "/", scope,
             ", SignedHeaders=", signed_headers(request),
             ", Signature=", hex(hmac_sha256(key, to_sign)));
}

}  // namespace dtrain::objstore
