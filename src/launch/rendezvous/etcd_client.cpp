#include "launch/rendezvous/etcd_client.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::detail {
namespace {

using nlohmann::json;

std::string endpoint(const std::string& host, int port) { return cat(host, ":", port); }

/// http://host:port`path`, an IPv6 address in brackets.
std::string etcd_url(const std::string& host, int port, const std::string& path) {
  const bool v6 = host.find(':') != std::string::npos;
  return cat("http://", v6 ? "[" : "", host, v6 ? "]" : "", ":", port, path);
}

/// An int64 field of an etcd reply: the gateway writes int64 as a JSON string
/// and omits zero values. Throws StoreError on anything else.
int64_t int_field(const json& object, const char* name, const std::string& where) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  long long value = 0;
  if (it->is_string() && parse_int(it->get<std::string>(), &value)) return value;
  throw StoreError(cat(where, ": field '", name, "' is not an integer: ", it->dump()));
}

/// The value of a KeyValue of a range reply (omitted by the gateway when empty).
std::string kv_value(const json& kv, const std::string& where) {
  auto it = kv.find("value");
  if (it == kv.end()) return "";
  std::optional<std::string> value =
      it->is_string() ? base64_decode(it->get<std::string>()) : std::nullopt;
  if (!value) throw StoreError(cat(where, ": value is not base64: ", it->dump()));
  return *value;
}

/// The value of the first KeyValue of a RangeResponse, nullopt when none.
std::optional<std::string> first_value(const json& range_reply, const std::string& where) {
  auto kvs = range_reply.find("kvs");
  if (kvs == range_reply.end() || !kvs->is_array() || kvs->empty()) return std::nullopt;
  return kv_value(kvs->front(), where);
}

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 2]);
    out += kBase64[(n >> 18) & 63];
    out += kBase64[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kBase64[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kBase64[n & 63] : '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t bits = 0;
  int count = 0;
  size_t padding = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '=') {
      // Only at the end, at most two.
      if (i + 2 < text.size() || ++padding > 2) return std::nullopt;
      continue;
    }
    if (padding > 0) return std::nullopt;
    const char* at = std::strchr(kBase64, c);
    if (c == '\0' || at == nullptr) return std::nullopt;
    bits = (bits << 6) | static_cast<uint32_t>(at - kBase64);
    if (++count == 4) {
      out += static_cast<char>((bits >> 16) & 0xff);
      out += static_cast<char>((bits >> 8) & 0xff);
      out += static_cast<char>(bits & 0xff);
      bits = 0;
      count = 0;
    }
  }
  if (count == 3) {  // one '='
    out += static_cast<char>((bits >> 10) & 0xff);
    out += static_cast<char>((bits >> 2) & 0xff);
  } else if (count == 2) {  // two '='
    out += static_cast<char>((bits >> 4) & 0xff);
  }
  return out;
}

EtcdClient::EtcdClient(std::string host, int port, std::chrono::milliseconds timeout,
                       Transport transport)
    : host_(std::move(host)),
      port_(port),
      timeout_(timeout),
      transport_(std::move(transport)),
      http_(transport_ ? nullptr : http::curl_transport()) {}

std::string EtcdClient::describe() const { return cat("etcd at ", endpoint(host_, port_)); }

http::HttpResponse EtcdClient::post(const std::string& path, const std::string& body,
                                    const std::string& what) {
  // Note [etcd over the HTTP stack]
  // One deadline for the whole call, as the rendezvous sizes its waits by
  // it: libcurl's total timeout (HttpRequest::total_timeout) bounds connect,
  // send and receive together; the idle and connect bounds are set to the
  // same value so that neither ends a call earlier. Connections stay open
  // between calls (etcd's gateway keeps them alive); a connection etcd
  // closed meanwhile is replaced by libcurl before the request is sent. No
  // proxy: etcd is an address inside the cluster. libcurl's sockets are not
  // close-on-exec; the workers the launcher starts close every inherited
  // descriptor at exec (close_range in process/process.cpp).
  http::HttpRequest request;
  request.method = "POST";
  request.url = etcd_url(host_, port_, path);
  request.headers = {{"Content-Type", "application/json"}, {"Accept", "application/json"}};
  request.body = body;
  request.timeout = timeout_;
  request.total_timeout = timeout_;
  request.connect_timeout = timeout_;
  request.use_proxy = false;
  const std::string hp = endpoint(host_, port_);
  try {
    return http_->perform(request);
  } catch (const http::TransportError& e) {
    if (e.timed_out) {
      throw TimeoutError(cat("etcd at ", hp, " did not answer ", what, " within ", timeout_.count(),
                             " ms (", e.reason,
                             "): is etcd healthy (a leader elected) and is "
                             "LaunchOptions::rdzv_endpoint right?"));
    }
    if (e.unreachable) {
      throw StoreError(cat("cannot reach etcd at ", hp, " for ", what, ": ", e.reason,
                           " (is etcd running and is LaunchOptions::rdzv_endpoint right?)"));
    }
    throw StoreError(cat("etcd at ", hp, ", ", what, ": ", e.reason));
  }
}

