// LiveGroup: generations, the commit agreement, logical ranks.
//
// Note [Logical ranks]
// The job has W0 logical ranks; live member i of L runs {r : r mod L == i}.
// Each logical rank's micro-batch is the one rank r of a W0-rank job reads
// at that step, its dropout draws come from the default CPU generator and,
// when the module is on a GPU, that GPU's default generator, each seeded with
// mix(seed, r, step) (restored to the member's own state afterwards), so a
// redone step draws the same numbers and no generator state has to survive
// its member. Gradients of a member's logical ranks
// accumulate under no_sync() and the reducer divides by W0
// (DdpOptions::gradient_divisor), so the allreduced gradient is
// sum_r g_r / W0 whatever L is: the failure-free W0-rank average, up to the
// order of the fp32 additions (docs/live_recovery.md bounds it).
//
// BatchNorm follows DDP's semantics (buffers broadcast from rank 0 before
// every forward, so after a step the buffers of rank 0's forward win):
// every logical rank's forward starts from the step's buffers (restored
// before each), the member holding logical rank 0 (always live member 0,
// as 0 mod L == 0) keeps the buffers its logical rank 0 produced, and
// run_logical() ends with a broadcast of the buffers from member 0. So at a
// commit every member holds logical rank 0's buffers, and on an abort
// every member restores the step's starting buffers: buffers are committed
// state like the parameters, never taken from a fixed rank 0 that may be
// gone.
//
// Note [Commit agreement]
// After its backward each member adds 1 to gen/<g>/step/<s>/done; the
// member whose add reaches the generation's size proposes "commit" (or
// "commit+join" when joiners registered since the generation formed) with
// compareSet(decision, "", value); a member that failed the step, or whose
// detector declares a member of the generation dead while it waits,
// proposes "abort" the same way. compareSet returns the value that won, and
// everyone obeys it, so either every member steps or none does. A member
// that fails its step (its own error, report_failure) proposes "abort" at
// once, not at should_commit(): the others may be waiting in a collective
// it will never join, and their sliced waits (wait_interrupt) give up as
// soon as the step's decision reads "abort".
//
// Note [Abandoned groups]
// Gloo cannot abort a collective, so a generation that lost a member is
// abandoned: its waits were given up (InitOptions::wait_interrupt), its
// DataParallel is destroyed (removing its autograd hooks; the bucket memory
// stays alive as long as a c10d work in the group's queue holds it) and its
// ProcessGroup is kept in a list that is never used again, so no Gloo
// thread ever writes into freed memory. Parameter gradients are reset
// because with gradient_as_bucket_view they alias the old buckets. At most
// max_abandoned_groups (8) are kept; one more fences the member ("restart
// it"), bounding the threads and memory a long run can pile up. At
// destruction the abandoned groups are leaked on purpose: destroying a
// ProcessGroupGloo joins its worker threads, which may be blocked forever
// on a stopped peer; the process's exit reclaims them. Under
// LeakSanitizer the leaked list is marked as intended (__lsan_ignore_object,
// a weak symbol that only the sanitizer runtime defines), so the unit tests
// and examples under scripts/sanitize.sh report only leaks nobody meant.
//
// Note [Interrupt thread]
// interrupt() runs on whichever thread waits for a collective: the training
// thread, or (CUDA) autograd's thread finishing backward while the training
// thread is blocked inside backward(). Either way the training thread is not
// using the Impl or the main store connection at the same time, so the
// interrupt reads them without a lock; the detector's state it reads is
// behind the detector's own mutex.
//
// Note [SIGPIPE] (src/common/net.cpp): the first LiveGroup of a process
// ignores SIGPIPE, so that a survivor's write to a vanished peer fails the
// collective instead of ending the survivor; it stays ignored after the
// LiveGroup, whose abandoned groups' threads are still alive (Note
// [Abandoned groups]).
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/utils.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>

#include <algorithm>
#include <cstdlib>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "common/net.h"
#include "common/random.h"
#include "common/strings.h"
#include "dtrain/live.h"
#include "live/detector.h"
#include "live/generation.h"
#include "live/keys.h"
#include "live/state_transfer.h"

#if DTRAIN_TORCH_VERSION >= 200  // dtrain/compat.h, through dtrain/live.h
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

// LeakSanitizer's (sanitizer/lsan_interface.h), null unless its runtime is
// linked in (Note [Abandoned groups]).
extern "C" void __lsan_ignore_object(const void* p) __attribute__((weak));

namespace dtrain {
namespace live {
std::string default_member_id();
}

namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t);
}

std::string get_string(c10d::Store& store, const std::string& key) {
  const std::vector<uint8_t> v = store.get(key);
  return std::string(v.begin(), v.end());
}

std::shared_ptr<torch::nn::Module> borrowed(torch::nn::Module& m) {
  return std::shared_ptr<torch::nn::Module>(std::shared_ptr<void>(), &m);
}

constexpr const char* kCommit = "commit";
constexpr const char* kCommitJoin = "commit+join";
constexpr const char* kAbort = "abort";

}  // namespace

