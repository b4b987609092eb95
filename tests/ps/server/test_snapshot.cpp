// Server snapshots (Note [Server snapshots], src/ps/server/snapshot.h): the file
// format, corrupt files, the atomic rewrite, and a replacement server
// continuing a dist_sync round from the files, driven with messages.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "dtrain/errors.h"
#include "ps/job/dmlc_env.h"
#include "ps/server/server.h"
#include "ps/server/snapshot.h"

namespace dtrain::ps {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  TempDir() {
    static int serial = 0;
    path = ::testing::TempDir() + "ps_snapshot_" + std::to_string(::getpid()) + "_" +
           std::to_string(serial++);
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
};

SnapshotKey sample_key(int key, size_t n) {
  SnapshotKey k;
  k.key = key;
  k.updates = 7;
  for (size_t i = 0; i < n; ++i) {
    k.value.push_back(0.5f * static_cast<float>(i));
    k.momentum.push_back(-0.25f * static_cast<float>(i));
  }
  k.last_push = {{9, 41}, {11, 40}};
  return k;
}

SnapshotSettings sample_settings() {
  SnapshotSettings s;
  s.rank = 1;
  s.num_servers = 2;
  s.num_workers = 3;
  s.sync = true;
  s.has_optimizer = true;
  s.optimizer = "sgd lr=0.10000000000000001 momentum=0.90000000000000002 wd=0 rescale_grad=1";
  s.compression = 2;
  s.threshold = 0.75f;
  s.departed = {13};
  return s;
}

TEST(PsSnapshot, TheFilesRoundTripEverySettingAndKeyField) {
  TempDir dir;
  SnapshotDir snap(dir.path, 1);
  snap.save(sample_settings());
  snap.save(sample_key(3, 5));
  snap.save(sample_key(12, 0));
  const LoadedSnapshot got = snap.load();
  const SnapshotSettings want = sample_settings();
  EXPECT_EQ(got.settings.rank, want.rank);
  EXPECT_EQ(got.settings.num_servers, want.num_servers);
  EXPECT_EQ(got.settings.num_workers, want.num_workers);
  EXPECT_EQ(got.settings.sync, want.sync);
  EXPECT_EQ(got.settings.has_optimizer, want.has_optimizer);
  EXPECT_EQ(got.settings.optimizer, want.optimizer);
  EXPECT_EQ(got.settings.compression, want.compression);
  EXPECT_EQ(got.settings.threshold, want.threshold);
  EXPECT_EQ(got.settings.departed, want.departed);
  ASSERT_EQ(got.keys.size(), 2u);
  for (const auto& k : got.keys) {
    const SnapshotKey w = sample_key(k.key, k.key == 3 ? 5 : 0);
    EXPECT_EQ(k.updates, w.updates);
    EXPECT_EQ(k.value, w.value);
    EXPECT_EQ(k.momentum, w.momentum);
    EXPECT_EQ(k.last_push, w.last_push);
  }
  EXPECT_EQ(snap.path(), dir.path + "/server1");
}

// Loads after `damage` changed key3.bin; returns the error text.
std::string load_error(const std::function<void(const std::string&)>& damage) {
  TempDir dir;
  SnapshotDir snap(dir.path, 0);
  snap.save(sample_settings());
  snap.save(sample_key(3, 100));
  damage(snap.key_path(3));
  try {
    snap.load();
  } catch (const StoreError& e) {
    return e.what();
  }
  return "no error";
}

TEST(PsSnapshot, ATruncatedOrAlteredFileIsOneLineNamingTheFile) {
  const auto truncated = load_error([](const std::string& f) { fs::resize_file(f, 300); });
  const auto flipped = load_error([](const std::string& f) {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(100);
    io.put('\x7f');
  });
  const auto empty = load_error([](const std::string& f) { fs::resize_file(f, 0); });
  for (const auto& [text, cause] :
       {std::pair{truncated, "truncated"}, std::pair{flipped, "checksum does not match"},
        std::pair{empty, "fewer than a header"}}) {
    EXPECT_NE(text.find("snapshot file "), std::string::npos) << text;
    EXPECT_NE(text.find("/server0/key3.bin is corrupt: "), std::string::npos) << text;
    EXPECT_NE(text.find(cause), std::string::npos) << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  }
}

TEST(PsSnapshot, AMissingSettingsFileIsOneLineNamingIt) {
  TempDir dir;
  SnapshotDir snap(dir.path, 2);
  try {
    snap.load();
    FAIL() << "loaded an empty directory";
  } catch (const StoreError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find(snap.settings_path() + " does not exist"), std::string::npos) << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  }
}

