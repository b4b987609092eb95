#pragma once
// The rendezvous protocol's implementation class (see Note [Rendezvous
// protocol] in protocol.cpp). Split over protocol.cpp (joining and
// completing an open round) and protocol_rounds.cpp (finishing, leaving and
// waiting for rounds; liveness; close; shutdown). Users go through
// make_dynamic_rendezvous / make_rendezvous.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launch/rendezvous/rendezvous.h"
#include "launch/rendezvous/state.h"

namespace dtrain::detail {

class DynamicRendezvous : public Rendezvous {
 public:
  /// `config` is validated and resolved (local_addr set) by the caller;
  /// `keep_alive` holds what the backend needs to outlive (the hosted c10d
  /// store server), released after the backend.
  DynamicRendezvous(std::shared_ptr<RendezvousBackend> backend, RendezvousConfig config,
                    std::string node_id, std::shared_ptr<void> keep_alive);
  ~DynamicRendezvous() override;

  RendezvousInfo next_rendezvous() override;
  int num_nodes_waiting() override;
  bool lost_participants() override;
  bool participant_lost() override;
  void record_failure(const std::string& text) override;
  std::optional<std::string> first_failure(int round) override;
  bool exit_barrier(std::chrono::milliseconds timeout, bool skip_dead) override;
  void linger(std::chrono::milliseconds timeout) override;
  void set_closed() override;
  bool is_closed() override;
  void shutdown() override;
  std::string describe() const override;
  bool hosts_store() const override { return keep_alive_ != nullptr; }

 private:
  /// Where this node stands in the protocol.
  enum class Position {
    kNone,         // in no round
    kSlot,         // holds slot_ in open round round_
    kParticipant,  // took part in complete round round_ (table_)
    kWaiter,       // waits for the round after round_ (waiter_ > 0: registered)
    kLateWaiting,  // join_running_round: entry late_ of running round round_, no room yet
    kLate,         // join_running_round: admitted into round round_ as late node late_
  };
  struct StateView {
    std::optional<std::string> raw;  // for CAS; nullopt: key absent
    RoundState state;
  };
  /// What this node has seen of an open round, on its own clock.
  struct OpenRoundWatch {
    int64_t arrived = -1;
    size_t dropped = 0;
    RdzvClock::time_point progress_at;
    RdzvClock::time_point next_scan;
    std::optional<RdzvClock::time_point> min_since, complete_since;
    std::map<int64_t, RdzvClock::time_point> missing_since;
  };
  /// What a waiter has seen of the complete round it waits behind.
  struct WaitWatch {
    int64_t left = -1;
    RdzvClock::time_point progress_at;
    RdzvClock::time_point next_scan;
    std::vector<NodeRecord> table;  // read at the first scan
  };

  std::string where() const;
  StateView read_state();
  Error closed_error() const;

  // protocol.cpp: the open round.
  void take_slot(int round);
  void step_open_round(const StateView& sv);
  bool slot_alive(int round, int64_t slot);
  void drop_slot(int round, int64_t slot);
  void try_complete(const StateView& sv, const std::vector<int64_t>& included);
  std::vector<NodeRecord> read_table(const RoundState& s);

  // protocol_rounds.cpp: the complete round and the waiting.
  std::optional<RendezvousInfo> finish_round(const StateView& sv,
                                             const std::vector<NodeRecord>& table,
                                             RdzvClock::time_point deadline);
  RendezvousInfo make_info(const std::vector<NodeRecord>& table, int rank) const;
  bool share_workers_store(RendezvousInfo& info, int round) const;
  std::optional<RendezvousInfo> step_late(const StateView& sv);
  int count_alive_ahead(int round, const std::vector<NodeRecord>& table);
  std::vector<std::string> admitted_late(int round);
  void register_waiter(const StateView& sv, bool leaver);
  void step_waiting(const StateView& sv);
  void mark_left(int round, int64_t slot, int participants);
  void advance_round(int round);
  void leave_round(bool wait_for_next);
  void withdraw();
  [[noreturn]] void throw_timeout(const StateView& sv);
  std::string describe_arrivals(int round);

  std::shared_ptr<void> keep_alive_;  // declared first: destroyed last
  std::shared_ptr<RendezvousBackend> backend_;
  RendezvousConfig config_;
  RendezvousKeys keys_;
  std::chrono::milliseconds ttl_;
  NodeRecord self_;
  std::unique_ptr<HeartbeatThread> heartbeat_;
  bool shut_down_ = false;

  Position position_ = Position::kNone;
  int round_ = 0;
  int64_t slot_ = 0;
  int64_t waiter_ = 0;
  // kLateWaiting / kLate: our entry under RendezvousKeys::late(round_), and
  // when the room check (a scan of every node's heartbeat) may run again.
  int64_t late_ = 0;
  RdzvClock::time_point late_next_scan_;
  OpenRoundWatch open_;
  WaitWatch wait_;
  // kParticipant: the round's table, our rank, and the ring check's state.
  std::vector<NodeRecord> table_;
  int rank_ = 0;
  RdzvClock::time_point next_lost_check_;
};

}  // namespace dtrain::detail
