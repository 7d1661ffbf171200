// SPDX-License-Identifier: Apache-2.0
// The flight recorder. Every rank remembers, in a ring buffer, the communication calls it issued
// (per-communicator sequence number, op, axis label, shape, dtype, state) and which ones it is
// blocked in right now. A rank whose collective times out asks its peers for their records and
// compares them to name who is behind (the idea of PyTorch's NCCL flight recorder).
#pragma once

#include <array>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tessel/dist/op_call.h"

namespace tessel::dist {

inline constexpr size_t kLabelBytes = 48;

// Who a communicator is: its axis label, this rank's place in it, and every member's world rank
// (messages name both: "rank 1 [world 5]").
struct CommInfo {
  std::string label;
  int rank = 0;
  int size = 1;
  std::vector<int> world_ranks;  // indexed by rank in this communicator
  std::string backend;
};

enum class OpState : uint8_t { Issued, Running, Done, Failed };

// Trivially copyable: peers exchange records as raw bytes.
struct Record {
  uint64_t seq = 0;  // collectives: 1, 2, ... per communicator; send/recv: their own counter
  OpKind kind = OpKind::Barrier;
  ReduceOp reduce = ReduceOp::Sum;
  DType dtype = DType::F32;
  OpState state = OpState::Issued;
  int32_t peer = -1;
  int32_t tag = 0;
  Shape shape;
  bool has_tensor = false;
  uint64_t serial = 0;  // issue number on the issuing rank: its place in that rank's ring
  std::array<char, kLabelBytes> label{};

  std::string label_str() const { return std::string(label.data()); }
};

// "all_reduce(sum) #4 f32 [33]", "broadcast #2 bf16 [7] root 0", "send #1 f32 [7] to 2 tag 5".
std::string describe(const Record& r);

struct PeerQuery {
  std::array<char, kLabelBytes> label{};
  uint64_t seq = 0;
  bool p2p = false;
};

struct PeerReply {
  bool answered = false;     // false: the peer did not reply in time (filled by the asker)
  bool known_label = false;  // the peer has issued something on that communicator
  uint64_t last_seq = 0;     // collectives (or p2p calls, for a p2p query) issued on it so far
  bool has_at = false;       // `at`: its record with the queried sequence number
  Record at;
  bool has_last = false;
  Record last;
  std::array<char, 256> now{};  // what it is blocked in right now
};

// A blocking wait in progress, watched against its deadline.
struct WaitInfo {
  uint64_t id = 0;
  Record record;
  std::shared_ptr<const CommInfo> comm;
  double started_s = 0;
  double deadline_s = 0;
};

// Sequence counters and latest records of one communicator label on one rank, shared by the
// communicator and its asynchronous twin; guarded by the owning RankContext's mutex.
struct LabelState {
  std::string label;
  uint64_t coll_seq = 0, p2p_seq = 0;
  Record last_coll, last_p2p;
};

// One rank's recorder and wait list. An MPI process has one (process_context()); the in-process
// backend has one per thread-rank.
class RankContext {
 public:
  static constexpr size_t kDefaultCapacity = 2048;
  explicit RankContext(int world_rank = 0, size_t capacity = kDefaultCapacity);

  int world_rank() const { return world_rank_; }
  void set_world_rank(int rank) { world_rank_ = rank; }

  // Labels are unique per rank: a second communicator named "tp" becomes "tp#2". Every rank creates
  // communicators in the same order, so the same communicator gets the same label everywhere.
  std::string unique_label(const std::string& base);

  // The counters of a label (created on first use); communicators look theirs up once.
  std::shared_ptr<LabelState> label_state(const std::string& label);
  Record issue(LabelState& state, const OpCall& call);  // assigns the next sequence number
  void set_state(const Record& r, OpState state);

  // A blocking wait on `r` begins (r becomes Running) and ends (r becomes `final_state`).
  uint64_t begin_wait(const Record& r, std::shared_ptr<const CommInfo> comm, double deadline_s);
  void end_wait(uint64_t id, OpState final_state = OpState::Done);
  std::vector<WaitInfo> waits() const;

  PeerReply answer(const PeerQuery& q) const;
  std::string now_doing() const;
  std::vector<Record> recent(size_t n) const;  // newest last
  uint64_t issued_count() const;
  void set_finished() { finished_ = true; }

  static double now_s();  // monotonic seconds since the process started (ms resolution)

 private:
  const Record* find(const std::string& label, uint64_t seq, bool p2p) const;
  Record current(const Record& copy) const;  // the ring's version while it is still there
  void set_state_locked(const Record& r, OpState state);
  std::string now_locked() const;

  int world_rank_;
  mutable std::mutex mutex_;
  std::vector<Record> ring_;
  uint64_t issued_ = 0;
  std::map<std::string, std::shared_ptr<LabelState>> labels_;
  std::map<std::string, int> label_uses_;
  std::vector<WaitInfo> waits_;
  uint64_t next_wait_ = 1;
  bool finished_ = false;
};

// The recorder of this process (used by the MPI and NCCL backends).
RankContext& process_context();
std::shared_ptr<RankContext> process_context_ptr();

// Registers a blocking wait for the duration of a scope: the record is Running inside it, and
// Done or, when the scope ends by an exception, Failed after it.
class WaitScope {
 public:
  WaitScope(RankContext& ctx, const Record& r, std::shared_ptr<const CommInfo> comm,
            double deadline_s)
      : ctx_(ctx),
        id_(ctx.begin_wait(r, std::move(comm), deadline_s)),
        exceptions_(std::uncaught_exceptions()) {}
  ~WaitScope() {
    ctx_.end_wait(id_, std::uncaught_exceptions() > exceptions_ ? OpState::Failed : OpState::Done);
  }
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  RankContext& ctx_;
  uint64_t id_;
  int exceptions_;
};

}  // namespace tessel::dist