struct LiveGroup::Impl {
  LiveOptions opt;
  live::Keys keys;
  std::function<StorePtr()> connect;
  std::unique_ptr<TcpStoreServer> server;
  StorePtr store;
  std::unique_ptr<live::Detector> detector;
  int w0 = 1;

  live::Registered registered;
  torch::nn::Module* ddp_module = nullptr;
  DdpOptions ddp_options;

  int64_t gen = -1;
  std::vector<std::string> members;
  int64_t joined_upto = 0;
  ProcessGroup pg;
  std::unique_ptr<DataParallel> ddp;
  bool has_state = true;
  bool need_new_gen = true;
  bool gen_clean = true;
  bool gen_committed = false;  // a step of generation `gen` committed
  int64_t step = 0;
  LiveStep view;

  bool begun = false;
  bool step_failed = false;
  std::string step_failure;
  std::vector<at::Tensor> start_buffers;
  std::optional<Clock::time_point> trigger_at;  // failure seen / join decided
  bool join_decided = false;

  std::vector<ProcessGroup> abandoned;
  std::vector<LostMember> lost;
  std::string fenced;

  // ---- fencing and the wait interrupt -------------------------------------

  std::string where() const {
    return cat("live: member ", opt.member, " (generation ", gen, ", step ", step, ")");
  }

  [[noreturn]] void fence(const std::string& reason) {
    if (fenced.empty()) {
      fenced = reason;
      RecoveryEvent ev;
      ev.kind = RecoveryEvent::Kind::kFenced;
      ev.member = opt.member;
      ev.generation = gen;
      ev.step = step;
      ev.world_size = static_cast<int>(members.size());
      ev.at = std::chrono::system_clock::now();
      if (opt.on_event) opt.on_event(ev);
    }
    throw FencedError(cat(where(), ": fenced: ", fenced,
                          "; it must not commit or write checkpoints: exit and let the launcher "
                          "start a replacement (DTRAIN_LIVE_JOIN=1)"));
  }

  void check_fenced() {
    if (!fenced.empty()) fence(fenced);
    std::string reason = detector->fence_reason();
    if (!reason.empty()) fence(reason);
  }

  void interrupt() {
    check_fenced();
    if (gen < 0) return;
    interrupt_if_abandoned();
    if (detector->any_dead(members)) {
      throw GenerationLostError(cat(where(), ": generation ", gen, " lost ",
                                    join(dead_members(), ", "),
                                    "; the collective in flight is abandoned"));
    }
    // Another member gave the step up (its own failure): its collectives
    // will never come.
    if (begun && store->check({keys.decision(gen, step)}) &&
        get_string(*store, keys.decision(gen, step)) == kAbort) {
      throw GenerationLostError(cat(where(), ": another member aborted step ", step,
                                    "; the collective in flight is abandoned"));
    }
  }

  // Note [Formation given up]
  // A member whose generation's group fails to form (a Gloo error, a
  // formation collective that timed out, the formation bound) writes
  // gen/<g>/abandoned, and every member of generation g gives it up at its
  // next wait slice, whether it is still forming (Note [Interruptible
  // formation] in src/comm/interruptible_store.cpp) or already in the first
  // step (its commit decision is then abort): all of them reach the next
  // generation together, within the leader's bound, instead of one being
  // left out, declared dead ("left generation") and fenced while it waited
  // in a formation the others had given up. The whole formation, the
  // DataParallel's first collective and the state transfer included, is
  // bounded by form_timeout (start_timeout for the first generation and a
  // joiner's), not by the longer collective_timeout.
  // A member that finished forming may already wait in the generation's
  // first step when another gives the formation up, so the key is checked
  // at every wait slice until the generation's first commit, and by
  // decide(); after a commit every member had formed, nobody writes it, and
  // the steady state's waits pay no extra store call.
  bool may_be_abandoned() const { return gen >= 0 && !gen_committed; }
  void interrupt_if_abandoned() {
    if (may_be_abandoned() && store->check({keys.abandoned(gen)})) {
      throw GenerationLostError(cat(where(), ": generation ", gen, "'s group was given up by ",
                                    get_string(*store, keys.abandoned(gen))));
    }
    if (forming_until && Clock::now() >= *forming_until) {
      throw GenerationLostError(cat(where(), ": generation ", gen, "'s group did not form within ",
                                    forming_bound.count() / 1000.0, " s"));
    }
  }

  void give_up_formation(const std::string& why) {
    try {
      const std::string v = cat(opt.member, " (", first_line(why), ")");
      store->compareSet(keys.abandoned(gen), {}, live::bytes_of(v));
    } catch (const std::exception&) {
      // The store is gone: the detector fences this member.
    }
  }

  // This member failed the step: say so at once, so that the others stop
  // waiting for its collectives.
  void fail_step(const std::string& why) {
    step_failed = true;
    step_failure = why;
    gen_clean = false;
    if (gen < 0 || !begun) return;
    const std::string v(kAbort);
    try {
      // The reason first: a member whose wait is given up by this abort
      // fails the step too, but only after it has seen the decision.
      store->compareSet(keys.failure(gen, step), {},
                        live::bytes_of(cat(opt.member, ": ", first_line(why))));
      store->compareSet(keys.decision(gen, step), {}, std::vector<uint8_t>(v.begin(), v.end()));
    } catch (const std::exception&) {
      // The store is gone: the detector fences this member.
    }
  }

