// SPDX-License-Identifier: Apache-2.0
// Names of reductions and ops, in-place detection, displacements of the v-variants.
#include "tessel/dist/op_call.h"

namespace tessel::dist {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
  }
  return "invalid";
}

std::string_view op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::AllReduce:
      return "all_reduce";
    case OpKind::ReduceScatter:
      return "reduce_scatter";
    case OpKind::AllGather:
      return "all_gather";
    case OpKind::AllGatherV:
      return "all_gather_v";
    case OpKind::AllToAll:
      return "all_to_all";
    case OpKind::AllToAllV:
      return "all_to_all_v";
    case OpKind::Broadcast:
      return "broadcast";
    case OpKind::Send:
      return "send";
    case OpKind::Recv:
      return "recv";
    case OpKind::Barrier:
      return "barrier";
    case OpKind::Split:
      return "split";
  }
  return "invalid";
}

bool OpCall::in_place() const {
  return in.defined() && out.defined() && in.numel() > 0 && out.numel() > 0 &&
         in.storage_ptr() == out.storage_ptr() && in.offset() == out.offset();
}

std::vector<int64_t> displacements(const std::vector<int64_t>& counts) {
  std::vector<int64_t> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace tessel::dist
