#pragma once
// Server snapshots: what a kvstore server writes so that a replacement of
// the same rank continues the job (docs/ps.md, "Server snapshots and node
// recovery").
//
// Note [Server snapshots]
// With a snapshot directory (DMLC_PS_SNAPSHOT_DIR, `dtrain ps server
// --snapshot-dir`) server r keeps <dir>/server<r>/: settings.bin (sync mode,
// optimizer spec, compression and threshold, workers that have left, and the
// job's shape) and key<k>.bin per key it holds (the fp32 master value, the
// momentum, the number of updates applied to it and, per worker, the timestamp of
// its last merged push). A file is written when what it records changes and
// before that change is answered: a key when its dist_sync round completes,
// when a dist_async push is applied and at init; the settings when a command
// arrives. So nothing a worker has been told is ever missing from the files,
// and a round half-merged at a crash is simply not in them.
// Each file is written whole to a temporary name in the same directory and
// renamed into place (rename is atomic), so a reader sees the old or the new
// file, never part of one; the temporary names start with '.' and are
// ignored when loading. The files are not fsynced: they survive the server
// process dying (kill -9, OOM), not the machine losing power.
// A replacement server (one the scheduler gave a dead server's rank, Note
// [Node recovery] in recovery.cpp) loads every file and then serves. The
// workers re-send each request the dead server had not answered; one whose
// (worker, timestamp) is at most the key's recorded last push was merged
// before the crash and is answered with the stored value, one already
// waiting in the current round is dropped, the rest are merged as new. A
// server that starts with the job removes its rank's old files.
//
// File format (host byte order, little-endian on every supported machine):
//   "DTPSSNAP" | u32 version (1) | u32 kind (1 settings, 2 key) |
//   u64 payload bytes | payload | u64 FNV-1a-64 of the payload
// settings payload: i32 rank, i32 servers, i32 workers, u8 sync,
//   u8 has_optimizer, str optimizer spec, i32 compression, f32 threshold,
//   u32 n + n × i32 departed worker ids
// key payload: i32 key, u64 updates, u32 n + n × f32 value, u32 m + m × f32
//   momentum (m is 0 or n), u32 p + p × (i32 worker id, i32 timestamp)
// where str is u32 length + bytes. Anything else (a short file, a wrong
// magic, version or checksum, trailing bytes) is a StoreError naming the
// file.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::ps {

/// The settings file's content.
struct SnapshotSettings {
  int rank = 0;
  int num_servers = 1;
  int num_workers = 1;
  bool sync = false;
  bool has_optimizer = false;
  std::string optimizer;  // OptimizerSpec::serialize()
  int compression = 0;
  float threshold = 0.5f;
  std::set<int> departed;
};

/// One key file's content.
struct SnapshotKey {
  int key = 0;
  uint64_t updates = 0;  // rounds or async pushes applied since init
  std::vector<float> value;
  std::vector<float> momentum;
  std::map<int, int> last_push;  // worker id -> timestamp
};

/// Everything loaded from a server's directory.
struct LoadedSnapshot {
  SnapshotSettings settings;
  std::vector<SnapshotKey> keys;
};

std::string encode_snapshot(const SnapshotSettings& s);
std::string encode_snapshot(const SnapshotKey& k);

/// Writes `bytes` to `path` atomically (a temporary in the same directory,
/// then rename). Throws StoreError naming the path and the errno text.
void write_file_atomically(const std::string& path, std::string_view bytes);

/// The directory of one server's snapshot. Not thread-safe: used from the
/// server's handler thread only.
class SnapshotDir {
 public:
  /// `root`/server<rank>, created if missing. Throws StoreError naming it.
  SnapshotDir(const std::string& root, int rank);
  const std::string& path() const { return path_; }
  std::string settings_path() const;
  std::string key_path(int key) const;

  void save(const SnapshotSettings& s) const;
  void save(const SnapshotKey& k) const;
  /// Removes every snapshot file of this rank (a new job).
  void clear() const;
  /// Reads the settings and every key file. Throws StoreError naming the
  /// file when one is missing (settings), unreadable or corrupt.
  LoadedSnapshot load() const;

 private:
  std::string path_;
};

}  // namespace dtrain::ps