  std::vector<std::string> dead_members() const {
    std::vector<std::string> out;
    auto deaths = detector->deaths();
    for (const std::string& m : members) {
      if (deaths.count(m)) out.push_back(m);
    }
    return out;
  }

  // ---- buffers ----------------------------------------------------------------

  torch::nn::Module* buffer_module() const { return ddp_module ? ddp_module : registered.module; }

  std::vector<at::Tensor> buffers() const {
    torch::nn::Module* m = buffer_module();
    return m ? m->buffers() : std::vector<at::Tensor>{};
  }

  static void copy_into(std::vector<at::Tensor>& dst, const std::vector<at::Tensor>& src) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < dst.size() && i < src.size(); ++i) dst[i].copy_(src[i]);
  }

  // ---- generations --------------------------------------------------------------

  // Note [Abandoned groups]; an NCCL group's communicators are aborted
  // first (ncclCommAbort through c10d's Backend::abort(), LibTorch 2.x):
  // its kernels may spin on the GPU waiting for the lost peer, holding the
  // stream every later kernel queues on. Gloo's abort() is a no-op in c10d,
  // which is why Gloo groups are only abandoned.
  //
  // Note [Bounded abort]
  // ncclCommAbort can itself wait on a proxy thread talking to the lost
  // peer, and c10d bounds it only by the collective timeout (minutes). The
  // abort therefore runs on a thread of its own, given kAbortBound; if it
  // has not returned by then it is left running (detached: it holds its own
  // reference to the backend, which the abandoned list keeps too) and the
  // survivors form the next generation anyway, on new communicators.
  void keep_abandoned(const ProcessGroup& group) {
#if DTRAIN_TORCH_VERSION >= 200
    if (group.backend_name() == "nccl" && group.backend()) {
      constexpr auto kAbortBound = std::chrono::seconds(5);
      auto backend = group.backend();
      auto done = std::make_shared<std::promise<void>>();
      std::future<void> aborted = done->get_future();
      std::thread([backend, done] {
        try {
          backend->abort();
        } catch (const std::exception&) {
          // Aborting is best effort: the group is never used again anyway.
        }
        done->set_value();
      }).detach();
      const auto t0 = Clock::now();
      abort_timed_out = aborted.wait_for(kAbortBound) != std::future_status::ready;
      abort_time = std::max(ms_since(t0), std::chrono::milliseconds(1));
    }
#endif
    abandoned.push_back(group);
  }

  void abandon_generation() {
    if (gen < 0) return;
    if (!gen_clean) {
      if (static_cast<int>(abandoned.size()) >= opt.max_abandoned_groups) {
        fence(cat("too many abandoned groups (", abandoned.size(),
                  ", LiveOptions::max_abandoned_groups): restart this worker"));
      }
      keep_abandoned(pg);
      // Gradients may alias the abandoned buckets (gradient_as_bucket_view).
      torch::nn::Module* m = buffer_module();
      if (m) {
        for (at::Tensor& p : m->parameters()) p.mutable_grad() = at::Tensor();
      }
    }
    ddp.reset();
    pg = ProcessGroup();
  }

  void form_next() {
    const int prev_size = static_cast<int>(members.size());
    const std::vector<std::string> prev_members = members;
    const int64_t prev_gen = gen;
    abandon_generation();
    bool initial = gen < 0 && has_state;
    // Whom the leader expects: the previous generation's members, or after a
    // generation whose group failed to form, that generation's (Note
    // [Formation given up]); positions follow the same list.
    std::vector<std::string> expect_from = prev_members;
    int64_t target = gen + 1;
    if (!has_state) {
      // A joiner: register, then take part in the next formation.
      const int64_t k = store->add(keys.joiner_count(), 1) - 1;
      store->set(keys.joiner(k), live::bytes_of(opt.member));
      target = live::current_generation(*store, keys) + 1;
    }
    const auto deadline = Clock::now() + opt.start_timeout;
    for (;;) {
      check_fenced();
      live::FormRequest req;
      req.generation = target;
      req.me.member = opt.member;
      req.me.has_state = has_state;
      if (initial) {
        req.me.order = opt.initial_rank;
      } else {
        auto it = std::find(expect_from.begin(), expect_from.end(), opt.member);
        req.me.order = it - expect_from.begin();
      }
      req.initial = initial;
      req.initial_world = opt.initial_world_size;
      for (const std::string& m : expect_from) {
        if (!detector->any_dead({m})) req.expected.push_back(m);
      }
      req.joined_upto = joined_upto;
      req.max_members = w0;
      req.bound = (initial || !has_state) ? opt.start_timeout : opt.form_timeout;
      req.check = [this] {
        check_fenced();
        if (!has_state) check_job_ended();
      };
      live::Roster roster;
      if (live::form_roster(*store, keys, *detector, req, &roster) ==
          live::FormOutcome::kLeaderLost) {
        ++target;
        continue;
      }
      auto me = std::find(roster.members.begin(), roster.members.end(), opt.member);
      if (me == roster.members.end()) {
        if (has_state) {
          fence(cat("generation ", target,
                    " formed without it (members: ", join(roster.members, ", "), ")"));
        }
        if (Clock::now() >= deadline) {
          throw TimeoutError(cat(where(), ": not admitted as a joiner within ",
                                 opt.start_timeout.count() / 1000.0, " s"));
        }
        const int64_t k = store->add(keys.joiner_count(), 1) - 1;  // register again
        store->set(keys.joiner(k), live::bytes_of(opt.member));
        target = std::max(target, live::current_generation(*store, keys)) + 1;
        continue;
      }
      if (static_cast<int>(roster.members.size()) < opt.min_workers) {
        throw BelowMinWorkersError(below_min_message(roster, prev_members));
      }
      const bool was_joiner = !has_state;
      if (try_form_group(roster, me - roster.members.begin(), initial || was_joiner, initial)) {
        report(roster, prev_size, prev_members, was_joiner, prev_gen);
        return;
      }
      // A member failed while the group formed: the next generation, among
      // this one's members (Note [Formation given up]).
      target = roster.generation + 1;
      members = roster.members;
      expect_from = roster.members;
      initial = false;
    }
  }

  // Note [A replacement after the end]
  // A joiner is admitted by a member with state at a step boundary; once
  // every member of the newest formed generation has left (its LiveGroup was
  // destroyed: training finished, or an error ended it) nobody is left to
  // admit it, and without this check it waited out start_timeout (5 min) and
  // failed with a timeout (docs/live_recovery.md, "Not done yet", until
  // 2026-11-26). Its wait therefore reads the newest generation's member
  // list and their left keys, at most once per heartbeat interval.
  void check_job_ended() {
    const auto now = Clock::now();
    if (now < next_end_check) return;
    next_end_check = now + opt.heartbeat_interval;
    const int64_t g = live::current_generation(*store, keys);
    if (g < 0 || !store->check({keys.members(g)})) return;
    const live::Roster r = live::parse_roster(g, get_string(*store, keys.members(g)));
    if (r.members.empty()) return;
    for (const std::string& m : r.members) {
      if (!store->check({keys.left(m)})) return;
    }
    throw JobEndedError(cat(where(), ": the job ended before this replacement was admitted (every ",
                            "member of generation ", g, " left: ", join(r.members, ", "),
                            "); it has no state and nothing to do"));
  }
  Clock::time_point next_end_check{};

  // The lost members and how each was detected. A member that is not the
  // leader may read the roster before its own detector saw a loss ("lost:
  // none detected" in one run of 20 under load): the leader declared every
  // member it left out dead before writing the roster, so the dead key says
  // how for those this member's detector has not seen yet.
  std::string below_min_message(const live::Roster& roster, const std::vector<std::string>& prev) {
    std::vector<std::string> parts;
    const auto deaths = detector->deaths();
    for (const auto& [m, d] : deaths) {
      parts.push_back(cat(m, " (", to_string(d.cause), ")"));
    }
    for (const std::string& m : prev) {
      if (deaths.count(m) || m == opt.member ||
          std::find(roster.members.begin(), roster.members.end(), m) != roster.members.end()) {
        continue;
      }
      std::string cause = to_string(DetectionCause::kLeftGeneration);
      try {
        if (store->check({keys.dead(m)})) cause = get_string(*store, keys.dead(m));
      } catch (const std::exception&) {
        // The store is gone: the leader's verdict is all there is.
      }
      parts.push_back(cat(m, " (", cause, ")"));
    }
    return cat(where(), ": only ", roster.members.size(), " live worker(s) in generation ",
               roster.generation, ", fewer than min_workers = ", opt.min_workers,
               "; lost: ", parts.empty() ? std::string("none detected") : join(parts, ", "));
  }

  // Forms the generation's ProcessGroup, transfers state, wraps DDP. False
  // when a member failed meanwhile (the half-formed group is abandoned).
  // Only the first generation's DDP broadcasts rank 0's parameters: later
  // members hold the committed values already (an aborted step restores
  // them), and joiners get them in the state transfer (Note [Re-formation
  // without a broadcast]).
  bool try_form_group(const live::Roster& roster, int64_t rank, bool long_bound, bool first) {
    gen = roster.generation;
    members = roster.members;
    joined_upto = roster.joined_upto;
    detector->watch(members);
    gen_clean = false;  // until formed
    gen_committed = false;
    forming_bound = long_bound ? opt.start_timeout : opt.form_timeout;
    forming_until = Clock::now() + forming_bound;
    try {
      InitOptions o;
      o.init_method = "live://";
      o.rank = static_cast<int>(rank);
      o.world_size = static_cast<int>(members.size());
      o.backend = opt.backend;
      o.local_rank = opt.local_rank;
      o.timeout = opt.collective_timeout;
      o.store_timeout = forming_bound;
      o.gloo_host = gloo_host;
      o.wait_interrupt = [this] { interrupt(); };
      o.wait_slice = opt.wait_slice;
      pg = init_process_group(prefix_store(keys.group_prefix(gen), store), o);
      if (roster.transfer()) {
        const auto t0 = Clock::now();
        std::string bytes = rank == 0 ? live::save_state(registered, step) : std::string();
        // Note [State transfer] (state_transfer.cpp): rank 0 to each joiner
        // in a group of two; the other members take no part.
        for (int j = roster.with_state; j < static_cast<int>(members.size()); ++j) {
          if (rank != 0 && rank != j) continue;
          InitOptions two = o;
          two.rank = rank == 0 ? 0 : 1;
          two.world_size = 2;
          ProcessGroup pair =
              init_process_group(prefix_store(keys.transfer_prefix(gen, j), store), two);
          try {
            std::string got = live::broadcast_bytes(pair, bytes, 0);
            if (rank == j) bytes = std::move(got);
          } catch (...) {
            keep_abandoned(pair);  // never destroyed with a wait in flight
            throw;
          }
        }
        if (!has_state) {
          step = live::load_state(registered, bytes);
          view.state_received = true;
        }
        transfer_time = ms_since(t0);
      }
      if (ddp_module) {
        DdpOptions d = ddp_options;
        d.broadcast_buffers = false;
        d.gradient_divisor = w0;
        // Note [Re-formation without a broadcast]
        // Every member of a later generation holds the committed parameters
        // and buffers bit for bit (the commit agreement; an aborted step
        // restores start_buffers and takes no optimizer step), and a joiner
        // has just received them (roster.transfer()). DDP's initial broadcast
        // would send the whole model again, over the network, on the
        // recovery's critical path: about 0.4 s for ResNet-18 on a 1 Gbit/s
        // link. The first generation still broadcasts, as DDP does, since
        // the processes may have started from different values.
        d.init_sync = first;
        ddp = std::make_unique<DataParallel>(borrowed(*ddp_module), pg, d);
      }
    } catch (const FencedError&) {
      forming_until.reset();
      throw;
    } catch (const DistError& e) {
      forming_until.reset();
      give_up_formation(e.what());
      ddp.reset();
      if (pg.size() > 1) keep_abandoned(pg);
      pg = ProcessGroup();
      return false;
    }
    forming_until.reset();
    has_state = true;
    gen_clean = true;
    need_new_gen = false;
    return true;
  }
  std::optional<Clock::time_point> forming_until;  // set while a group forms
  std::chrono::milliseconds forming_bound{0};

  std::chrono::milliseconds transfer_time{0};
  std::chrono::milliseconds abort_time{0};  // Note [Bounded abort]
  LiveStats stats;                          // Note [Live statistics]
  std::optional<Clock::time_point> first_step_at;
  bool abort_timed_out = false;
  std::string gloo_host;  // where Gloo binds: options, else the route to the store

  void report(const live::Roster& roster, int prev_size, const std::vector<std::string>& prev,
              bool was_joiner, int64_t prev_gen) {
    RecoveryEvent ev;
    ev.member = opt.member;
    ev.generation = gen;
    ev.step = step;
    ev.previous_world_size = prev_size;
    ev.world_size = static_cast<int>(members.size());
    ev.at = std::chrono::system_clock::now();
    ev.state_transfer = transfer_time;
    transfer_time = std::chrono::milliseconds(0);
    ev.communicator_abort = abort_time;
    ev.communicator_abort_timed_out = abort_timed_out;
    abort_time = std::chrono::milliseconds(0);
    abort_timed_out = false;
    auto deaths = detector->deaths();
    std::optional<Clock::time_point> first;
    for (const std::string& m : prev) {
      if (std::find(members.begin(), members.end(), m) != members.end()) continue;
      auto it = deaths.find(m);
      LostMember l{m, it != deaths.end() ? it->second.cause : DetectionCause::kLeftGeneration};
      if (it == deaths.end() && store->check({keys.dead(m)})) {
        l.cause = detection_cause_from_string(get_string(*store, keys.dead(m)));
      }
      ev.lost.push_back(l);
      lost.push_back(l);
      if (it != deaths.end() && (!first || it->second.at < *first)) first = it->second.at;
    }
    for (const std::string& m : members) {
      if (std::find(prev.begin(), prev.end(), m) == prev.end() && !prev.empty()) {
        ev.joined.push_back(m);
      }
    }
    if (was_joiner) ev.joined = {opt.member};
    if (prev.empty() && !was_joiner) {
      ev.kind = RecoveryEvent::Kind::kFormed;
    } else {
      ev.kind = ev.lost.empty() ? RecoveryEvent::Kind::kJoined : RecoveryEvent::Kind::kLost;
      if (was_joiner) ev.kind = RecoveryEvent::Kind::kJoined;
      Clock::time_point from = trigger_at.value_or(Clock::now());
      if (first && *first < from) from = *first;
      ev.detect_to_group = ms_since(from);
    }
    if (!was_joiner && !prev.empty() && ev.lost.empty() && ev.joined.empty() && prev_gen >= 0) {
      // Nobody lost or joined: the step was given up by a member's own
      // failure (fail_step), or the previous generation's group did not form.
      try {
        if (store->check({keys.failure(prev_gen, step)})) {
          ev.redo_reason = get_string(*store, keys.failure(prev_gen, step));
        } else if (store->check({keys.abandoned(prev_gen)})) {
          ev.redo_reason = get_string(*store, keys.abandoned(prev_gen));
        }
      } catch (const std::exception&) {
        // The store is gone: the line goes without its reason.
      }
    }
    trigger_at.reset();
    if (opt.on_event) opt.on_event(ev);
  }

  // ---- the step -----------------------------------------------------------------

  const LiveStep& begin_step() {
    check_fenced();
    if (begun && !step_failed) {
      // begin_step() again without should_commit(): this attempt is given up.
      fail_step("begin_step() called again before should_commit()");
    }
    if (begun) decide(/*finished=*/false);
    if (gen >= 0 && detector->any_dead(members)) {
      need_new_gen = true;
      if (!trigger_at) trigger_at = Clock::now();
    }
    view.state_received = false;
    while (need_new_gen) form_next();
    begun = true;
    step_failed = false;
    step_failure.clear();
    start_buffers.clear();
    for (const at::Tensor& b : buffers()) start_buffers.push_back(b.detach().clone());
    view.step = step;
    view.generation = gen;
    view.pg = pg;
    view.logical_world_size = w0;
    view.logical_ranks = logical_ranks_of(pg.rank(), pg.size(), w0);
    view.members = members;
    view.ddp = ddp.get();
    return view;
  }

  // The GPU the module's first parameter (or buffer) lives on, if any.
  std::optional<c10::Device> module_gpu() const {
    torch::nn::Module* m = buffer_module();
    if (!m) return std::nullopt;
    for (const at::Tensor& t : m->parameters()) {
      if (t.is_cuda()) return t.device();
    }
    for (const at::Tensor& t : m->buffers()) {
      if (t.is_cuda()) return t.device();
    }
    return std::nullopt;
  }

  bool run_logical(const std::function<void(int)>& fn) {
    check_fenced();
    if (!begun) throw InvalidArgument(cat(where(), ": run_logical() before begin_step()"));
    if (step_failed) return false;
    std::vector<at::Tensor> bufs = buffers();
    std::vector<at::Tensor> logical0;
    // Note [Logical ranks]: the CPU generator, and the module's GPU's.
    std::vector<at::Generator> gens{at::detail::getDefaultCPUGenerator()};
    if (std::optional<c10::Device> gpu = module_gpu()) {
      gens.push_back(at::globalContext().defaultGenerator(*gpu));
    }
    std::vector<at::Tensor> own_states;
    for (at::Generator& g : gens) {
      std::lock_guard<std::mutex> lock(g.mutex());
      own_states.push_back(g.get_state());
    }
    auto restore_rng = [&] {
      for (size_t k = 0; k < gens.size(); ++k) {
        std::lock_guard<std::mutex> lock(gens[k].mutex());
        gens[k].set_state(own_states[k]);
      }
    };
    try {
      const std::vector<int>& ranks = view.logical_ranks;
      for (size_t i = 0; i < ranks.size(); ++i) {
        const int r = ranks[i];
        copy_into(bufs, start_buffers);
        const uint64_t seed =
            mix_seed(opt.seed, static_cast<uint64_t>(r), static_cast<uint64_t>(step));
        for (at::Generator& g : gens) {
          std::lock_guard<std::mutex> lock(g.mutex());
          g.set_current_seed(seed);
        }
        if (ddp && i + 1 < ranks.size()) {
          auto scope = ddp->no_sync();
          fn(r);
        } else {
          fn(r);
        }
        if (r == 0) {
          for (const at::Tensor& b : bufs) logical0.push_back(b.detach().clone());
        }
      }
      restore_rng();
      if (!logical0.empty()) copy_into(bufs, logical0);
      // Note [Logical ranks]: logical rank 0's buffers win; one collective
      // per dtype (Note [Live statistics]: per tensor it was most of the
      // protocol's time with ResNet-18's 60 BatchNorm buffers).
      if (!bufs.empty()) {
        const auto b0 = Clock::now();
        broadcast_coalesced(bufs, pg, 0);
        stats.buffers += Clock::now() - b0;
      }
    } catch (const FencedError&) {
      restore_rng();
      throw;
    } catch (const std::exception& e) {
      restore_rng();
      const bool ours =
          dynamic_cast<const DistError*>(&e) != nullptr || detector->any_dead(members);
      if (!ours) throw;
      fail_step(first_line(e.what()));
      return false;
    }
    return true;
  }

  bool should_commit() {
    check_fenced();
    if (!begun) throw InvalidArgument(cat(where(), ": should_commit() before begin_step()"));
    return decide(/*finished=*/!step_failed);
  }

  bool decide(bool finished) {
    begun = false;
    const std::string decision_key = keys.decision(gen, step);
    std::string decision;
    auto propose = [&](const char* value) {
      const std::string v(value);
      auto won = store->compareSet(decision_key, {}, std::vector<uint8_t>(v.begin(), v.end()));
      return std::string(won.begin(), won.end());
    };
    if (finished) {
      const int64_t n = store->add(keys.done(gen, step), 1);
      if (n == static_cast<int64_t>(members.size())) {
        // Joiners are admitted while fewer than W0 members run (more would
        // idle): a spare started early waits for the next loss.
        const bool joiners = static_cast<int>(members.size()) < w0 &&
                             store->add(keys.joiner_count(), 0) > joined_upto;
        decision = propose(joiners ? kCommitJoin : kCommit);
      }
    } else {
      decision = propose(kAbort);
    }
    // From 100 us, doubling up to wait_slice: the members of a step arrive
    // within a millisecond or two of each other (they just left the same
    // allreduce), and a first pause of 1 ms cost each step about that much
    // (Note [Live statistics]).
    std::chrono::microseconds pause(100);
    while (decision.empty()) {
      if (store->check({decision_key})) {
        decision = get_string(*store, decision_key);
        break;
      }
      check_fenced();
      if (detector->any_dead(members) ||
          (may_be_abandoned() && store->check({keys.abandoned(gen)}))) {
        decision = propose(kAbort);
        break;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, opt.wait_slice);
    }
    if (decision == kAbort) {
      auto bufs = buffers();
      copy_into(bufs, start_buffers);
      need_new_gen = true;
      gen_clean = false;
      if (!trigger_at) trigger_at = Clock::now();
      return false;
    }
    // A member resumed after the others declared it dead must not commit.
    if (store->check({keys.dead(opt.member)})) {
      fence(cat("the other members declared it dead (", get_string(*store, keys.dead(opt.member)),
                ")"));
    }
    if (decision == kCommitJoin) {
      need_new_gen = true;
      trigger_at = Clock::now();
    }
    if (pg.rank() == 0 && step >= 2) {
      try {
        store->deleteKey(keys.done(gen, step - 2));
        store->deleteKey(keys.decision(gen, step - 2));
        store->deleteKey(keys.failure(gen, step - 2));
      } catch (const std::exception&) {
        // Housekeeping only.
      }
    }
    gen_committed = true;
    ++step;
    return true;
  }

  ~Impl() {
    if (!gen_clean && pg.size() > 1) keep_abandoned(pg);
    if (!gen_clean) {
      // The current group may have a collective stuck on a dead peer.
      ddp.reset();
      pg = ProcessGroup();
    }
    // Note [Abandoned groups]: never joined, reclaimed by the process's exit.
    if (!abandoned.empty()) {
      auto* leaked = std::make_unique<std::vector<ProcessGroup>>(std::move(abandoned)).release();
      if (&__lsan_ignore_object != nullptr) __lsan_ignore_object(leaked);
    }
    try {
      // No store: the constructor failed before connecting (bad options).
      if (store) store->set(keys.left(opt.member), live::bytes_of("1"));
    } catch (const std::exception&) {
      // The store is gone: nothing to tell.
    }
    detector.reset();
  }
};