TEST(PsSnapshot, AReaderNeverSeesAPartialFileWhileTheKeyIsRewritten) {
  TempDir dir;
  SnapshotDir snap(dir.path, 0);
  snap.save(sample_settings());
  snap.save(sample_key(3, 10));
  std::atomic<bool> stop{false};
  std::atomic<int> loads{0};
  std::atomic<bool> failed{false};
  std::string failure;  // written by the reader before `failed`
  std::thread reader([&] {
    while (!stop) {
      try {
        const LoadedSnapshot got = snap.load();
        if (got.keys.size() != 1) {
          failure = "key file missing during a rewrite";
          failed = true;
          return;
        }
        ++loads;
      } catch (const std::exception& e) {
        failure = e.what();
        failed = true;
        return;
      }
    }
  });
  // Sizes from 10 to 100,000 values: a reader of a file being written in
  // place would see a short or mixed one.
  for (int i = 0; i < 100 && !failed; ++i) {
    snap.save(sample_key(3, i % 2 ? 100000 : 10 + i));
  }
  stop = true;
  reader.join();
  EXPECT_EQ(failure, "");
  EXPECT_GT(loads.load(), 0);
  for (const auto& entry : fs::directory_iterator(snap.path())) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "settings.bin" || name == "key3.bin") << "left behind: " << name;
  }
}

// A worker's request to the server under test.
Message push(int worker, int ts, int key, const std::vector<float>& vals, bool pull) {
  Message m;
  m.meta.sender = worker_rank_to_id(worker);
  m.meta.request = true;
  m.meta.push = true;
  m.meta.pull = pull;
  m.meta.app_id = 0;
  m.meta.customer_id = 0;
  m.meta.timestamp = ts;
  m.meta.head = data_command(0, kMshadowFloat32);
  const uint64_t k = static_cast<uint64_t>(key);
  m.add_data(&k, 1, DataType::kUint64);
  m.add_data(reinterpret_cast<const char*>(vals.data()), vals.size() * 4, DataType::kChar);
  const int32_t len = static_cast<int32_t>(vals.size() * 4);
  m.add_data(&len, 1, DataType::kInt32);
  return m;
}

Message command(ServerCommand cmd, int ts, const std::string& body = "") {
  Message m;
  m.meta.sender = worker_rank_to_id(0);
  m.meta.request = true;
  m.meta.simple_app = true;
  m.meta.head = static_cast<int>(cmd);
  m.meta.body = body;
  m.meta.timestamp = ts;
  return m;
}

struct Reply {
  int to;
  Message msg;
};

std::vector<float> values(const Message& m) {
  std::vector<float> v(m.data.at(1).size() / 4);
  std::memcpy(v.data(), m.data[1].data(), m.data[1].size());
  return v;
}

