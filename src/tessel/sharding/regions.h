// SPDX-License-Identifier: Apache-2.0
// The four differentiable communication functions of Megatron-LM's tensor and sequence parallel
// regions (Shoeybi et al. 2019, "f" and "g"; Korthikanti et al. 2022, sequence parallelism). Their
// gradient convention differs from redistribute's: the gradient arriving at a region's output is
// a per-rank addend (Partial), because each rank's downstream work differs.
//
//   function                  forward                      backward
//   copy_to_region (f)        identity                     all_reduce
//   reduce_from_region (g)    all_reduce                   identity
//   gather_from_region        all_gather along dim         reduce_scatter along dim
//   reduce_scatter_to_region  reduce_scatter along dim     all_gather along dim
//
// Each is one redistribution (redistribute.h): copy_to R -> R and gather_from S(dim) -> R with the
// gradient arriving Partial, reduce_from P -> R and reduce_scatter_to P -> S(dim) with the usual
// convention; so their communication and predicted bytes are redistribute's. Pieces along `dim`
// follow placement.h's uneven rule. Every rank of `comm` must call them in the same order,
// forward and backward.
#pragma once

#include <cstdint>

#include "tessel/dist/communicator.h"
#include "tessel/tensor/tensor.h"

namespace tessel::sharding {

Tensor copy_to_region(const Tensor& x, dist::Communicator& comm);
Tensor reduce_from_region(const Tensor& x, dist::Communicator& comm);
// `size`: the gathered size of `dim` (pieces may be uneven, so it is not implied by x).
Tensor gather_from_region(const Tensor& x, dist::Communicator& comm, int dim, int64_t size);
Tensor reduce_scatter_to_region(const Tensor& x, dist::Communicator& comm, int dim);

}  // namespace tessel::sharding
