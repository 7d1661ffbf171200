// SPDX-License-Identifier: Apache-2.0
// Megatron-LM's region functions as redistributions (redistribute.h): the forward and backward
// are redistribute's, so their communication and its predicted bytes are the ones the planner's
// cost model reads.
#include "tessel/sharding/regions.h"

#include "tessel/core/error.h"
#include "tessel/sharding/redistribute.h"

namespace tessel::sharding {

namespace {

void check_dim(const Tensor& x, int dim, std::string_view op) {
  TESSEL_CHECK(x.defined(), op, ": input is undefined");
  TESSEL_CHECK(dim >= 0 && dim < x.ndim(), op, ": dim ", dim, " outside a tensor of shape ",
               x.shape());
}

}  // namespace

// f: the input is replicated, each rank's work after it differs, so the gradients are summed.
Tensor copy_to_region(const Tensor& x, dist::Communicator& comm) {
  TESSEL_CHECK(x.defined(), "copy_to_region: input is undefined");
  return redistribute_local(x, comm, Placement::replicate(), Placement::replicate(), x.shape(),
                            nullptr, GradArrives::Partial);
}

// g: per-rank addends summed; the replicated gradient is every addend's.
Tensor reduce_from_region(const Tensor& x, dist::Communicator& comm) {
  TESSEL_CHECK(x.defined(), "reduce_from_region: input is undefined");
  return redistribute_local(x, comm, Placement::partial(), Placement::replicate(), x.shape());
}

// Sequence parallelism's gather before a Colwise layer: the gradients of the ranks' different
// work are reduce-scattered back to the pieces.
Tensor gather_from_region(const Tensor& x, dist::Communicator& comm, int dim, int64_t size) {
  check_dim(x, dim, "gather_from_region");
  Shape shape = x.shape();
  shape[dim] = size;
  return redistribute_local(x, comm, Placement::shard(dim), Placement::replicate(), shape, nullptr,
                            GradArrives::Partial);
}

// After a Rowwise layer under sequence parallelism: the addends summed into pieces.
Tensor reduce_scatter_to_region(const Tensor& x, dist::Communicator& comm, int dim) {
  check_dim(x, dim, "reduce_scatter_to_region");
  return redistribute_local(x, comm, Placement::partial(), Placement::shard(dim), x.shape());
}

}  // namespace tessel::sharding
