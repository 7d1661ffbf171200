// SPDX-License-Identifier: Apache-2.0
// The flight recorder's ring buffer, the per-communicator sequence counters, the wait list, and
// the answer a rank gives when a peer asks what it did.
#include "tessel/dist/record.h"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <sstream>
#include <type_traits>

namespace tessel::dist {

static_assert(std::is_trivially_copyable_v<Record>, "records travel between ranks as bytes");
static_assert(std::is_trivially_copyable_v<PeerQuery>);
static_assert(std::is_trivially_copyable_v<PeerReply>);

namespace {

template <size_t N>
void copy_label(std::array<char, N>& dst, const std::string& src) {
  dst.fill('\0');
  std::memcpy(dst.data(), src.data(), std::min(src.size(), N - 1));
}

double process_start_s() {
  static const double start = [] {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  }();
  return start;
}

}  // namespace

std::string describe(const Record& r) {
  std::ostringstream out;
  out << op_kind_name(r.kind);
  if (is_reduction(r.kind)) out << "(" << reduce_op_name(r.reduce) << ")";
  out << " #" << r.seq;
  if (r.has_tensor) out << " " << dtype_name(r.dtype) << " " << r.shape;
  if (r.kind == OpKind::Broadcast) out << " root " << r.peer;
  if (r.kind == OpKind::Send) out << " to " << r.peer << " tag " << r.tag;
  if (r.kind == OpKind::Recv) out << " from " << r.peer << " tag " << r.tag;
  return out.str();
}

double RankContext::now_s() {
  // The coarse monotonic clock (a few ms resolution) costs a few ns instead of tens: it is read on
  // every call, and deadlines are seconds.
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9 - process_start_s();
}

RankContext::RankContext(int world_rank, size_t capacity)
    : world_rank_(world_rank), ring_(std::max<size_t>(capacity, 16)) {}

std::string RankContext::unique_label(const std::string& base) {
  std::lock_guard lock(mutex_);
  int n = ++label_uses_[base];
  std::string label = n == 1 ? base : base + "#" + std::to_string(n);
  if (label.size() >= kLabelBytes) label = label.substr(label.size() - (kLabelBytes - 1));
  return label;
}

std::shared_ptr<LabelState> RankContext::label_state(const std::string& label) {
  std::lock_guard lock(mutex_);
  std::shared_ptr<LabelState>& s = labels_[label];
  if (!s) {
    s = std::make_shared<LabelState>();
    s->label = label;
  }
  return s;
}

Record RankContext::issue(LabelState& s, const OpCall& call) {
  Record r;
  r.kind = call.kind;
  r.reduce = call.reduce;
  r.peer = call.peer;
  r.tag = call.tag;
  const Tensor& t = call.subject();
  if (t.defined()) {
    r.has_tensor = true;
    r.dtype = t.dtype();
    r.shape = t.shape();
  }
  copy_label(r.label, s.label);
  std::lock_guard lock(mutex_);
  r.serial = ++issued_;  // from 1: a record never issued has serial 0 and matches no slot
  if (is_collective(call.kind)) {
    r.seq = ++s.coll_seq;
    s.last_coll = r;
  } else {
    r.seq = ++s.p2p_seq;
    s.last_p2p = r;
  }
  ring_[r.serial % ring_.size()] = r;
  return r;
}

const Record* RankContext::find(const std::string& label, uint64_t seq, bool p2p) const {
  // Newest first: the record asked about is almost always among the last few.
  size_t n = std::min<uint64_t>(issued_, ring_.size());
  for (size_t i = 0; i < n; ++i) {
    const Record& r = ring_[(issued_ - i) % ring_.size()];
    if (r.seq == seq && is_collective(r.kind) != p2p && label == r.label.data()) return &r;
  }
  return nullptr;
}

Record RankContext::current(const Record& copy) const {
  const Record& r = ring_[copy.serial % ring_.size()];
  return r.serial == copy.serial ? r : copy;
}

void RankContext::set_state_locked(const Record& r, OpState state) {
  Record& slot = ring_[r.serial % ring_.size()];
  if (slot.serial == r.serial) slot.state = state;
}

void RankContext::set_state(const Record& r, OpState state) {
  std::lock_guard lock(mutex_);
  set_state_locked(r, state);
}

uint64_t RankContext::begin_wait(const Record& r, std::shared_ptr<const CommInfo> comm,
                                 double deadline_s) {
  std::lock_guard lock(mutex_);
  set_state_locked(r, OpState::Running);
  uint64_t id = next_wait_++;
  waits_.push_back({id, r, std::move(comm), now_s(), deadline_s});
  return id;
}

void RankContext::end_wait(uint64_t id, OpState final_state) {
  std::lock_guard lock(mutex_);
  for (auto it = waits_.begin(); it != waits_.end(); ++it) {
    if (it->id != id) continue;
    set_state_locked(it->record, final_state);
    waits_.erase(it);
    return;
  }
}

std::vector<WaitInfo> RankContext::waits() const {
  std::lock_guard lock(mutex_);
  return waits_;
}

std::string RankContext::now_locked() const {
  if (waits_.empty()) {
    return finished_ ? "finished (returned without issuing more calls)"
                     : "not waiting in any communication call";
  }
  std::ostringstream out;
  double now = now_s();
  for (size_t i = 0; i < waits_.size(); ++i) {
    const WaitInfo& w = waits_[i];
    out << (i ? "; " : "") << "in " << describe(w.record) << " on '" << w.record.label.data()
        << "' for " << std::fixed;
    out.precision(1);
    out << (now - w.started_s) << " s";
  }
  return out.str();
}

std::string RankContext::now_doing() const {
  std::lock_guard lock(mutex_);
  return now_locked();
}

PeerReply RankContext::answer(const PeerQuery& q) const {
  PeerReply reply;
  reply.answered = true;
  std::string label(q.label.data());
  std::lock_guard lock(mutex_);
  auto it = labels_.find(label);
  if (it != labels_.end() && (it->second->coll_seq > 0 || it->second->p2p_seq > 0)) {
    const LabelState& s = *it->second;
    reply.known_label = true;
    reply.last_seq = q.p2p ? s.p2p_seq : s.coll_seq;
    reply.has_last = reply.last_seq > 0;
    reply.last = current(q.p2p ? s.last_p2p : s.last_coll);
    if (const Record* at = find(label, q.seq, q.p2p)) {
      reply.has_at = true;
      reply.at = *at;
    }
  }
  copy_label(reply.now, now_locked());
  return reply;
}

std::vector<Record> RankContext::recent(size_t n) const {
  std::lock_guard lock(mutex_);
  n = std::min<uint64_t>({n, issued_, ring_.size()});
  std::vector<Record> out;
  for (size_t i = n; i > 0; --i) out.push_back(ring_[(issued_ - (i - 1)) % ring_.size()]);
  return out;
}

uint64_t RankContext::issued_count() const {
  std::lock_guard lock(mutex_);
  return issued_;
}

std::shared_ptr<RankContext> process_context_ptr() {
  // Never destroyed: the watchdog thread may still read it while static objects are torn down.
  static auto* ctx = new std::shared_ptr<RankContext>(std::make_shared<RankContext>());
  return *ctx;
}

RankContext& process_context() {
  return *process_context_ptr();
}

}  // namespace tessel::dist
