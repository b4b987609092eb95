// Fuzz target: S3's answers as dtrain's S3 client reads them
// (src/objstore): ListObjectsV2 pages (the XML tree over expat, url-decoded
// keys, sizes, continuation tokens), S3's <Error> replies behind every
// operation, and the headers a GET or HEAD reads (ETag, Content-Length,
// Content-Range). The client runs over a transport that answers from the
// input instead of the network, with one attempt per request (no backoff).
//
// Input: byte 0 picks the operation (kOps), byte 1 the HTTP status
// (kStatuses), the rest is the response: optional "name: value" header
// lines, an empty line, then the body; a listing of several pages holds one
// response per page separated by kPageSeparator. The corpus holds bodies
// recorded from a real moto_server (fuzz/seeds/record_s3.py).
//
// Checks beyond "no crash": every failure is a dtrain::Error whose message is
// one line of printable text; an accepted listing holds exactly the XML's
// <Contents>, each with the size its <Size> says.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/errors.h"
#include "dtrain/object_store.h"
#include "fuzz/fuzz_util.h"
#include "http/http.h"
#include "objstore/s3_request.h"
#include "objstore/xml.h"

namespace {

using dtrain::fuzz::fail;
using dtrain::http::HttpRequest;
using dtrain::http::HttpResponse;

// Must match fuzz/seeds/record_s3.py.
enum Op { kListPage, kListAll, kGet, kPut, kHead, kDelete, kGetRanged, kGetIfMatch, kOps };
constexpr int kStatuses[16] = {200, 206, 301, 307, 400, 403, 404, 409,
                               412, 416, 429, 500, 501, 503, 204, 304};
constexpr std::string_view kPageSeparator = "\n--dtrain-fuzz-page--\n";
// A listing stops after this many pages (the client stops on a repeated token).
constexpr size_t kMaxRequests = 64;

// One response: header lines up to the first empty line, when the first line
// looks like a header ("name: value"); otherwise all of it is the body.
HttpResponse response_from(std::string_view part, int status) {
  HttpResponse response;
  response.status = status;
  const size_t end = part.find("\n\n");
  const size_t first_colon = part.find(':');
  const size_t first_newline = part.find('\n');
  if (end != std::string_view::npos && first_colon != std::string_view::npos &&
      first_colon < first_newline &&
      part.substr(0, first_colon).find('<') == std::string_view::npos) {
    for (std::string_view line : dtrain::fuzz::split_parts(part.substr(0, end), "\n")) {
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      std::string name(line.substr(0, colon));
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      response.headers[name] = std::string(value);
    }
    part.remove_prefix(end + 2);
  }
  response.body = std::string(part);
  return response;
}

class InputTransport : public dtrain::http::HttpTransport {
 public:
  InputTransport(std::vector<std::string_view> parts, int status)
      : parts_(std::move(parts)), status_(status) {}
  HttpResponse perform(const HttpRequest&) override {
    if (served_ >= kMaxRequests) throw dtrain::http::TransportError("no more input", false);
    const size_t i = std::min(served_, parts_.size() - 1);
    ++served_;
    // Later pages of a listing are answered 200, as S3 does.
    return response_from(parts_[i], i == 0 ? status_ : 200);
  }

 private:
  std::vector<std::string_view> parts_;
  int status_;
  size_t served_ = 0;
};

void check_one_line(const std::string& what) {
  if (what.empty()) fail("an error without a message");
  for (unsigned char c : what) {
    if (c < 0x20 || c == 0x7f) fail("an error message with a control byte: " + what);
  }
}

bool all_digits(const std::string& text) {
  if (text.empty() || text.size() > 18) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// The listing the client accepted holds the XML's objects with their sizes.
void check_page(const dtrain::ListPage& page, std::string_view body) {
  auto xml = dtrain::objstore::parse_xml(body);
  if (!xml) fail("a listing accepted from a body that is not XML");
  const auto contents = xml->all("Contents");
  if (contents.size() != page.objects.size()) fail("a listing lost or added objects");
  for (size_t i = 0; i < contents.size(); ++i) {
    const std::string size = contents[i]->child_text("Size");
    if (!all_digits(size) || std::strtoull(size.c_str(), nullptr, 10) != page.objects[i].size) {
      fail("object " + std::to_string(i) + " accepted with size " +
           std::to_string(page.objects[i].size) + " for <Size>" + size + "</Size>");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int op = data[0] % kOps;
  const int status = kStatuses[data[1] % 16];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  std::vector<std::string_view> parts = dtrain::fuzz::split_parts(rest, kPageSeparator);
  // A client answered by the input from its first part on.
  auto make_client = [&] {
    dtrain::S3Options options;
    options.endpoint = "http://127.0.0.1:9000";
    options.credentials = dtrain::static_credentials({"AKIAFUZZ", "secret", "", {}, "fuzz"});
    options.max_attempts = 1;
    return dtrain::objstore::make_s3_client(std::move(options),
                                            std::make_shared<InputTransport>(parts, status));
  };
  auto client = make_client();
  try {
    switch (op) {
      case kListPage: {
        const dtrain::ListPage page = client->list_objects_page("data", "train/", "", 1000);
        if (parts.size() == 1) check_page(page, response_from(parts[0], status).body);
        break;
      }
      case kListAll:
        client->list_objects("data", "train/", 1000);
        break;
      case kGet: {
        const dtrain::GetResult got = client->get_object("data", "train/shard-000000.tar");
        if (status != 206 && got.data != response_from(parts[0], status).body) {
          fail("a whole GET returned other bytes than the body");
        }
        break;
      }
      case kGetRanged: {
        dtrain::GetOptions range;
        range.offset = 10;
        range.length = 100;
        const dtrain::GetResult got = client->get_object("data", "train/shard-000000.tar", range);
        if (got.data.size() > 100) fail("a ranged GET returned more than the range");
        // The same answers read into the caller's memory (Note [Range into
        // place]) give the same bytes.
        char fixed[100];
        const dtrain::GetResult into =
            make_client()->get_object("data", "train/shard-000000.tar", range, fixed);
        std::vector<uint8_t> grown(7, 'x');
        const dtrain::GetResult grew =
            make_client()->get_object("data", "train/shard-000000.tar", range, grown);
        if (into.bytes != got.data.size() || std::memcmp(fixed, got.data.data(), into.bytes) != 0 ||
            std::string(grown.begin(), grown.end()) != got.data || grew.bytes != got.data.size()) {
          fail("a ranged GET into caller memory returned other bytes than the string form");
        }
        break;
      }
      case kGetIfMatch: {
        dtrain::GetOptions pinned;
        pinned.if_match = "\"ab347a5f68c8a443cfcddc633f12c24f\"";
        client->get_object("data", "train/shard-000000.tar", pinned);
        break;
      }
      case kPut:
        client->put_object("data", "ckpt/step-100.pt", "weights", {true});
        break;
      case kHead:
        client->head_object("data", "train/shard-000000.tar");
        break;
      case kDelete:
        client->delete_object("data", "train/shard-000000.tar");
        break;
    }
  } catch (const dtrain::Error& e) {
    check_one_line(e.what());
  }
  return 0;
}
