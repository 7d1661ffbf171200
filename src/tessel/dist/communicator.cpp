// SPDX-License-Identifier: Apache-2.0
// The backend-independent half of every call: argument checks (naming the op, the axis and the
// wrong values), recording, deadlines, and the dispatch to blocking or asynchronous execution.
#include "tessel/dist/communicator.h"

#include <chrono>
#include <numeric>

#include "tessel/dist/comm_time.h"
#include "tessel/dist/diagnosis.h"

namespace tessel::dist {

namespace {

int64_t sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t(0));
}

std::string list(std::span<const int64_t> v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Byte ranges of two tensors' data overlap (both on the same storage).
bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.storage_ptr() != b.storage_ptr() || a.numel() == 0 || b.numel() == 0) return false;
  int64_t a0 = a.offset() * int64_t(a.element_size()), a1 = a0 + int64_t(a.nbytes());
  int64_t b0 = b.offset() * int64_t(b.element_size()), b1 = b0 + int64_t(b.nbytes());
  return a0 < b1 && b0 < a1;
}

OpCall make(OpKind kind, const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::Sum) {
  OpCall c;
  c.kind = kind;
  c.in = in;
  c.out = out;
  c.reduce = op;
  return c;
}

}  // namespace

bool comm_supports(DType) {
  return true;
}

Communicator::Communicator(CommInfo info, std::shared_ptr<RankContext> context)
    : info_(std::make_shared<const CommInfo>(std::move(info))),
      context_(std::move(context)),
      label_state_(context_->label_state(info_->label)) {}

Communicator::~Communicator() {
  lane_.reset();
}

int Communicator::world_rank_of(int r) const {
  TESSEL_CHECK(r >= 0 && r < size(), "world_rank_of: rank ", r, " outside communicator '", label(),
               "' of size ", size());
  return info_->world_ranks[size_t(r)];
}

double Communicator::deadline_for(const Record& r) const {
  return comm_timeouts().for_record(r);
}

