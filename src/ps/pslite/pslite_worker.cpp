// PsLiteWorker (dtrain/kvstore_pslite.h): ps-lite's KVWorker<float> on
// dtrain's node runtime (Node), with the slicer and layout of
// pslite_client.h.
//
// Note [ps-lite client requests]
// A call slices its keys by the servers' ranges and sends one message per
// non-empty slice, all with one fresh timestamp; the request is registered
// before anything is sent, so no answer can miss it. The handler thread
// files each server's answer (a server answering twice, or one not asked,
// is ignored; a dtrain server's refusal fails the call with its text) and,
// with the last one, assembles a pull's values into the caller's vectors
// under the handle's lock, unless the caller has given up waiting. A
// request no server needs (no keys) completes at once, as ps-lite runs its
// callback at once. A dead node fails every pending call (PeerLostError).
#include <map>

#include "common/strings.h"
#include "dtrain/errors.h"
#include "dtrain/kvstore_pslite.h"
#include "ps/job/dmlc_env.h"
#include "ps/pslite/pslite_client.h"
#include "ps/server/server.h"  // server_refusal
#include "ps/worker/handle_state.h"

namespace dtrain::ps {
namespace {

class PsLiteWorkerImpl : public PsLiteWorker {
 public:
  PsLiteWorkerImpl(const JobConfig& config, Millis timeout)
      : config_(config), timeout_(timeout), node_(config.node) {
    node_.set_data_handler([this](Message& msg) { on_answer(msg); });
    node_.set_failure_callback([this](const std::string& why) { fail_all(why); });
    node_.start();
    node_.barrier(kAllGroups, config_.node.connect_timeout);  // ps-lite's Start
  }

  ~PsLiteWorkerImpl() override {
    close_in_destructor(
        closed_, [this] { close(); }, node_, "ps-lite worker");
  }

  int rank() const override { return node_.rank(); }
  int num_workers() const override { return config_.node.num_workers; }
  int num_servers() const override { return config_.node.num_servers; }
  Millis timeout() const override { return timeout_; }

  KVHandle push_async(const std::vector<uint64_t>& keys, const std::vector<float>& vals,
                      const std::vector<int>& lens, int cmd) override {
    return send(keys, vals, lens, PsLiteCall{true, false, cmd}, nullptr, nullptr, "push");
  }

  KVHandle pull_async(const std::vector<uint64_t>& keys, std::vector<float>* vals,
                      std::vector<int>* lens, int cmd) override {
    if (!vals) throw InvalidArgument("ps-lite pull: the values output is null");
    return send(keys, {}, {}, PsLiteCall{false, true, cmd}, vals, lens, "pull");
  }

  KVHandle pushpull_async(const std::vector<uint64_t>& keys, const std::vector<float>& vals,
                          std::vector<float>* outs, std::vector<int>* lens, int cmd) override {
    if (!outs) throw InvalidArgument("ps-lite pushpull: the values output is null");
    if (outs->empty()) outs->resize(vals.size());
    if (outs->size() != vals.size()) {
      throw InvalidArgument(cat("ps-lite pushpull: the output holds ", outs->size(), " values for ",
                                vals.size(), " pushed; pass an empty vector"));
    }
    const std::vector<int> sent_lens = lens ? *lens : std::vector<int>{};
    return send(keys, vals, sent_lens, PsLiteCall{true, true, cmd}, outs, lens, "pushpull");
  }

  void barrier() override {
    check_open();
    node_.barrier(kWorkerGroup, timeout_);
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    node_.check_failure();
    node_.leave_worker_group();  // a plain heartbeat to ps-lite's scheduler
    node_.final_barrier();       // ps-lite's Finalize, bounded
    node_.finish();
  }

 private:
  struct Request {
    std::shared_ptr<KVHandle::State> state;
    std::vector<uint64_t> keys;  // a pull's, to check the answers against
    std::vector<PsLiteSlice> slices;
    std::vector<Message> answers;  // per slice
    std::vector<bool> answered;
    int remaining = 0;
    std::vector<float>* vals = nullptr;  // pull outputs
    std::vector<int>* lens = nullptr;
  };

  void check_open() const {
    if (closed_) throw InvalidArgument("the ps-lite worker is closed");
    node_.check_failure();
  }

