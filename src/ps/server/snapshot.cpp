// Note [Server snapshots] (snapshot.h): the file format, the atomic write,
// and KVServer's side (enable_snapshots, duplicate_push, save_*).
#include "ps/server/snapshot.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/fd.h"
#include "common/strings.h"
#include "dtrain/errors.h"
#include "ps/server/server.h"

namespace dtrain::ps {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'D', 'T', 'P', 'S', 'S', 'N', 'A', 'P'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kKindSettings = 1;
constexpr uint32_t kKindKey = 2;
constexpr size_t kHeader = sizeof(kMagic) + 4 + 4 + 8;
constexpr size_t kTrailer = 8;

uint64_t fnv1a(std::string_view data) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void put_floats(std::string& out, const std::vector<float>& v) {
  put<uint32_t>(out, static_cast<uint32_t>(v.size()));
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::string frame(uint32_t kind, const std::string& payload) {
  std::string out(kMagic, sizeof(kMagic));
  put<uint32_t>(out, kVersion);
  put<uint32_t>(out, kind);
  put<uint64_t>(out, payload.size());
  out += payload;
  put<uint64_t>(out, fnv1a(payload));
  return out;
}

// Bounds-checked reads of a payload; every failure names what was cut short.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::vector<float> floats(const char* what) {
    const uint32_t n = get<uint32_t>(what);
    need(static_cast<size_t>(n) * sizeof(float), what);
    std::vector<float> v(n);
    if (n > 0) std::memcpy(v.data(), data_.data() + pos_, n * sizeof(float));
    pos_ += n * sizeof(float);
    return v;
  }
  std::string str(const char* what) {
    const uint32_t n = get<uint32_t>(what);
    need(n, what);
    std::string s(data_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  void finish() const {
    if (pos_ != data_.size()) throw InvalidArgument(cat(data_.size() - pos_, " trailing bytes"));
  }

 private:
  void need(size_t n, const char* what) const {
    if (data_.size() - pos_ < n) throw InvalidArgument(cat("it ends inside the ", what));
  }
  std::string_view data_;
  size_t pos_ = 0;
};

// The payload of a snapshot file of `kind`; InvalidArgument says why not.
std::string_view unframe(std::string_view file, uint32_t kind) {
  if (file.size() < kHeader + kTrailer) {
    throw InvalidArgument(cat("it has ", file.size(), " bytes, fewer than a header"));
  }
  if (std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0) {
    throw InvalidArgument("it does not start with DTPSSNAP");
  }
  Reader header(file.substr(sizeof(kMagic), kHeader - sizeof(kMagic)));
  const auto version = header.get<uint32_t>("header");
  const auto got_kind = header.get<uint32_t>("header");
  const auto size = header.get<uint64_t>("header");
  if (version != kVersion) throw InvalidArgument(cat("it has format version ", version));
  if (got_kind != kind) throw InvalidArgument(cat("it holds record kind ", got_kind));
  if (size != file.size() - kHeader - kTrailer) {
    throw InvalidArgument(cat("it is ", file.size(), " bytes but its header says ",
                              size + kHeader + kTrailer, " (truncated?)"));
  }
  const std::string_view payload = file.substr(kHeader, size);
  uint64_t sum = 0;
  std::memcpy(&sum, file.data() + kHeader + size, sizeof(sum));
  if (sum != fnv1a(payload)) throw InvalidArgument("its checksum does not match its content");
  return payload;
}

SnapshotSettings decode_settings(std::string_view file) {
  Reader r(unframe(file, kKindSettings));
  SnapshotSettings s;
  s.rank = r.get<int32_t>("rank");
  s.num_servers = r.get<int32_t>("server count");
  s.num_workers = r.get<int32_t>("worker count");
  s.sync = r.get<uint8_t>("sync mode") != 0;
  s.has_optimizer = r.get<uint8_t>("optimizer flag") != 0;
  s.optimizer = r.str("optimizer spec");
  s.compression = r.get<int32_t>("compression");
  s.threshold = r.get<float>("threshold");
  const auto n = r.get<uint32_t>("departed workers");
  for (uint32_t i = 0; i < n; ++i) s.departed.insert(r.get<int32_t>("departed workers"));
  r.finish();
  return s;
}

SnapshotKey decode_key(std::string_view file) {
  Reader r(unframe(file, kKindKey));
  SnapshotKey k;
  k.key = r.get<int32_t>("key");
  k.updates = r.get<uint64_t>("update count");
  k.value = r.floats("value");
  k.momentum = r.floats("momentum");
  if (!k.momentum.empty() && k.momentum.size() != k.value.size()) {
    throw InvalidArgument(
        cat("its momentum has ", k.momentum.size(), " values for ", k.value.size(), " weights"));
  }
  const auto n = r.get<uint32_t>("push timestamps");
  for (uint32_t i = 0; i < n; ++i) {
    const int worker = r.get<int32_t>("push timestamps");
    k.last_push[worker] = r.get<int32_t>("push timestamps");
  }
  r.finish();
  return k;
}

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw StoreError(cat("cannot read snapshot file ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

[[noreturn]] void corrupt(const std::string& path, const std::string& why) {
  throw StoreError(cat("snapshot file ", path, " is corrupt: ", why,
                       "; the server cannot continue from it (restart the whole job)"));
}

}  // namespace

std::string encode_snapshot(const SnapshotSettings& s) {
  std::string p;
  put<int32_t>(p, s.rank);
  put<int32_t>(p, s.num_servers);
  put<int32_t>(p, s.num_workers);
  put<uint8_t>(p, s.sync ? 1 : 0);
  put<uint8_t>(p, s.has_optimizer ? 1 : 0);
  put<uint32_t>(p, static_cast<uint32_t>(s.optimizer.size()));
  p += s.optimizer;
  put<int32_t>(p, s.compression);
  put<float>(p, s.threshold);
  put<uint32_t>(p, static_cast<uint32_t>(s.departed.size()));
  for (int w : s.departed) put<int32_t>(p, w);
  return frame(kKindSettings, p);
}

std::string encode_snapshot(const SnapshotKey& k) {
  std::string p;
  p.reserve(32 + 4 * (k.value.size() + k.momentum.size()) + 8 * k.last_push.size());
  put<int32_t>(p, k.key);
  put<uint64_t>(p, k.updates);
  put_floats(p, k.value);
  put_floats(p, k.momentum);
  put<uint32_t>(p, static_cast<uint32_t>(k.last_push.size()));
  for (const auto& [worker, ts] : k.last_push) {
    put<int32_t>(p, worker);
    put<int32_t>(p, ts);
  }
  return frame(kKindKey, p);
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  const fs::path target(path);
  const std::string tmp =
      (target.parent_path() / cat(".", target.filename().string(), ".tmp.", ::getpid())).string();
  detail::Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  bool ok = fd.valid() && detail::write_all(fd.get(), bytes);
  ok = fd.valid() && fd.close() == 0 && ok;
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw StoreError(cat("cannot write snapshot file ", path, ": ", why,
                         " (is the disk full or the snapshot directory read-only?)"));
  }
}

SnapshotDir::SnapshotDir(const std::string& root, int rank)
    : path_((fs::path(root) / cat("server", rank)).string()) {
  std::error_code ec;
  fs::create_directories(path_, ec);
  if (ec) {
    throw StoreError(cat("cannot create the snapshot directory ", path_, ": ", ec.message(),
                         "; check KVStoreOptions::snapshot_dir / DMLC_PS_SNAPSHOT_DIR"));
  }
}

std::string SnapshotDir::settings_path() const {
  return (fs::path(path_) / "settings.bin").string();
}

std::string SnapshotDir::key_path(int key) const {
  return (fs::path(path_) / cat("key", key, ".bin")).string();
}

void SnapshotDir::save(const SnapshotSettings& s) const {
  write_file_atomically(settings_path(), encode_snapshot(s));
}

void SnapshotDir::save(const SnapshotKey& k) const {
  write_file_atomically(key_path(k.key), encode_snapshot(k));
}

void SnapshotDir::clear() const {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(path_, ec)) {
    const std::string name = entry.path().filename().string();
    const bool ours = name == "settings.bin" || (name.rfind("key", 0) == 0) ||
                      (name.rfind(".", 0) == 0 && name.find(".tmp.") != std::string::npos);
    if (ours && entry.is_regular_file()) fs::remove(entry.path(), ec);
  }
}

LoadedSnapshot SnapshotDir::load() const {
  LoadedSnapshot out;
  const std::string settings = settings_path();
  if (!fs::exists(settings)) {
    throw StoreError(cat(
        "snapshot file ", settings,
        " does not exist: no snapshot of this server rank was written; is "
        "KVStoreOptions::snapshot_dir / DMLC_PS_SNAPSHOT_DIR the directory the dead server used?"));
  }
  try {
    out.settings = decode_settings(read_whole(settings));
  } catch (const InvalidArgument& e) {
    corrupt(settings, e.what());
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(path_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("key", 0) != 0 || name.size() < 8 ||
        name.compare(name.size() - 4, 4, ".bin") != 0) {
      continue;
    }
    const std::string file = entry.path().string();
    try {
      SnapshotKey k = decode_key(read_whole(file));
      if (name != cat("key", k.key, ".bin")) {
        throw InvalidArgument(cat("it holds key ", k.key));
      }
      out.keys.push_back(std::move(k));
    } catch (const InvalidArgument& e) {
      corrupt(file, e.what());
    }
  }
  if (ec) throw StoreError(cat("cannot list the snapshot directory ", path_, ": ", ec.message()));
  return out;
}

// ---- KVServer's side -------------------------------------------------------

KVServer::~KVServer() = default;

void KVServer::enable_snapshots(const std::string& dir, bool reload) {
  auto snapshot = std::make_unique<SnapshotDir>(dir, options_.rank);
  if (!reload) {
    snapshot->clear();
    snapshot_ = std::move(snapshot);
    save_settings();
    return;
  }
  LoadedSnapshot loaded = snapshot->load();
  const SnapshotSettings& s = loaded.settings;
  if (s.rank != options_.rank || s.num_servers != options_.num_servers ||
      s.num_workers != options_.num_workers) {
    throw StoreError(cat("snapshot file ", snapshot->settings_path(), " is of server ", s.rank,
                         " of ", s.num_servers, " with ", s.num_workers,
                         " workers, not of this job's server ", options_.rank, " of ",
                         options_.num_servers, " with ", options_.num_workers,
                         " workers; point KVStoreOptions::snapshot_dir at this job's directory"));
  }
  sync_ = s.sync;
  has_optimizer_ = s.has_optimizer;
  if (has_optimizer_) {
    try {
      optimizer_ = OptimizerSpec::parse(s.optimizer);
    } catch (const InvalidArgument& e) {
      corrupt(snapshot->settings_path(), e.what());
    }
  }
  compression_ = s.compression;
  threshold_ = s.threshold;
  departed_ = s.departed;
  for (auto& k : loaded.keys) {
    store_[k.key] = std::make_shared<std::vector<float>>(std::move(k.value));
    if (!k.momentum.empty()) momentum_[k.key] = std::move(k.momentum);
    last_push_[k.key] = std::move(k.last_push);
    updates_applied_[k.key] = k.updates;
  }
  snapshot_ = std::move(snapshot);
}

bool KVServer::duplicate_push(const Meta& m, int key, uint64_t ps_key, int dtype) {
  auto round = updates_.find(key);
  if (round != updates_.end()) {
    for (const auto& p : round->second.requests) {
      // Waiting in this round already: that copy is answered when it completes.
      if (p.meta.sender == m.sender && p.meta.timestamp == m.timestamp) return true;
    }
  }
  auto& last = last_push_[key];
  auto it = last.find(m.sender);
  if (it != last.end() && m.timestamp <= it->second) {
    // Merged before a crash, answered or not: answer with what it produced.
    if (store_.count(key)) respond(m, ps_key, dtype, m.pull);
    return true;
  }
  last[m.sender] = m.timestamp;
  return false;
}

void KVServer::save_key(int key) {
  if (!snapshot_) return;
  SnapshotKey k;
  k.key = key;
  k.updates = updates_applied_[key];
  k.value = *store_[key];
  if (auto it = momentum_.find(key); it != momentum_.end()) k.momentum = it->second;
  if (auto it = last_push_.find(key); it != last_push_.end()) k.last_push = it->second;
  snapshot_->save(k);
}

void KVServer::save_settings() {
  if (!snapshot_) return;
  SnapshotSettings s;
  s.rank = options_.rank;
  s.num_servers = options_.num_servers;
  s.num_workers = options_.num_workers;
  s.sync = sync_;
  s.has_optimizer = has_optimizer_;
  if (has_optimizer_) s.optimizer = optimizer_.serialize();
  s.compression = compression_;
  s.threshold = threshold_;
  s.departed = departed_;
  snapshot_->save(s);
}

}  // namespace dtrain::ps