namespace {

// Note [NCCL's watchdog under live recovery]
// When a communicator reports an error (a peer's socket closed: it was
// killed) or a collective outlives the group timeout, c10d's NCCL watchdog
// thread rethrows it under TORCH_NCCL_ASYNC_ERROR_HANDLING 1 or 3 (3, its
// default), which ends the whole process: the survivor would die with the
// lost peer. Live recovery needs 0 (the watchdog only records the error on
// the work, which the polled wait rethrows: Note [Polled waits on NCCL]) or
// 2 (it also aborts the communicators). c10d reads the variable when each
// ProcessGroupNCCL is built, so an unset one is set to 0 here, before this
// LiveGroup starts its threads (`dtrain run --recovery live` sets it in the
// workers' environment already); 1 or 3 set by the user is refused.
void keep_nccl_watchdog_from_ending_the_process(const std::string& member) {
  const char* v = std::getenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
  if (v == nullptr || *v == '\0') {
    ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0", 0);
    return;
  }
  const std::string value = v;
  if (value != "0" && value != "2") {
    throw InvalidArgument(
        cat("live: member ", member, ": TORCH_NCCL_ASYNC_ERROR_HANDLING=", value,
            " makes NCCL's watchdog end this process when a peer fails; live recovery on NCCL "
            "needs 0 or 2: unset it (the LiveGroup then sets 0)"));
  }
}

}  // namespace