  KVHandle send(const std::vector<uint64_t>& keys, const std::vector<float>& vals,
                const std::vector<int>& lens, PsLiteCall call, std::vector<float>* out,
                std::vector<int>* out_lens, const char* op) {
    check_open();
    const std::string what = cat("ps-lite ", op);
    Request req;
    req.slices = slice_by_key_ranges(keys, vals.size(), lens, num_servers(), what.c_str());
    req.state = std::make_shared<KVHandle::State>();
    req.state->what = cat(what, " of ", keys.size(), " keys (", describe(req.slices), ")");
    req.remaining = static_cast<int>(req.slices.size());
    req.answers.resize(req.slices.size());
    req.answered.assign(req.slices.size(), false);
    req.vals = out;
    req.lens = out_lens;
    if (call.pull) req.keys = keys;
    call.timestamp = node_.new_timestamp();
    std::vector<Message> messages;
    for (const PsLiteSlice& s : req.slices)
      messages.push_back(pslite_request(call, s, keys, vals, lens));
    const auto state = req.state;
    const std::vector<PsLiteSlice> slices = req.slices;
    if (slices.empty()) {
      finish(req);
      return KVHandle(state);
    }
    add_pending(mu_, pending_, call.timestamp, std::move(req), node_);
    for (size_t i = 0; i < slices.size(); ++i) {
      if (!node_.send(server_rank_to_id(slices[i].server_rank), messages[i])) {
        state->fail(cat(state->what, ": no connection to server ", slices[i].server_rank), false);
      }
    }
    return KVHandle(state);
  }

  static std::string describe(const std::vector<PsLiteSlice>& slices) {
    if (slices.empty()) return "no server";
    std::string ranks;
    for (const auto& s : slices) ranks += cat(ranks.empty() ? "" : ", ", s.server_rank);
    return cat(slices.size() == 1 ? "server " : "servers ", ranks);
  }

  // The handler thread: Note [ps-lite client requests].
  void on_answer(Message& msg) {
    const Meta& m = msg.meta;
    if (m.request || m.simple_app || !is_server_id(m.sender)) return;
    std::unique_lock<std::mutex> lock(mu_);
    auto it = pending_.find(m.timestamp);
    if (it == pending_.end()) return;  // a late answer to an abandoned request
    Request& req = it->second;
    const int rank = id_to_rank(m.sender);
    size_t i = 0;
    while (i < req.slices.size() && req.slices[i].server_rank != rank) ++i;
    if (i == req.slices.size() || req.answered[i]) return;
    if (auto refusal = server_refusal(m.body)) {
      auto state = req.state;
      pending_.erase(it);
      lock.unlock();
      state->fail(cat(state->what, ": ", *refusal), false);
      return;
    }
    req.answered[i] = true;
    req.answers[i] = std::move(msg);
    if (--req.remaining > 0) return;
    Request done = std::move(it->second);
    pending_.erase(it);
    lock.unlock();
    finish(done);
  }

  // Assembles a pull's answer into the caller's vectors and completes.
  static void finish(Request& req) {
    auto& state = req.state;
    std::string error;
    {
      std::lock_guard<std::mutex> slock(state->mu);
      if (state->done) return;
      if (req.vals && !state->abandoned) {
        error = assemble_pull(req.keys, req.slices, req.answers, req.vals, req.lens);
      }
      if (error.empty()) state->done = true;
    }
    if (!error.empty()) return state->fail(cat(state->what, ": ", error), false);
    state->cv.notify_all();
  }

  void fail_all(const std::string& why) { fail_pending(mu_, pending_, why); }

  JobConfig config_;
  Millis timeout_;
  bool closed_ = false;
  std::mutex mu_;  // guards pending_
  std::map<int, Request> pending_;
  Node node_;  // last: its threads end before the members above go
};

}  // namespace
}  // namespace dtrain::ps

namespace dtrain {

std::unique_ptr<PsLiteWorker> PsLiteWorker::create(KVStoreOptions options, const EnvLookup& env) {
  const EnvLookup lookup = env ? env : ps::process_environment();
  const ps::JobConfig config = ps::job_config_from_env(options, lookup);
  if (config.node.role != ps::Role::kWorker) {
    throw InvalidArgument(cat("PsLiteWorker::create needs DMLC_ROLE=worker, not ",
                              ps::role_name(config.node.role),
                              "; serve the scheduler and servers with dtrain::serve_ps_role "
                              "(`dtrain ps scheduler|server`) or ps-lite's own programs"));
  }
  return std::make_unique<ps::PsLiteWorkerImpl>(config, options.timeout);
}

}  // namespace dtrain