TEST(PsSnapshot, AReplacementServerEndsTheRoundsAsTheServerItReplacesWouldHave) {
  TempDir dir;
  const OptimizerSpec spec = OptimizerSpec::parse("sgd lr=0.5 momentum=0.9 wd=0.1");
  // The reference: one server that never dies.
  std::vector<Reply> ref_out;
  KVServer ref({0, 1, 2}, [&](int to, const Message& m) { ref_out.push_back({to, m}); });
  // The victim writes snapshots, dies after worker 0's push of round 2, and
  // its replacement loads them.
  std::vector<Reply> out;
  auto victim = std::make_unique<KVServer>(ServerOptions{0, 1, 2}, [&](int to, const Message& m) {
    out.push_back({to, m});
  });
  victim->enable_snapshots(dir.path, false);
  for (KVServer* s : {&ref, victim.get()}) {
    s->handle(command(ServerCommand::kSyncMode, 1));
    s->handle(command(ServerCommand::kController, 2, spec.serialize()));
    s->handle(push(0, 3, 5, {1.0f, 2.0f, 3.0f}, false));  // init
    s->handle(push(0, 4, 5, {0.5f, 0.5f, 0.5f}, true));   // round 1
    s->handle(push(1, 4, 5, {1.5f, -0.5f, 2.0f}, true));
    s->handle(push(0, 5, 5, {0.25f, 1.0f, -1.0f}, true));  // round 2: worker 0 only
  }
  victim.reset();
  out.clear();
  KVServer replacement({0, 1, 2}, [&](int to, const Message& m) { out.push_back({to, m}); });
  replacement.enable_snapshots(dir.path, true);
  // Worker 1's round-1 push again (merged before the crash): answered, not counted.
  replacement.handle(push(1, 4, 5, {1.5f, -0.5f, 2.0f}, true));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(values(out[0].msg), values(ref_out[3].msg)) << "the round-1 value";
  // Worker 0's unanswered round-2 push, re-sent twice: counted once.
  replacement.handle(push(0, 5, 5, {0.25f, 1.0f, -1.0f}, true));
  replacement.handle(push(0, 5, 5, {0.25f, 1.0f, -1.0f}, true));
  EXPECT_EQ(out.size(), 1u);
  // Worker 1's round-2 push completes the round on both servers alike.
  ref.handle(push(1, 6, 5, {-0.75f, 0.5f, 4.0f}, true));
  replacement.handle(push(1, 6, 5, {-0.75f, 0.5f, 4.0f}, true));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(values(out[1].msg), values(ref_out.back().msg));
  EXPECT_EQ(values(out[2].msg), values(ref_out.back().msg));
  EXPECT_EQ(*replacement.stored(5), *ref.stored(5));
  // Round 3 uses the restored momentum: still equal.
  for (KVServer* s : {&ref, &replacement}) {
    s->handle(push(0, 7, 5, {1.0f, 1.0f, 1.0f}, false));
    s->handle(push(1, 7, 5, {1.0f, 1.0f, 1.0f}, false));
  }
  EXPECT_EQ(*replacement.stored(5), *ref.stored(5));
  EXPECT_TRUE(replacement.sync_mode());
}

TEST(PsSnapshot, ASnapshotOfAnotherJobIsRefusedNamingTheFile) {
  TempDir dir;
  KVServer first({0, 1, 2}, [](int, const Message&) {});
  first.enable_snapshots(dir.path, false);
  KVServer other({0, 1, 3}, [](int, const Message&) {});
  try {
    other.enable_snapshots(dir.path, true);
    FAIL() << "loaded a 2-worker job's snapshot into a 3-worker job";
  } catch (const StoreError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("/server0/settings.bin is of server 0 of 1 with 2 workers"),
              std::string::npos)
        << text;
  }
}

TEST(PsSnapshot, DmlcPsSnapshotDirTurnsRecoveryOnAndPsRecoveryTimeoutBoundsIt) {
  std::map<std::string, std::string> env = {{"DMLC_ROLE", "server"},
                                            {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                                            {"DMLC_PS_ROOT_PORT", "9091"},
                                            {"DMLC_NUM_SERVER", "2"},
                                            {"DMLC_NUM_WORKER", "3"}};
  auto lookup = [&env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  EXPECT_FALSE(job_config_from_env(KVStoreOptions{}, lookup).node.recovery());
  env["DMLC_PS_SNAPSHOT_DIR"] = "/var/tmp/job42";
  env["PS_RECOVERY_TIMEOUT"] = "7";
  const JobConfig c = job_config_from_env(KVStoreOptions{}, lookup);
  EXPECT_TRUE(c.node.recovery());
  EXPECT_EQ(c.node.snapshot_dir, "/var/tmp/job42");
  EXPECT_EQ(c.node.recovery_timeout, std::chrono::seconds(7));
  env["PS_RECOVERY_TIMEOUT"] = "soon";
  try {
    job_config_from_env(KVStoreOptions{}, lookup);
    FAIL() << "accepted PS_RECOVERY_TIMEOUT=soon";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "environment variable PS_RECOVERY_TIMEOUT='soon' is not an integer");
  }
}

}  // namespace
}  // namespace dtrain::ps