LiveGroup::LiveGroup(LiveOptions options)
    : LiveGroup(
          [&options]() -> std::function<StorePtr()> {
            if (options.host_store) return {};
            const std::string host = options.store_host;
            const int port = options.store_port;
            const auto timeout = options.start_timeout;
            return [host, port, timeout] { return connect_tcp_store(host, port, timeout); };
          }(),
          options) {}

LiveGroup::LiveGroup(std::function<StorePtr()> connect, LiveOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  if (options.member.empty()) options.member = live::default_member_id();
  if (options.logical_world_size <= 0) options.logical_world_size = options.initial_world_size;
  if (options.logical_world_size <= 0) {
    throw InvalidArgument(cat("live: member ", options.member,
                              ": set initial_world_size (WORLD_SIZE) or logical_world_size"));
  }
  if (!options.join && options.initial_world_size <= 0) {
    throw InvalidArgument(cat("live: member ", options.member,
                              ": initial_world_size must be positive (or join = true)"));
  }
  if (options.failure_timeout <= 2 * options.heartbeat_interval) {
    throw InvalidArgument(cat("live: failure_timeout (", options.failure_timeout.count(),
                              " ms) must exceed 2 x heartbeat_interval (",
                              options.heartbeat_interval.count(), " ms)"));
  }
  if (options.min_workers < 1 || options.max_abandoned_groups < 0) {
    throw InvalidArgument("live: min_workers must be >= 1 and max_abandoned_groups >= 0");
  }
  detail::ignore_sigpipe_unless_handled();  // Note [SIGPIPE]
  if (options.backend == "nccl") keep_nccl_watchdog_from_ending_the_process(options.member);
  s.opt = options;
  s.keys.prefix = options.key_prefix;
  s.w0 = options.logical_world_size;
  s.has_state = !options.join;
  if (!connect) {
    TcpStoreServerOptions so;
    so.host = options.store_host;
    so.port = options.store_port;
    s.server = TcpStoreServer::start(so);
    std::fprintf(stderr,
                 "live: member %s hosts the store at %s:%d; losing it ends the job (a restart), "
                 "run the store off the workers (dtrain run hosts it) to survive that\n",
                 options.member.c_str(), options.store_host.c_str(), s.server->port());
    const std::string host = options.store_host;
    const int port = s.server->port();
    const auto timeout = options.start_timeout;
    connect = [host, port, timeout] { return connect_tcp_store(host, port, timeout); };
  }
  s.gloo_host = options.gloo_host;
  if (s.gloo_host.empty() && !options.store_host.empty() && options.store_port > 0) {
    s.gloo_host = detail::route_local_addr(options.store_host, options.store_port);
  }
  s.connect = connect;
  s.store = connect();
  StorePtr hb = connect();
  if (hb.get() != s.store.get()) hb->setTimeout(options.failure_timeout);
  s.detector = std::make_unique<live::Detector>(
      hb, s.keys, options.member, options.heartbeat_interval, options.failure_timeout);
}

