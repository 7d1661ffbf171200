// SPDX-License-Identifier: Apache-2.0
// The global gradient norm of every layout, and the gradient scaling that follows it (the 1/k of
// gradient accumulation, clipping and loss-scale removal folded into one pass). A rank describes
// the gradient it holds as spans of flat tensors (whole gradients, data-parallel buckets, ZeRO
// shards), each in a sharing group, and each mesh axis says per group whether the ranks along it
// hold different elements (their squares add) or the same ones (counted once, at the axis's
// rank 0). The squares come from the backend's multi-tensor kernel, in a fixed order, so the norm
// does not depend on the thread count; one all-reduce per axis carries every group.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessel/dist/communicator.h"
#include "tessel/tensor/tensor.h"

namespace tessel::train {

// Elements [begin, end) of `flat`, a 1-D tensor (a gradient flattened, a bucket, a shard).
struct GradSpan {
  Tensor flat;
  int64_t begin = 0, end = 0;
  int group = 0;
  std::string param;  // the parameter these elements belong to ("" for a span of several)
};

// One mesh axis: `sums[g]` is true when group g's squares add over the ranks of `comm` (each
// holds other elements), false when every rank holds the same elements. A null or one-rank
// communicator is skipped.
struct NormAxis {
  dist::Communicator* comm = nullptr;
  std::vector<bool> sums;
};

struct GlobalSquareSum {
  double total = 0;              // over every rank, each element once
  bool local_nonfinite = false;  // this rank's own spans hold an inf or NaN
};

// Makes a span's flat tensor resident while it is read (write false) or scaled (write true),
// until the returned handle is dropped (null: plain memory, nothing to hold). Memory offload keeps
// ZeRO-2/3's gradient shards in chunks that move between tiers (docs/MEMORY.md).
using SpanHold = std::function<std::shared_ptr<void>(const Tensor& flat, bool write)>;

// Collective over every axis, in the order given (all ranks must pass the same axes). With
// `hold`, consecutive spans of one flat tensor are read while it is held, one tensor at a time;
// each span's square sum is its own (the kernel's per-tensor sums), so the result is the same.
GlobalSquareSum global_square_sum(std::span<const GradSpan> spans, int groups,
                                  std::span<const NormAxis> axes, const SpanHold& hold = {});

// The whole of `grad` as one span.
GradSpan whole_span(const Tensor& grad, int group = 0, std::string param = {});

// Multiplies every span by `factor`, rounded once to the span's dtype (as torch multiplies by a
// same-dtype scalar).
void scale_spans(std::span<const GradSpan> spans, double factor, const SpanHold& hold = {});

}  // namespace tessel::train
