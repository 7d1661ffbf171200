// SPDX-License-Identifier: Apache-2.0
// dist::Communicator: the collectives every parallel mode talks through. One interface, three
// backends (MPI for CPU tensors across processes, threads-as-ranks for fast tests, NCCL for CUDA
// tensors). Every call is checked here once, recorded in the flight recorder, then executed by the
// backend; blocking calls run under a deadline, asynchronous ones return a Work handle.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "tessel/dist/op_call.h"
#include "tessel/dist/record.h"
#include "tessel/dist/work.h"
#include "tessel/tensor/tensor.h"

namespace tessel::dist {

// Data layout: tensors are contiguous, so every call works on flat buffers. "Block r" of a tensor
// split over n ranks is elements [r * numel / n, (r + 1) * numel / n). Gathers concatenate in
// rank order, which is the concatenation along dim 0 when dim 0 holds the ranks.
//
// In-place forms: all_reduce(t) or all_reduce(t, t); all_gather with `in` being block `rank` of
// `out` (out.narrow(0, rank * k, k)); all_to_all(t, t). Any other overlap of in and out is refused.
//
// Every rank of a communicator must issue the same collectives in the same order (blocking and
// asynchronous ones alike); a rank that does not is named by the watchdog when the deadline passes.
class Communicator {
 public:
  Communicator(CommInfo info, std::shared_ptr<RankContext> context);
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return info_->rank; }
  int size() const { return info_->size; }
  const std::string& label() const { return info_->label; }  // the axis label: "world", "tp", ...
  const CommInfo& info() const { return *info_; }
  int world_rank_of(int rank) const;
  virtual std::string_view backend() const = 0;  // "mpi", "threads", "nccl"
  virtual Device device() const { return Device::cpu(); }
  RankContext& context() const { return *context_; }

  // --- blocking ---
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) { all_reduce(t, t, op); }
  void all_reduce(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::Sum);
  // in: n blocks; out (one block) = reduction over ranks of block `rank`.
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::Sum);
  void all_gather(const Tensor& in, const Tensor& out);  // out.numel() == size() * in.numel()
  // counts[r] elements from rank r (counts[rank()] == in.numel(), sum == out.numel()).
  void all_gather_v(const Tensor& in, const Tensor& out, std::span<const int64_t> counts);
  // Block r of `in` goes to rank r; block r of `out` came from rank r.
  void all_to_all(const Tensor& in, const Tensor& out);
  // in_counts[r] elements go to rank r, out_counts[r] come from rank r (both in rank order).
  void all_to_all_v(const Tensor& in, std::span<const int64_t> in_counts, const Tensor& out,
                    std::span<const int64_t> out_counts);
  void broadcast(const Tensor& t, int root);
  void send(const Tensor& t, int dst, int tag = 0);
  void recv(const Tensor& t, int src, int tag = 0);
  void barrier();

  // --- asynchronous: the same calls, returning a handle; tensors stay alive until completion ---
  WorkPtr all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::Sum) {
    return all_reduce_async(t, t, op);
  }
  WorkPtr all_reduce_async(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::Sum);
  WorkPtr reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::Sum);
  WorkPtr all_gather_async(const Tensor& in, const Tensor& out);
  WorkPtr all_gather_v_async(const Tensor& in, const Tensor& out, std::span<const int64_t> counts);
  WorkPtr all_to_all_async(const Tensor& in, const Tensor& out);
  WorkPtr all_to_all_v_async(const Tensor& in, std::span<const int64_t> in_counts,
                             const Tensor& out, std::span<const int64_t> out_counts);
  WorkPtr broadcast_async(const Tensor& t, int root);
  WorkPtr send_async(const Tensor& t, int dst, int tag = 0);
  WorkPtr recv_async(const Tensor& t, int src, int tag = 0);
  WorkPtr barrier_async();

  // Collective: ranks passing the same color form a new communicator, ordered by key (then rank).
  // `label` names the axis in records and messages.
  std::shared_ptr<Communicator> split(int color, int key, const std::string& label);

  // The largest tag send/recv accept.
  static constexpr int kMaxTag = 32767;

 protected:
  // Runs one checked call to completion on this communicator's channel.
  virtual void execute(const OpCall& call, const Record& record) = 0;
  // Starts one checked call. The default queues collectives on the progress lane (a twin made by
  // make_lane()) and runs point-to-point calls through start_p2p().
  virtual WorkPtr start(const OpCall& call, const Record& record);
  virtual WorkPtr start_p2p(const OpCall& call, const Record& record) = 0;
  // A twin on a separate channel with the same info: asynchronous collectives run there, so they
  // never interleave with blocking ones. Collective on first use.
  virtual std::shared_ptr<Communicator> make_lane() = 0;
  virtual std::shared_ptr<Communicator> split_impl(int color, int key, const std::string& label,
                                                   const Record& record) = 0;

  std::shared_ptr<const CommInfo> info_ptr() const { return info_; }
  std::shared_ptr<RankContext> context_ptr() const { return context_; }
  double deadline_for(const Record& r) const;
  // Registers the wait with the recorder, executes on `executor`, and keeps the record's state.
  void run_recorded(Communicator& executor, const OpCall& call, const Record& record);

 private:
  void check(const OpCall& call) const;
  void run(const OpCall& call);
  WorkPtr submit(const OpCall& call);

  std::shared_ptr<const CommInfo> info_;
  std::shared_ptr<RankContext> context_;
  std::shared_ptr<LabelState> label_state_;  // shared with the lane twin (same label)
  std::mutex lane_mutex_;
  std::shared_ptr<Communicator> lane_comm_;
  std::unique_ptr<ProgressLane> lane_;
};

using CommPtr = std::shared_ptr<Communicator>;

// The dtypes communication supports: all of them (bf16/f16 reductions accumulate in f32).
bool comm_supports(DType dtype);

}  // namespace tessel::dist