LiveGroup::~LiveGroup() = default;

void LiveGroup::register_module(torch::nn::Module& module) { impl_->registered.module = &module; }
void LiveGroup::register_optimizer(torch::optim::Optimizer& optimizer) {
  impl_->registered.optimizer = &optimizer;
}
void LiveGroup::register_state(const std::string& name, std::function<std::string()> save,
                               std::function<void(const std::string&)> load) {
  impl_->registered.extras.push_back({name, std::move(save), std::move(load)});
}
void LiveGroup::wrap_ddp(torch::nn::Module& module, DdpOptions options) {
  impl_->ddp_module = &module;
  impl_->ddp_options = std::move(options);
}
// Note [Live statistics]: the wrappers time the calls on the calling thread;
// run_logical() leaves the user's function out, and counts the broadcast of
// logical rank 0's buffers apart (LiveStats::buffers). That broadcast takes
// the place of plain DDP's own, and it is the first collective after the
// gradient allreduce, so a member that left the allreduce first waits there
// for the last. Counted as protocol, it put the first worker of each node
// above 2% of the step (15-19 ms of 0.65 s, 4 workers on two nodes over a
// 1 Gbit/s link, a core each), although plain DDP pays the same; apart, the
// broadcast took 6-13 ms a step and the protocol 3-11 ms, under 1.1% for
// every member (docs/benchmarks.md, issue 19).
const LiveStep& LiveGroup::begin_step() {
  const auto t0 = Clock::now();
  if (!impl_->first_step_at) impl_->first_step_at = t0;
  const int64_t gen = impl_->gen;
  const LiveStep& view = impl_->begin_step();
  (impl_->gen != gen ? impl_->stats.forming : impl_->stats.protocol) += Clock::now() - t0;
  return view;
}

