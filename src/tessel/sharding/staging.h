// SPDX-License-Identifier: Apache-2.0
// The collectives of redistribute along one tensor dim, without autograd. The communicator works
// on flat buffers, so a dim other than 0 is first moved to the front (a copy) to make every
// rank's piece one contiguous block, and moved back afterwards. Pieces follow placement.h's rule.
#pragma once

#include "tessel/dist/communicator.h"
#include "tessel/tensor/tensor.h"

namespace tessel::sharding::detail {

// t with dim d moved to the front, and back (copies when d != 0).
Tensor to_front(const Tensor& t, int d);
Tensor from_front(const Tensor& t, int d);

// S(d) -> R: every rank's piece of a dim of global size n, concatenated (all_gather(_v)).
Tensor gather_dim(const Tensor& piece, dist::Communicator& comm, int d, int64_t n);
// R -> S(d): this rank's piece (a copy, no communication).
Tensor slice_dim(const Tensor& full, dist::Communicator& comm, int d);
// P -> R: the sum over ranks (all_reduce into a new tensor).
Tensor sum_all(const Tensor& addend, dist::Communicator& comm);
// P -> S(d): this rank's piece of the sum (reduce_scatter; uneven pieces are padded).
Tensor reduce_scatter_dim(const Tensor& addend, dist::Communicator& comm, int d);
// S(d) -> S(e): this rank's piece along e of the tensor of shape `shape` (all_to_all(_v)).
Tensor all_to_all_dim(const Tensor& piece, dist::Communicator& comm, int d, int e,
                      const Shape& shape);
// S(d) -> P: the piece placed into zeros of the full shape `shape`.
Tensor pad_to_partial(const Tensor& piece, dist::Communicator& comm, int d, const Shape& shape);
// R -> P: the values on rank 0, zeros elsewhere.
Tensor keep_on_first(const Tensor& full, dist::Communicator& comm);

}  // namespace tessel::sharding::detail
