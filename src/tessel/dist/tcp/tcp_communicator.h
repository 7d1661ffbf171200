// SPDX-License-Identifier: Apache-2.0
// The tcp backend: CPU tensors across processes started torchrun-style, without MPI. Calls run over
// the full mesh of tcp::Transport. Reductions are direct: every rank sends block r of its input to
// rank r, which reduces the n contributions in rank order 0..n-1 with reduce_buffers (bf16/f16 in
// one f32 accumulator, a single rounding) and sends the result back to everyone, so every rank
// gets bitwise the same result, equal to the threads backend's. Each rank sends and receives
// (n-1)/n of the data per phase, as a ring does, in one step instead of n-1. Small all-reduces
// (up to kOnePhaseBytes sent per rank) skip the second phase: every rank receives every input and
// reduces them all in the same rank order.
#pragma once

#include <climits>
#include <memory>

#include "tessel/dist/communicator.h"
#include "tessel/dist/tcp/transport.h"

namespace tessel::dist {

class TcpCommunicator : public Communicator {
 public:
  TcpCommunicator(std::shared_ptr<tcp::Transport> transport, uint64_t channel, CommInfo info,
                  std::shared_ptr<RankContext> context);
  std::string_view backend() const override { return "tcp"; }

  static constexpr size_t kOnePhaseBytes = 256 * 1024;

 protected:
  void execute(const OpCall& call, const Record& record) override;
  WorkPtr start_p2p(const OpCall& call, const Record& record) override;
  std::shared_ptr<Communicator> make_lane() override;
  std::shared_ptr<Communicator> split_impl(int color, int key, const std::string& label,
                                           const Record& record) override;

 private:
  // Point-to-point on this communicator's channel; ranks are this communicator's.
  // kCurrent: the tag of the collective being executed.
  static constexpr int32_t kCurrent = INT32_MIN;
  void put(int r, const void* data, size_t bytes, DType dtype, int32_t tag = kCurrent);
  // Receives exactly `bytes` from rank r into `dst` (checked: a mismatch names both ranks).
  void get_into(int r, void* dst, size_t bytes, std::string_view what, int32_t tag = kCurrent);
  tcp::Message get(int r, int32_t tag = kCurrent);

  void run_call(const OpCall& call);
  void reduce(const OpCall& call, bool scatter);
  void gather(const OpCall& call, const std::vector<int64_t>& counts);
  void all_to_all(const OpCall& call, const std::vector<int64_t>& in_counts,
                  const std::vector<int64_t>& out_counts);
  void broadcast(const OpCall& call);
  void barrier();
  void receive(const OpCall& call, tcp::Message m) const;

  std::shared_ptr<tcp::Transport> transport_;
  uint64_t channel_;
  uint64_t splits_ = 0;
  int32_t tag_ = tcp::kCollectiveTag;  // of the collective being executed (one at a time)
};

}  // namespace tessel::dist
