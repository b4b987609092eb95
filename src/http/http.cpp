#include "http/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/strings.h"
#include "dtrain/errors.h"

namespace dtrain::http {

std::string HttpResponse::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

namespace {

// Note [One curl_global_init]
// curl_global_init is not thread-safe in 7.88 and must run before the first
// easy handle; a function-local static runs it once, whichever thread comes
// first. It is never undone (curl_global_cleanup at exit would race with
// other static destructors still holding handles).
void init_curl_once() {
  static const CURLcode code = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (code != CURLE_OK) throw Error(cat("curl_global_init failed: ", curl_easy_strerror(code)));
}

// Note [Body into place]
// A GET's body is the one large thing a request moves. Received into
// HttpResponse::body and then copied to where it is used (a sample's bytes,
// a range of a shard), each body cost a second allocation of its size, the
// zeroing of the destination and a second copy (the profile of an S3
// epoch: memset and memmove of every 88 KB image, malloc's consolidation),
// on the core the decode thread uses. With HttpRequest::body_sink, a 2xx
// answer's body goes from libcurl's receive buffer straight to the caller's
// memory; error bodies (S3's XML) still come back in HttpResponse::body,
// where the callers parse them. The status comes from the status line; the
// sink starts at the blank line that ends the headers, when Content-Length
// is known, and again at each new answer (a retry is a new perform()).
struct Receiving {
  HttpResponse* response;
  BodySink* sink;
  int status = 0;
  int64_t content_length = -1;
  bool to_sink = false;
};

size_t write_body(char* data, size_t size, size_t count, void* user) {
  auto* r = static_cast<Receiving*>(user);
  if (r->to_sink) {
    r->sink->append(data, size * count);
  } else {
    r->response->body.append(data, size * count);
  }
  return size * count;
}

constexpr unsigned long long kMaxReserve = 64ull << 20;  // Note [Body buffer]

// Note [Receive buffer]
// libcurl reads a socket into a buffer of 16 KB by default, so an 88 KB
// image that has arrived whole still took six reads and about ten polls
// (strace of 3,000 S3 GETs: 18,014 recvfrom and 30,224 poll calls); with
// 256 KB it takes one read and about five polls (3,308 and 15,784). Each
// pooled handle keeps its buffer (64 idle handles at most: 16 MB).
constexpr long kReceiveBuffer = 256L << 10;

size_t write_header(char* data, size_t size, size_t count, void* user) {
  auto* r = static_cast<Receiving*>(user);
  HttpResponse* response = r->response;
  std::string_view line(data, size * count);
  if (line.rfind("HTTP/", 0) == 0) {
    response->headers.clear();  // a new response (after 100 Continue or a redirect)
    response->body.clear();
    r->to_sink = false;
    r->content_length = -1;
    const auto space = line.find(' ');
    r->status = space == std::string_view::npos
                    ? 0
                    : std::atoi(std::string(line.substr(space + 1, 3)).c_str());
    return size * count;
  }
  if (line == "\r\n" || line == "\n") {  // the end of the headers: the body follows
    if (r->sink && r->status / 100 == 2) {
      r->sink->start(r->status, r->content_length);
      r->to_sink = true;
    }
    return size * count;
  }
  auto colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
      value.remove_suffix(1);
    // Note [Body buffer]: a body of known length is received into one
    // allocation, not grown by doubling (copies, and page faults for each
    // new block above malloc's mmap threshold: a quarter of the CPU that a
    // 100 KB S3 GET costs went there). Bounded, so a lying header cannot
    // make it allocate much before any byte arrives (a reserve that a HEAD
    // never fills touches no page). A sink is told the length and sizes
    // its own buffer.
    if (name == "content-length") {
      const unsigned long long n = std::strtoull(std::string(value).c_str(), nullptr, 10);
      r->content_length = static_cast<int64_t>(std::min<unsigned long long>(n, INT64_MAX));
      if (!r->sink && n > 0 && n <= kMaxReserve) response->body.reserve(static_cast<size_t>(n));
    }
    response->headers[name] = std::string(value);
  }
  return size * count;
}

struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

class CurlTransport : public HttpTransport {
 public:
  CurlTransport() { init_curl_once(); }
  ~CurlTransport() override {
    for (CURL* handle : idle_) curl_easy_cleanup(handle);
  }

  HttpResponse perform(const HttpRequest& request) override {
    CURL* handle = acquire();
    try {
      HttpResponse response = perform_with(handle, request);
      release(handle);
      return response;
    } catch (...) {
      curl_easy_cleanup(handle);  // its connection may be half used: do not pool it
      throw;
    }
  }

 private:
  // Bounded pool: handles keep their connections (and TLS sessions) alive
  // between requests.
  static constexpr size_t kMaxIdle = 64;