bool LiveGroup::run_logical(const std::function<void(int)>& fn) {
  const auto t0 = Clock::now();
  std::chrono::nanoseconds in_fn{0};
  const auto timed = [&](int r) {
    const auto f0 = Clock::now();
    try {
      fn(r);
    } catch (...) {
      in_fn += Clock::now() - f0;
      throw;
    }
    in_fn += Clock::now() - f0;
  };
  // The buffer broadcast is timed inside (LiveStats::buffers) and left out
  // here, as the user's function is.
  const auto buffers0 = impl_->stats.buffers;
  const auto account = [&] {
    impl_->stats.protocol += (Clock::now() - t0) - in_fn - (impl_->stats.buffers - buffers0);
  };
  bool ok = false;
  try {
    ok = impl_->run_logical(timed);
  } catch (...) {
    account();
    throw;
  }
  account();
  return ok;
}

bool LiveGroup::should_commit() {
  const auto t0 = Clock::now();
  const bool commit = impl_->should_commit();
  const auto t1 = Clock::now();
  impl_->stats.protocol += t1 - t0;
  if (commit) ++impl_->stats.committed_steps;
  if (impl_->first_step_at) impl_->stats.wall = t1 - *impl_->first_step_at;
  return commit;
}

LiveStats LiveGroup::stats() const { return impl_->stats; }
void LiveGroup::report_failure(const std::string& what) { impl_->fail_step(what); }
int64_t LiveGroup::step() const { return impl_->step; }
void LiveGroup::set_step(int64_t step) { impl_->step = step; }
const std::string& LiveGroup::member() const { return impl_->opt.member; }
const LiveOptions& LiveGroup::options() const { return impl_->opt; }
std::vector<LostMember> LiveGroup::lost_members() const { return impl_->lost; }

}  // namespace dtrain
