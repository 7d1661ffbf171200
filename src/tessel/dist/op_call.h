// SPDX-License-Identifier: Apache-2.0
// One communication call, described as data: which collective, its tensors, root or peer, tag and
// per-rank counts. The public Communicator API builds an OpCall, checks it once, records it, and
// hands the same object to whichever backend (MPI, threads, NCCL) executes it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tessel/tensor/tensor.h"

namespace tessel::dist {

enum class ReduceOp : uint8_t { Sum, Avg, Max };

enum class OpKind : uint8_t {
  AllReduce,
  ReduceScatter,
  AllGather,
  AllGatherV,
  AllToAll,
  AllToAllV,
  Broadcast,
  Send,
  Recv,
  Barrier,
  Split,
};

std::string_view reduce_op_name(ReduceOp op);  // "sum", "avg", "max"
std::string_view op_kind_name(OpKind kind);    // "all_reduce", ...
// Point-to-point calls (send, recv) have their own sequence numbers: they are not issued by every
// rank, so they cannot be compared across ranks the way collectives are.
inline bool is_collective(OpKind kind) {
  return kind != OpKind::Send && kind != OpKind::Recv;
}
inline bool is_reduction(OpKind kind) {
  return kind == OpKind::AllReduce || kind == OpKind::ReduceScatter;
}

struct OpCall {
  OpKind kind = OpKind::Barrier;
  ReduceOp reduce = ReduceOp::Sum;
  Tensor in;      // the tensor sent (broadcast, send: the only tensor)
  Tensor out;     // the tensor written (recv: the only tensor); may alias `in` for in-place forms
  int peer = -1;  // broadcast root, send destination, recv source
  int tag = 0;
  std::vector<int64_t> counts;      // all_gather_v: elements per rank; all_to_all_v: sent per rank
  std::vector<int64_t> out_counts;  // all_to_all_v: received per rank
  int color = 0, key = 0;           // split

  // The tensor whose dtype and shape describe the call in records and messages.
  const Tensor& subject() const { return in.defined() ? in : out; }
  bool in_place() const;  // `in` and `out` share their first element
};

// Sum of counts before index i (displacements of the v-variants).
std::vector<int64_t> displacements(const std::vector<int64_t>& counts);

}  // namespace tessel::dist