  CURL* acquire() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        CURL* handle = idle_.back();
        idle_.pop_back();
        return handle;
      }
    }
    CURL* handle = curl_easy_init();
    if (!handle) throw TransportError("curl_easy_init failed", false);
    return handle;
  }

  void release(CURL* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (idle_.size() < kMaxIdle) {
      idle_.push_back(handle);
    } else {
      curl_easy_cleanup(handle);
    }
  }

  struct Progress {
    std::chrono::milliseconds idle_limit;
    std::chrono::steady_clock::time_point last_moved;
    curl_off_t moved = 0;
    bool stalled = false;
  };

  // Note [Idle, not total, deadline]
  static int on_progress(void* data, curl_off_t, curl_off_t down, curl_off_t, curl_off_t up) {
    auto* p = static_cast<Progress*>(data);
    const auto now = std::chrono::steady_clock::now();
    if (down + up != p->moved) {
      p->moved = down + up;
      p->last_moved = now;
      return 0;
    }
    if (now - p->last_moved < p->idle_limit) return 0;
    p->stalled = true;
    return 1;  // aborts the transfer: CURLE_ABORTED_BY_CALLBACK
  }

  static HttpResponse perform_with(CURL* handle, const HttpRequest& request) {
    curl_easy_reset(handle);  // keeps the connection cache
    HttpResponse response;
    std::unique_ptr<curl_slist, SlistDeleter> headers;
    auto append = [&headers](const std::string& line) {
      curl_slist* head = curl_slist_append(headers.get(), line.c_str());
      if (!head) throw TransportError("curl_slist_append: out of memory", false);
      headers.release();  // `head` is the same list, one item longer
      headers.reset(head);
    };
    bool has_content_type = false;
    for (const auto& [name, value] : request.headers) {
      append(name + ": " + value);
      std::string lower = name;
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      has_content_type |= lower == "content-type";
    }
    const bool sends_body = request.method == "PUT" || request.method == "POST";
    // No "Expect: 100-continue" round trip; no form content type made up by curl.
    append("Expect:");
    if (sends_body && !has_content_type) append("Content-Type:");

    curl_easy_setopt(handle, CURLOPT_URL, request.url.c_str());
    curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers.get());
    // Note [Idle, not total, deadline]: an attempt fails when no byte has
    // moved either way for request.timeout, so that a multi-gigabyte body
    // (a checkpoint) is not cut off by a deadline sized for small requests,
    // while a stalled peer still ends the attempt within about a second of
    // it (libcurl calls the progress function about once a second when
    // idle). A caller whose requests are all small and must end in bounded
    // time (the etcd client) also sets request.total_timeout: libcurl's own
    // CURLOPT_TIMEOUT_MS, which ends the attempt at that instant.
    Progress progress{request.timeout, std::chrono::steady_clock::now()};
    curl_easy_setopt(handle, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(handle, CURLOPT_XFERINFODATA, &progress);
    curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(request.connect_timeout.count()));
    if (request.total_timeout.count() > 0)
      curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS,
                       static_cast<long>(request.total_timeout.count()));
    // An empty proxy turns off libcurl's reading of the proxy variables.
    if (!request.use_proxy) curl_easy_setopt(handle, CURLOPT_PROXY, "");
    curl_easy_setopt(handle, CURLOPT_FOLLOWLOCATION, 0L);
    Receiving receiving{&response, request.body_sink};
    curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, write_body);
    curl_easy_setopt(handle, CURLOPT_WRITEDATA, &receiving);
    curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, write_header);
    curl_easy_setopt(handle, CURLOPT_HEADERDATA, &receiving);
    curl_easy_setopt(handle, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!request.ca_bundle.empty())
      curl_easy_setopt(handle, CURLOPT_CAINFO, request.ca_bundle.c_str());
    if (request.method == "HEAD") {
      curl_easy_setopt(handle, CURLOPT_NOBODY, 1L);
    } else if (sends_body) {
      curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE,
                       static_cast<curl_off_t>(request.body.size()));
      curl_easy_setopt(handle, CURLOPT_POSTFIELDS, request.body.empty() ? "" : request.body.data());
      curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    } else if (request.method != "GET") {
      curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    }
    // Note [Receive buffer]: a body that has arrived is read in one call.
    curl_easy_setopt(handle, CURLOPT_BUFFERSIZE, kReceiveBuffer);
    char error[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, error);
    CURLcode code = curl_easy_perform(handle);
    curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, nullptr);
    curl_easy_setopt(handle, CURLOPT_HTTPHEADER, nullptr);
    if (code == CURLE_ABORTED_BY_CALLBACK && progress.stalled) {
      std::string reason = cat("no byte moved for ", request.timeout.count(), " ms");
      throw TransportError(cat(request.method, " ", request.url, ": ", reason), true, reason);
    }
    if (code != CURLE_OK) {
      std::string reason = error[0] ? error : curl_easy_strerror(code);
      const bool unreachable = code == CURLE_COULDNT_RESOLVE_HOST ||
                               code == CURLE_COULDNT_RESOLVE_PROXY || code == CURLE_COULDNT_CONNECT;
      // libcurl 7.88 words a refused connection "Couldn't connect to
      // server"; the system's word for it says which case it was.
      long os_errno = 0;
      if (code == CURLE_COULDNT_CONNECT &&
          curl_easy_getinfo(handle, CURLINFO_OS_ERRNO, &os_errno) == CURLE_OK && os_errno != 0)
        reason += cat(" (", std::strerror(static_cast<int>(os_errno)), ")");
      throw TransportError(cat(request.method, " ", request.url, ": ", reason),
                           code == CURLE_OPERATION_TIMEDOUT, reason, unreachable);
    }
    long status = 0;
    curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
    response.status = static_cast<int>(status);
    return response;
  }

  std::mutex mutex_;
  std::vector<CURL*> idle_;
};

}  // namespace

std::shared_ptr<HttpTransport> curl_transport() { return std::make_shared<CurlTransport>(); }

}  // namespace dtrain::http