void Communicator::check(const OpCall& c) const {
  const std::string_view op = op_kind_name(c.kind);
  const int n = size();
  for (const Tensor* t : {&c.in, &c.out}) {
    if (!t->defined()) continue;
    TESSEL_CHECK(t->device() == device(), op, " on '", label(), "': tensor is on ",
                 t->device().str(), " but the ", backend(), " communicator works on ",
                 device().str());
    TESSEL_CHECK(t->device().is_meta() || t->storage().is_materialized(), op, " on '", label(),
                 "': tensor storage is released");
  }
  if (c.in.defined() && c.out.defined()) {
    TESSEL_CHECK(c.in.dtype() == c.out.dtype(), op, " on '", label(), "': input is ",
                 dtype_name(c.in.dtype()), " but output is ", dtype_name(c.out.dtype()));
  }
  const int64_t in_n = c.in.defined() ? c.in.numel() : 0,
                out_n = c.out.defined() ? c.out.numel() : 0;
  if (is_reduction(c.kind)) {
    TESSEL_CHECK(c.reduce != ReduceOp::Avg || dtype_is_float(c.in.dtype()), op, " on '", label(),
                 "': avg needs a floating dtype, got ", dtype_name(c.in.dtype()));
  }
  auto no_overlap = [&](bool allowed_alias) {
    if (allowed_alias) return;
    TESSEL_CHECK(!overlaps(c.in, c.out), op, " on '", label(),
                 "': input and output overlap without being the in-place form");
  };
  switch (c.kind) {
    case OpKind::AllReduce:
      TESSEL_CHECK(in_n == out_n, op, " on '", label(), "': input has ", in_n, " elements, output ",
                   out_n);
      no_overlap(c.in_place());
      break;
    case OpKind::ReduceScatter:
      TESSEL_CHECK(in_n == out_n * n, op, " on '", label(), "': input has ", in_n,
                   " elements, expected ", n, " ranks x ", out_n, " output elements = ", out_n * n);
      no_overlap(false);
      break;
    case OpKind::AllGather: {
      TESSEL_CHECK(out_n == in_n * n, op, " on '", label(), "': output has ", out_n,
                   " elements, expected ", n, " ranks x ", in_n, " input elements = ", in_n * n);
      bool in_place = c.in.storage_ptr() == c.out.storage_ptr() &&
                      c.in.offset() == c.out.offset() + int64_t(rank()) * in_n;
      no_overlap(in_place);
      break;
    }
    case OpKind::AllGatherV:
      TESSEL_CHECK(int(c.counts.size()) == n, op, " on '", label(), "': ", c.counts.size(),
                   " counts for ", n, " ranks");
      for (int64_t k : c.counts) TESSEL_CHECK(k >= 0, op, ": negative count in ", list(c.counts));
      TESSEL_CHECK(c.counts[size_t(rank())] == in_n, op, " on '", label(), "': counts[", rank(),
                   "] = ", c.counts[size_t(rank())], " but this rank's input has ", in_n,
                   " elements");
      TESSEL_CHECK(sum(c.counts) == out_n, op, " on '", label(), "': counts ", list(c.counts),
                   " sum to ", sum(c.counts), " but the output has ", out_n, " elements");
      no_overlap(false);
      break;
    case OpKind::AllToAll:
      TESSEL_CHECK(in_n == out_n && in_n % n == 0, op, " on '", label(), "': input has ", in_n,
                   " and output ", out_n, " elements; both must be equal and divisible by ", n,
                   " ranks");
      no_overlap(c.in_place());
      break;
    case OpKind::AllToAllV:
      TESSEL_CHECK(int(c.counts.size()) == n && int(c.out_counts.size()) == n, op, " on '", label(),
                   "': ", c.counts.size(), " send counts and ", c.out_counts.size(),
                   " receive counts for ", n, " ranks");
      for (auto* v : {&c.counts, &c.out_counts})
        for (int64_t k : *v) TESSEL_CHECK(k >= 0, op, ": negative count in ", list(*v));
      TESSEL_CHECK(sum(c.counts) == in_n, op, " on '", label(), "': send counts ", list(c.counts),
                   " sum to ", sum(c.counts), " but the input has ", in_n, " elements");
      TESSEL_CHECK(sum(c.out_counts) == out_n, op, " on '", label(), "': receive counts ",
                   list(c.out_counts), " sum to ", sum(c.out_counts), " but the output has ", out_n,
                   " elements");
      no_overlap(false);
      break;
    case OpKind::Broadcast:
      TESSEL_CHECK(c.peer >= 0 && c.peer < n, op, " on '", label(), "': root ", c.peer,
                   " outside 0..", n - 1);
      break;
    case OpKind::Send:
    case OpKind::Recv:
      TESSEL_CHECK(c.peer >= 0 && c.peer < n && c.peer != rank(), op, " on '", label(), "': peer ",
                   c.peer, " must be another rank in 0..", n - 1, " (this is rank ", rank(), ")");
      TESSEL_CHECK(c.tag >= 0 && c.tag <= kMaxTag, op, " on '", label(), "': tag ", c.tag,
                   " outside 0..", kMaxTag);
      break;
    case OpKind::Barrier:
    case OpKind::Split:
      break;
  }
}

void Communicator::run_recorded(Communicator& executor, const OpCall& call, const Record& record) {
  WaitScope wait(*context_, record, info_, deadline_for(record));
  executor.execute(call, record);
}

void Communicator::run(const OpCall& call) {
  check(call);
  Record record = context_->issue(*label_state_, call);
  const auto t0 = std::chrono::steady_clock::now();
  run_recorded(*this, call, record);
  add_blocking_time(label(), std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now() - t0)
                                 .count());
}

WorkPtr Communicator::submit(const OpCall& call) {
  check(call);
  Record record = context_->issue(*label_state_, call);
  return start(call, record);
}

WorkPtr Communicator::start(const OpCall& call, const Record& record) {
  if (!is_collective(call.kind)) return start_p2p(call, record);
  std::lock_guard lock(lane_mutex_);
  if (!lane_) {
    lane_comm_ = make_lane();
    lane_ = std::make_unique<ProgressLane>(label());
  }
  return lane_->submit(
      [this, lane = lane_comm_, call, record] { run_recorded(*lane, call, record); });
}