json EtcdClient::call(const std::string& method, const json& request, const std::string& what,
                      bool* not_found) {
  const std::string path = "/v3/" + method;
  const std::string body = request.dump();
  http::HttpResponse response = transport_ ? transport_(path, body, what) : post(path, body, what);
  json reply = json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  // Streaming methods (lease/keepalive) wrap each message: {"result": {...}}
  // or {"error": {"grpc_code": 5, "message": ...}}.
  if (reply.is_object() && reply.contains("result")) reply = reply["result"];
  if (reply.is_object() && reply.contains("error")) {
    const json& error = reply["error"];
    std::string message = error.is_string() ? error.get<std::string>() : error.dump();
    int64_t code = int_field(reply, "code", describe());
    if (error.is_object()) {
      if (auto m = error.find("message"); m != error.end() && m->is_string()) message = *m;
      code = int_field(error, "grpc_code", describe());
    }
    if (code == 5 && not_found != nullptr) {  // gRPC NotFound
      *not_found = true;
      return reply;
    }
    throw StoreError(cat(describe(), " refused ", what, ": ", message, " (gRPC code ", code, ")"));
  }
  if (response.status != 200 || !reply.is_object()) {
    std::string body = first_line(response.body).substr(0, 200);
    throw StoreError(cat(
        describe(), " gave an unexpected reply to ", what, ": HTTP ", response.status, " '", body,
        "'", response.status == 404 ? " (is it etcd >= 3.4 with the v3 JSON gateway?)" : ""));
  }
  return reply;
}

std::optional<std::string> EtcdClient::get(const std::string& key) {
  std::string what = cat("range of key '", key, "'");
  json reply = call("kv/range", {{"key", base64_encode(key)}}, what);
  return first_value(reply, cat(describe(), ", ", what));
}

void EtcdClient::put(const std::string& key, const std::string& value) {
  call("kv/put", {{"key", base64_encode(key)}, {"value", base64_encode(value)}},
       cat("put of key '", key, "'"));
}

bool EtcdClient::put_leased(const std::string& key, const std::string& value, int64_t lease) {
  bool not_found = false;
  json request = {{"key", base64_encode(key)},
                  {"value", base64_encode(value)},
                  {"lease", std::to_string(lease)}};
  call("kv/put", request, cat("put of key '", key, "' with lease ", lease), &not_found);
  return !not_found;
}

bool EtcdClient::compare_and_put(const std::string& key, const std::optional<std::string>& expected,
                                 const std::string& value, std::optional<std::string>* current) {
  const std::string key64 = base64_encode(key);
  // etcd's VALUE comparison always fails on an absent key, so "absent" is
  // tested through the creation revision instead (0 for a missing key).
  json compare = {{"key", key64}, {"result", "EQUAL"}};
  if (expected) {
    compare["target"] = "VALUE";
    compare["value"] = base64_encode(*expected);
  } else {
    compare["target"] = "CREATE";
    compare["create_revision"] = "0";
  }
  json request = {
      {"compare", json::array({compare})},
      {"success",
       json::array({{{"request_put", {{"key", key64}, {"value", base64_encode(value)}}}}})},
      {"failure", json::array({{{"request_range", {{"key", key64}}}}})}};
  std::string what = cat("compare-and-set of key '", key, "'");
  json reply = call("kv/txn", request, what);
  // Note: json::value() throws nlohmann's type_error on a field of another
  // type; an etcd reply is outside bytes (fuzz/etcd_json.cpp found a
  // "succeeded" that was an array), so the types are checked here.
  const auto succeeded = reply.find("succeeded");  // omitted when false
  if (succeeded != reply.end() && !succeeded->is_boolean()) {
    throw StoreError(cat(describe(), ", ", what, ": malformed reply: ", reply.dump()));
  }
  if (succeeded != reply.end() && succeeded->get<bool>()) return true;
  if (current != nullptr) {
    const auto found = reply.find("responses");
    const json responses = found != reply.end() ? *found : json::array();
    if (!responses.is_array() || responses.empty() ||
        !responses.front().contains("response_range")) {
      throw StoreError(cat(describe(), ", ", what, ": reply lacks the range: ", reply.dump()));
    }
    *current = first_value(responses.front()["response_range"], cat(describe(), ", ", what));
  }
  return false;
}

bool EtcdClient::erase(const std::string& key) {
  std::string what = cat("delete of key '", key, "'");
  json reply = call("kv/deleterange", {{"key", base64_encode(key)}}, what);
  return int_field(reply, "deleted", cat(describe(), ", ", what)) > 0;
}

EtcdLease EtcdClient::grant_lease(int64_t ttl_seconds) {
  std::string what = cat("grant of a ", ttl_seconds, " s lease");
  json reply = call("lease/grant", {{"TTL", std::to_string(ttl_seconds)}}, what);
  EtcdLease lease{int_field(reply, "ID", describe()), int_field(reply, "TTL", describe())};
  if (lease.id == 0 || lease.ttl_seconds <= 0) {
    throw StoreError(cat(describe(), ", ", what, ": reply lacks ID or TTL: ", reply.dump()));
  }
  return lease;
}

int64_t EtcdClient::keep_alive(int64_t lease) {
  // A streaming call in gRPC; through the gateway one request message yields
  // one reply message. An unknown lease answers TTL 0 (omitted), not an error.
  bool not_found = false;
  json reply = call("lease/keepalive", {{"ID", std::to_string(lease)}},
                    cat("keep-alive of lease ", lease), &not_found);
  return not_found ? 0 : std::max<int64_t>(0, int_field(reply, "TTL", describe()));
}

bool EtcdClient::revoke_lease(int64_t lease) {
  bool not_found = false;
  call("lease/revoke", {{"ID", std::to_string(lease)}}, cat("revoke of lease ", lease), &not_found);
  return !not_found;
}

}  // namespace dtrain::detail
