// Fuzz target: etcd's v3 JSON gateway replies as the rendezvous' etcd client
// reads them (src/launch/rendezvous/etcd_client.h), through its injectable
// Transport (the HTTP framing is libcurl's: src/http/http.h).
//
// Input: byte 0 picks the operation (get, put, put with lease, compare-and-put
// of an absent or of a present key, delete, lease grant, keep-alive, revoke),
// byte 1 the HTTP status (kStatuses), the rest is the reply's body (the corpus
// holds bodies recorded from a real etcd, fuzz/seeds/record_etcd.py). Every
// failure must be a dtrain::Error (StoreError: one line naming etcd, the
// operation and the key); any other exception escaping is a finding.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dtrain/errors.h"
#include "fuzz/fuzz_util.h"
#include "launch/rendezvous/etcd_client.h"

using namespace dtrain::detail;

namespace {
// Must match fuzz/seeds/record_etcd.py. etcd answers 200, 400 (a malformed
// request), 404 (an unknown lease, an unknown path); the rest stand for a
// server in front of etcd or not etcd at all.
constexpr int kStatuses[8] = {200, 400, 404, 500, 503, 204, 301, 429};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int op = data[0] % 9;
  const int status = kStatuses[data[1] % 8];
  const std::string body(reinterpret_cast<const char*>(data) + 2, size - 2);
  EtcdClient client("127.0.0.1", 2379, std::chrono::milliseconds(1000),
                    [&body, status](const std::string&, const std::string&, const std::string&) {
                      dtrain::http::HttpResponse response;
                      response.status = status;
                      response.body = body;
                      return response;
                    });
  try {
    std::optional<std::string> current;
    switch (op) {
      case 0:
        client.get("dtrain/rdzv/job/state");
        break;
      case 1:
        client.put("dtrain/rdzv/job/state", "1 open");
        break;
      case 2:
        client.put_leased("dtrain/rdzv/job/hb/n0", "1", 7587869214470751236LL);
        break;
      case 3:
        client.compare_and_put("dtrain/rdzv/job/state", std::nullopt, "0 open", &current);
        break;
      case 4:
        client.compare_and_put("dtrain/rdzv/job/state", "0 open", "1 open", &current);
        break;
      case 5:
        client.erase("dtrain/rdzv/job/state");
        break;
      case 6:
        client.grant_lease(10);
        break;
      case 7:
        client.keep_alive(7587869214470751236LL);
        break;
      case 8:
        client.revoke_lease(7587869214470751236LL);
        break;
    }
  } catch (const dtrain::Error& e) {
    const std::string what = e.what();
    if (what.empty()) dtrain::fuzz::fail("an error without a message");
  }
  return 0;
}
