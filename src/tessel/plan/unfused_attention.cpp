// SPDX-License-Identifier: Apache-2.0
#include "tessel/plan/unfused_attention.h"

#include "tessel/core/dtype.h"
#include "tessel/core/error.h"

namespace tessel::plan {

bool is_attention(const OpNode& op) {
  return op.kernel == "attention" || op.kernel == "attention_backward";
}

bool is_unfused_attention(const OpNode& op) {
  return is_attention(op) && op.detail == kUnfusedDetail;
}

namespace {

const kernels::TensorDesc& input(const OpNode& op, size_t i) {
  TESSEL_CHECK(op.inputs.size() > i && op.inputs[i].shape.ndim() == 4, op.kernel,
               ": expected q, k and v of rank 4 ([b, s, heads, d]) as its first inputs, got ",
               op.inputs.size(), " inputs");
  return op.inputs[i];
}

}  // namespace

ScoreShape score_shape(const OpNode& op) {
  const kernels::TensorDesc& q = input(op, 0);
  const kernels::TensorDesc& k = input(op, 1);
  return {q.shape[1], k.shape[1], q.shape[3]};
}

Cost unfused_attention_cost(const OpNode& op) {
  const kernels::TensorDesc& q = input(op, 0);
  const kernels::TensorDesc& v = input(op, 2);
  const ScoreShape s = score_shape(op);
  const double scores = double(q.shape[0]) * double(q.shape[2]) * double(s.s_q) * double(s.s_k);
  const double d = double(s.d), dv = double(v.shape[3]);
  const double e = double(dtype_size(q.dtype));
  Cost c = op.cost;
  if (op.kernel == "attention") {
    c.matmul_flops = 2 * scores * (d + dv);
    c.flops = c.matmul_flops + 5 * scores;
    c.bytes_read += 2 * scores * e;
    c.bytes_written += 2 * scores * e;
  } else {
    c.matmul_flops = 4 * scores * (d + dv);
    c.flops = c.matmul_flops + 4 * scores;
    c.bytes_read += 5 * scores * e;
    c.bytes_written += 2 * scores * e;
  }
  return c;
}

}  // namespace tessel::plan