void Communicator::all_reduce(const Tensor& in, const Tensor& out, ReduceOp op) {
  run(make(OpKind::AllReduce, in, out, op));
}
void Communicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  run(make(OpKind::ReduceScatter, in, out, op));
}
void Communicator::all_gather(const Tensor& in, const Tensor& out) {
  run(make(OpKind::AllGather, in, out));
}
void Communicator::all_gather_v(const Tensor& in, const Tensor& out,
                                std::span<const int64_t> counts) {
  OpCall c = make(OpKind::AllGatherV, in, out);
  c.counts.assign(counts.begin(), counts.end());
  run(c);
}
void Communicator::all_to_all(const Tensor& in, const Tensor& out) {
  run(make(OpKind::AllToAll, in, out));
}
void Communicator::all_to_all_v(const Tensor& in, std::span<const int64_t> in_counts,
                                const Tensor& out, std::span<const int64_t> out_counts) {
  OpCall c = make(OpKind::AllToAllV, in, out);
  c.counts.assign(in_counts.begin(), in_counts.end());
  c.out_counts.assign(out_counts.begin(), out_counts.end());
  run(c);
}
void Communicator::broadcast(const Tensor& t, int root) {
  OpCall c = make(OpKind::Broadcast, t, t);
  c.peer = root;
  run(c);
}
void Communicator::send(const Tensor& t, int dst, int tag) {
  OpCall c = make(OpKind::Send, t, Tensor());
  c.peer = dst;
  c.tag = tag;
  run(c);
}
void Communicator::recv(const Tensor& t, int src, int tag) {
  OpCall c = make(OpKind::Recv, Tensor(), t);
  c.peer = src;
  c.tag = tag;
  run(c);
}
void Communicator::barrier() {
  run(make(OpKind::Barrier, Tensor(), Tensor()));
}

WorkPtr Communicator::all_reduce_async(const Tensor& in, const Tensor& out, ReduceOp op) {
  return submit(make(OpKind::AllReduce, in, out, op));
}
WorkPtr Communicator::reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) {
  return submit(make(OpKind::ReduceScatter, in, out, op));
}
WorkPtr Communicator::all_gather_async(const Tensor& in, const Tensor& out) {
  return submit(make(OpKind::AllGather, in, out));
}
WorkPtr Communicator::all_gather_v_async(const Tensor& in, const Tensor& out,
                                         std::span<const int64_t> counts) {
  OpCall c = make(OpKind::AllGatherV, in, out);
  c.counts.assign(counts.begin(), counts.end());
  return submit(c);
}
WorkPtr Communicator::all_to_all_async(const Tensor& in, const Tensor& out) {
  return submit(make(OpKind::AllToAll, in, out));
}
WorkPtr Communicator::all_to_all_v_async(const Tensor& in, std::span<const int64_t> in_counts,
                                         const Tensor& out, std::span<const int64_t> out_counts) {
  OpCall c = make(OpKind::AllToAllV, in, out);
  c.counts.assign(in_counts.begin(), in_counts.end());
  c.out_counts.assign(out_counts.begin(), out_counts.end());
  return submit(c);
}
WorkPtr Communicator::broadcast_async(const Tensor& t, int root) {
  OpCall c = make(OpKind::Broadcast, t, t);
  c.peer = root;
  return submit(c);
}
WorkPtr Communicator::send_async(const Tensor& t, int dst, int tag) {
  OpCall c = make(OpKind::Send, t, Tensor());
  c.peer = dst;
  c.tag = tag;
  return submit(c);
}
WorkPtr Communicator::recv_async(const Tensor& t, int src, int tag) {
  OpCall c = make(OpKind::Recv, Tensor(), t);
  c.peer = src;
  c.tag = tag;
  return submit(c);
}
WorkPtr Communicator::barrier_async() {
  return submit(make(OpKind::Barrier, Tensor(), Tensor()));
}

std::shared_ptr<Communicator> Communicator::split(int color, int key, const std::string& label) {
  TESSEL_CHECK(color >= 0, "split on '", this->label(), "': color ", color, " must be >= 0");
  OpCall c;
  c.kind = OpKind::Split;
  c.color = color;
  c.key = key;
  Record record = context_->issue(*label_state_, c);
  WaitScope wait(*context_, record, info_, deadline_for(record));
  std::shared_ptr<Communicator> out = split_impl(color, key, context_->unique_label(label), record);
  return out;
}

}  // namespace tessel::dist
