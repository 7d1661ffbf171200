// SPDX-License-Identifier: Apache-2.0
// Differentiable inverted dropout (Srivastava et al. 2014): zero each element with probability p
// and scale the rest by 1/(1-p). The mask is a function of the generator's (seed, offset), never
// stored: backward and activation recomputation regenerate it. A positional draw
// (core/positional_draws.h) makes it a function of (seed, offset, site, the element's index in
// the one-process tensor) instead, and the generator does not advance: the layout-invariant
// masks of docs/PARALLEL.md ("Dropout").
#pragma once

#include <cstdint>

#include "tessel/core/positional_draws.h"
#include "tessel/core/rng.h"
#include "tessel/tensor/tensor.h"

namespace tessel::ops {

// Returns x itself when !training or p == 0. Draws numel(x) numbers from `generator` (default:
// the process-wide one), or with `positional`, reads the positional stream of its site (x is then
// its micro-batch's part of dim 0 of the step's one-process tensor) and leaves the generator.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* generator = nullptr,
               const PositionalDraw* positional = nullptr);

// Where a tensor lies inside the full tensor one process would drop out: indices
// [start, start + x.size(dim)) of a dim whose full size is `length`, every other dim whole
// (a rank's sequence piece under sequence parallelism).
struct DropoutPiece {
  int dim = 0;
  int64_t start = 0;
  int64_t length = 0;
};

// dropout() of the full tensor, restricted to the piece x: every element of x gets the mask
// element that dropout(full) draws at its index in the full tensor, and the generator advances by
// numel(full), exactly as dropout(full) would, so the ranks holding the pieces stay in step with
// one process. A piece covering the whole dim is dropout(x). A positional draw's part of dim 0
// composes with the piece (under more than one part, piece.dim must be another dim).
Tensor dropout_piece(const Tensor& x, double p, const DropoutPiece& piece, bool training = true,
                     Generator* generator = nullptr, const PositionalDraw* positional = nullptr);

}  // namespace tessel::ops
