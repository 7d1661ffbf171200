// SPDX-License-Identifier: Apache-2.0
// The step protocol between rank 0 of a tensor-parallel serving group and the other ranks.
#include "tessel/serve/step_mirror.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "tessel/core/error.h"

namespace tessel::serve {
namespace {

constexpr int64_t kHeader = 6;

// Appends a tensor's values (any integer dtype) as i64.
void put(std::vector<int64_t>& out, const Tensor& t) {
  if (t.dtype() == DType::I64) {
    const int64_t* p = t.data<int64_t>();
    out.insert(out.end(), p, p + t.numel());
  } else {
    const int32_t* p = t.data<int32_t>();
    out.insert(out.end(), p, p + t.numel());
  }
}

Tensor take_i64(const int64_t*& at, Shape shape) {
  Tensor t = empty(shape, DType::I64);
  std::memcpy(t.data<int64_t>(), at, size_t(t.numel()) * sizeof(int64_t));
  at += t.numel();
  return t;
}

}  // namespace

StepMirror::StepMirror(dist::CommPtr group, GatherLogits gather)
    : group_(std::move(group)), gather_(std::move(gather)) {
  TESSEL_CHECK(group_ != nullptr, "StepMirror: no communicator");
  TESSEL_CHECK(gather_ != nullptr, "StepMirror: no logits gather");
}

int64_t StepMirror::agree_min(int64_t value) {
  Tensor t = from_data(std::vector<int64_t>{-value}, Shape{1});
  group_->all_reduce(t, dist::ReduceOp::Max);
  return -t.data<int64_t>()[0];
}

Tensor StepMirror::gather_logits(const Tensor& local) {
  if (local.numel() == 0) return local;
  return gather_(local);
}

void StepMirror::send_header(Kind kind, int64_t n, int64_t s, int64_t w, int64_t r, int64_t c) {
  if (idle_) wake();
  Tensor header = from_data(std::vector<int64_t>{int64_t(kind), n, s, w, r, c}, Shape{kHeader});
  group_->broadcast(header, 0);
}

void StepMirror::wake() {
  Tensor one = from_data(std::vector<int64_t>{1}, Shape{1});
  std::vector<dist::WorkPtr> sends;
  for (int r = 1; r < group_->size(); ++r) sends.push_back(group_->send_async(one, r, kWakeTag));
  for (const dist::WorkPtr& w : sends) w->wait();
  idle_ = false;
}

void StepMirror::send_step(const StepTensors& step,
                           const std::vector<std::pair<BlockId, BlockId>>& copies) {
  TESSEL_CHECK(leader(), "StepMirror.send_step on rank ", group_->rank(), " (rank 0 sends)");
  const int64_t n = step.ids.numel(), s = step.seq_lens.numel();
  const int64_t w = step.block_tables.size(1), r = step.rows.numel(), c = int64_t(copies.size());
  std::vector<int64_t> payload;
  payload.reserve(size_t(3 * n + 2 * s + 1 + r + 2 * c + s * w));
  for (const Tensor* t :
       {&step.ids, &step.positions, &step.slots, &step.seq_lens, &step.query_starts, &step.rows})
    put(payload, *t);
  for (const auto& [from, to] : copies) {
    payload.push_back(from);
    payload.push_back(to);
  }
  put(payload, step.block_tables);
  send_header(kStep, n, s, w, r, c);
  const int64_t size = int64_t(payload.size());
  group_->broadcast(from_data(std::move(payload), Shape{size}), 0);
}

void StepMirror::send_idle() {
  TESSEL_CHECK(leader(), "StepMirror.send_idle on rank ", group_->rank(), " (rank 0 sends)");
  if (idle_) return;
  send_header(kIdle, 0, 0, 0, 0, 0);
  idle_ = true;
}

void StepMirror::send_stop() {
  TESSEL_CHECK(leader(), "StepMirror.send_stop on rank ", group_->rank(), " (rank 0 sends)");
  send_header(kStop, 0, 0, 0, 0, 0);
}

// Polled rather than waited for: a blocking MPI receive spins a core for as long as the server
// idles, and a blocking wait would reach the communication deadline and end the job. The sleeps
// grow to 10 ms, which bounds the delay the first step after an idle period sees.
void StepMirror::wait_for_wake() {
  Tensor one = empty(Shape{1}, DType::I64);
  dist::WorkPtr work = group_->recv_async(one, 0, kWakeTag);
  auto pause = std::chrono::microseconds(100);
  while (!work->test()) {
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
  }
}

bool StepMirror::receive(Received& out) {
  TESSEL_CHECK(!leader(), "StepMirror.receive on rank 0 (the other ranks receive)");
  while (true) {
    Tensor header = empty(Shape{kHeader}, DType::I64);
    group_->broadcast(header, 0);
    const int64_t* h = header.data<int64_t>();
    const int64_t kind = h[0];
    if (kind == kStop) return false;
    if (kind == kIdle) {
      wait_for_wake();
      continue;
    }
    TESSEL_CHECK(kind == kStep, "StepMirror: unknown message kind ", kind, " from rank 0");
    const int64_t n = h[1], s = h[2], w = h[3], r = h[4], c = h[5];
    TESSEL_CHECK(n >= 1 && s >= 1 && w >= 1 && r >= 0 && c >= 0, "StepMirror: a step of ", n,
                 " tokens, ", s, " sequences, table width ", w, ", ", r, " rows, ", c, " copies");
    Tensor payload = empty(Shape{3 * n + 2 * s + 1 + r + 2 * c + s * w}, DType::I64);
    group_->broadcast(payload, 0);
    const int64_t* at = payload.data<int64_t>();
    out.step.ids = take_i64(at, Shape{1, n});
    out.step.positions = take_i64(at, Shape{1, n});
    out.step.slots = take_i64(at, Shape{n});
    out.step.seq_lens = take_i64(at, Shape{s});
    out.step.query_starts = take_i64(at, Shape{s + 1});
    out.step.rows = take_i64(at, Shape{r});
    out.copies.clear();
    for (int64_t i = 0; i < c; ++i, at += 2)
      out.copies.emplace_back(BlockId(at[0]), BlockId(at[1]));
    out.step.block_tables = empty(Shape{s, w}, DType::I32);
    int32_t* tables = out.step.block_tables.data<int32_t>();
    for (int64_t i = 0; i < s * w; ++i) tables[i] = int32_t(at[i]);
    return true;
  }
}

}  // namespace tessel::serve
