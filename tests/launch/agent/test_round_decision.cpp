// What the agent does when a round ends, as pure functions (round_decision.h):
// restart (spending one of --max-restarts or not), give up, finish or stop;
// whether to close the run, wait at the exit barrier and linger; which worker
// is the root cause; which failures a lost peer causes. No processes, no
// rendezvous: the facts are written out by hand. And the times of the error
// records the root cause is chosen by (read_round_records, from files).

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <csignal>
#include <fstream>
#include <optional>
#include <vector>

#include "common/error_file.h"
#include "dtrain/launch.h"
#include "launch/agent/round_decision.h"
#include "launch/agent/round_plan.h"

namespace dtrain {
namespace {

// --- decide_round: what a round's end leads to, and what it costs ---------

using detail::decide_round;
using detail::RoundAction;
using detail::RoundFacts;

RoundFacts failed_round(int restarts, int max_restarts, int nodes = 2) {
  RoundFacts f;
  f.worker_failed = true;
  f.restarts = restarts;
  f.max_restarts = max_restarts;
  f.num_nodes = nodes;
  return f;
}

TEST(DecideRound, WorkerFailureWithRestartsLeftRestartsAndSpendsOne) {
  auto d = decide_round(failed_round(0, 1));
  EXPECT_EQ(d.action, RoundAction::kRestart);
  EXPECT_TRUE(d.counts_restart);
  EXPECT_TRUE(d.record_failure);
  EXPECT_FALSE(d.close);
}

TEST(DecideRound, WorkerFailureCausedByALostNodeRestartsWithoutSpendingOne) {
  RoundFacts f = failed_round(0, 0);  // no restart left: would give up otherwise
  f.node_lost = true;
  auto d = decide_round(f);
  EXPECT_EQ(d.action, RoundAction::kRestart);
  EXPECT_FALSE(d.counts_restart);
  EXPECT_FALSE(d.close);
}

TEST(DecideRound, WorkerFailureWithoutRestartsLeftGivesUpClosingAndLingering) {
  auto d = decide_round(failed_round(2, 2));
  EXPECT_EQ(d.action, RoundAction::kGiveUp);
  EXPECT_FALSE(d.counts_restart);
  EXPECT_TRUE(d.record_failure);
  EXPECT_TRUE(d.close);
  EXPECT_TRUE(d.linger);
}

TEST(DecideRound, MembershipChangeRestartsWithoutSpendingOne) {
  RoundFacts f;
  f.membership_changed = true;
  f.max_restarts = 0;
  f.num_nodes = 3;
  auto d = decide_round(f);
  EXPECT_EQ(d.action, RoundAction::kRestart);
  EXPECT_FALSE(d.counts_restart);
  EXPECT_FALSE(d.record_failure);
}

TEST(DecideRound, SignalStopsWhateverElseHappened) {
  RoundFacts f = failed_round(0, 3);
  f.signalled = true;
  auto d = decide_round(f);
  EXPECT_EQ(d.action, RoundAction::kStop);
  EXPECT_FALSE(d.counts_restart);
  EXPECT_FALSE(d.close);
}

TEST(DecideRound, SuccessWaitsAtTheExitBarrierAndLingersOnlyWithSeveralNodes) {
  RoundFacts f;
  f.all_succeeded = true;
  f.num_nodes = 2;
  auto d = decide_round(f);
  EXPECT_EQ(d.action, RoundAction::kFinish);
  EXPECT_TRUE(d.exit_barrier);
  EXPECT_TRUE(d.linger);
  f.num_nodes = 1;
  d = decide_round(f);
  EXPECT_EQ(d.action, RoundAction::kFinish);
  EXPECT_FALSE(d.exit_barrier);
  EXPECT_FALSE(d.linger);
}

TEST(DecideRound, WorkersEndingWithoutAReasonCloseTheRunInsteadOfLooping) {
  RoundFacts f;  // stopped, but no failure, signal or membership change
  auto d = decide_round(f);
  EXPECT_EQ(d.action, RoundAction::kAbort);
  EXPECT_TRUE(d.close);
}

// --- choose_root_cause ------------------------------------------------------

using detail::choose_root_cause;
using detail::ErrorRecord;

WorkerExit exited(int rank, int code, bool stopped = false, int signal = 0) {
  WorkerExit w;
  w.rank = w.local_rank = rank;
  w.exit_code = signal ? -1 : code;
  w.signal = signal;
  w.stopped = stopped;
  return w;
}

std::optional<ErrorRecord> record_at(double timestamp) {
  ErrorRecord r;
  r.message = "failed";
  r.timestamp = timestamp;
  return r;
}

TEST(RootCause, IsTheEarliestErrorRecordNotTheLowestRankReapedFirst) {
  // Ranks 0 and 1 were reaped in the same tick; rank 1 failed first.
  std::vector<WorkerExit> exits{exited(0, 1), exited(1, 1), exited(2, 0)};
  std::vector<std::optional<ErrorRecord>> records{record_at(1000.5), record_at(1000.2),
                                                  std::nullopt};
  EXPECT_EQ(choose_root_cause(exits, records), 1u);
}

TEST(RootCause, AStoppedWorkerWhoseRecordIsEarlierIsTheRootCause) {
  // Rank 1 recorded its error, then was still exiting when rank 0's failure
  // made the agent stop it.
  std::vector<WorkerExit> exits{exited(0, 1), exited(1, 1, /*stopped=*/true),
                                exited(2, -1, /*stopped=*/true, SIGTERM)};
  std::vector<std::optional<ErrorRecord>> records{record_at(50), record_at(40), std::nullopt};
  EXPECT_EQ(choose_root_cause(exits, records), 1u);
}

TEST(RootCause, ASignalWithoutARecordCountsFromItsReapAnExitWithoutOneComesLast) {
  std::vector<WorkerExit> exits{exited(0, 3), exited(1, 1), exited(2, -1, false, SIGSEGV)};
  std::vector<std::optional<ErrorRecord>> records{std::nullopt, record_at(7), std::nullopt};
  exits[2].ended_at = 6;  // reaped before rank 1 recorded its error
  EXPECT_EQ(choose_root_cause(exits, records), 2u);
  exits[2].ended_at = 0;  // not seen to end: first
  EXPECT_EQ(choose_root_cause(exits, records), 2u);
  exits[2] = exited(2, 0);
  EXPECT_EQ(choose_root_cause(exits, records), 1u);
  records[1].reset();
  EXPECT_EQ(choose_root_cause(exits, records), 0u);  // no records: the lowest rank
}

TEST(RootCause, ARecordBeatsAnAbortReapedAfterItWhileItsWriterWasStillExiting) {
  // The CI failure of PythonPrograms.TheRootCauseComesFromRecordsErrorFile:
  // rank 1 recorded its error at 40 and tore its process group down; torch
  // 2.x's rank 0 then aborted (SIGABRT, no record), reaped at 50 while rank 1
  // was still exiting, and the agent stopped rank 1.
  std::vector<WorkerExit> exits{exited(0, -1, false, SIGABRT),
                                exited(1, -1, /*stopped=*/true, SIGTERM)};
  exits[0].ended_at = 50;
  exits[1].ended_at = 50.2;
  std::vector<std::optional<ErrorRecord>> records{std::nullopt, record_at(40)};
  EXPECT_EQ(choose_root_cause(exits, records), 1u);
}

TEST(RootCause, ARecordOfAPeersFailureComesAfterTheCrashThatCausedIt) {
  // Rank 0 was killed (SIGKILL: no record); rank 1 recorded the lost
  // connection before the agent got round to reaping rank 0.
  std::vector<WorkerExit> exits{exited(0, -1, false, SIGKILL), exited(1, 1)};
  exits[0].ended_at = 50;
  ErrorRecord lost;
  lost.message = "RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer";
  lost.timestamp = 49.9;
  std::vector<std::optional<ErrorRecord>> records{std::nullopt, lost};
  EXPECT_EQ(choose_root_cause(exits, records), 0u);
  // Also after an exit without a record, and after a record that is not one.
  exits[0] = exited(0, 3);
  EXPECT_EQ(choose_root_cause(exits, records), 0u);
  records[0] = record_at(60);
  EXPECT_EQ(choose_root_cause(exits, records), 0u);
  // Among consequences alone, the earliest.
  ErrorRecord timeout = lost;
  timeout.message = "RuntimeError: Timed out waiting 1800000ms for recv operation";
  timeout.timestamp = 49;
  records[0] = timeout;
  EXPECT_EQ(choose_root_cause(exits, records), 0u);
  records[0]->timestamp = 51;
  EXPECT_EQ(choose_root_cause(exits, records), 1u);
}

// torchelastic's @record stamps whole seconds; the file's modification time
// says when within that second (Note [Record times] in round_plan.cpp).
TEST(RecordTimes, AWholeSecondIsMadePreciseByTheFilesModificationTimeWithinIt) {
  detail::TempDir dir;
  const std::string path = dir.path() + "/error.json";
  auto write_torch_record = [&](double mtime) {
    std::ofstream(path) << R"({"message": {"message": "RuntimeError: boom", )"
                        << R"("extraInfo": {"py_callstack": "", "timestamp": "1000"}}})";
    const timespec times[2] = {{1000, 0},
                               {static_cast<time_t>(mtime),
                                static_cast<long>((mtime - static_cast<time_t>(mtime)) * 1e9)}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  };
  detail::RoundPlan plan;
  plan.error_files = {path};
  std::vector<WorkerExit> exits{exited(0, 1)};
  write_torch_record(1000.25);
  auto records = detail::read_round_records(exits, plan, detail::RendezvousInfo{});
  ASSERT_TRUE(records[0].has_value());
  EXPECT_NEAR(records[0]->timestamp, 1000.25, 1e-6);
  write_torch_record(1007.5);  // written (or touched) in another second: the stamp stands
  records = detail::read_round_records(exits, plan, detail::RendezvousInfo{});
  ASSERT_TRUE(records[0].has_value());
  EXPECT_EQ(records[0]->timestamp, 1000);
}

TEST(RootCause, PeerFailuresAreRecognisedByTypeOrByC10dsText) {
  ErrorRecord r;
  r.error_type = "dtrain::PeerLostError";
  EXPECT_TRUE(detail::is_peer_failure(r));
  r.error_type = "";
  r.message =
      "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] "
      "Connection closed by peer [10.0.0.2]:4711";
  EXPECT_TRUE(detail::is_peer_failure(r));
  r.error_type = "dtrain::DataError";
  r.message = "shard 7 is truncated";
  EXPECT_FALSE(detail::is_peer_failure(r));
}

}  // namespace
}  // namespace dtrain
