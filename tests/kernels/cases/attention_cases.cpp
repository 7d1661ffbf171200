// SPDX-License-Identifier: Apache-2.0
// Attention cases, forward and backward (the backward case runs the forward first and checks
// out, lse, dq, dk and dv): sequence lengths 1..512, head dims 7 / 16 / 64, multi-head, grouped
// and multi-query heads, causal or not, padding masks (one batch row fully masked), decode with a
// KV cache (Tq < Tk) and more queries than keys. The reference is O(T^2 D) in double, so the
// long sequences appear in a few cases only.
#include <cmath>

#include "case_helpers.h"

namespace tessel::testing {

namespace {

struct AttnSpec {
  int64_t batch, tq, tk, heads, kv_heads, dim;
  bool causal, masked;
  double q_scale = 1.0;  // > 1 sharpens the softmax (large running-max corrections)
};

// Batch 0 sees every key, batch 1 loses its last third, batch 2 sees none, batch 3 loses its
// first key (left padding).
Tensor padding_mask(int64_t batch, int64_t tk) {
  Tensor m = ones({batch, tk}, DType::I8);
  int8_t* p = m.data<int8_t>();
  for (int64_t b = 1; b < batch; ++b)
    for (int64_t j = 0; j < tk; ++j) {
      bool keep = b == 1 ? j < tk - tk / 3 : b == 2 ? false : b == 3 ? j > 0 : (j + b) % 5 != 0;
      p[b * tk + j] = keep ? 1 : 0;
    }
  return m;
}

std::string attn_name(const char* kind, const AttnSpec& s, DType dt) {
  std::string variant = std::string(s.causal ? "causal" : "full") + (s.masked ? "_mask" : "") +
                        "_h" + std::to_string(s.heads) + "kv" + std::to_string(s.kv_heads) +
                        (s.q_scale != 1.0 ? "_sharp" : "");
  return std::string(kind) + "/" + variant + "/" + shape_tag({s.batch, s.tq, s.tk, s.dim}) + "/" +
         std::string(dtype_name(dt));
}

kernels::AttentionDesc attn_desc(const AttnSpec& s) {
  kernels::AttentionDesc d;
  d.batch = s.batch;
  d.q_len = s.tq;
  d.kv_len = s.tk;
  d.heads = s.heads;
  d.kv_heads = s.kv_heads;
  d.head_dim = s.dim;
  d.causal = s.causal;
  d.scale = 1.0 / std::sqrt(double(s.dim));
  return d;
}

int64_t in_q(const AttnSpec& s) {
  return s.batch * s.tq * s.heads * s.dim;
}

double attn_flops(const AttnSpec& s) {
  double f = 4.0 * s.batch * s.heads * s.tq * s.tk * s.dim;
  return s.causal ? f / 2 : f;
}

// Inputs: q, k, v, mask (undefined when unmasked) and, for backward, dout.
std::function<Tensors(Generator&)> attn_inputs(const AttnSpec& s, DType dt, bool with_dout) {
  return [=](Generator& gen) {
    Tensors in{random_tensor(gen, {s.batch, s.tq, s.heads, s.dim}, dt, s.q_scale),
               random_tensor(gen, {s.batch, s.tk, s.kv_heads, s.dim}, dt),
               random_tensor(gen, {s.batch, s.tk, s.kv_heads, s.dim}, dt),
               s.masked ? padding_mask(s.batch, s.tk) : Tensor()};
    if (with_dout) in.push_back(random_tensor(gen, {s.batch, s.tq, s.heads, s.dim}, dt));
    return in;
  };
}

OpCase forward_case(const AttnSpec& s, DType dt) {
  OpCase c;
  c.name = attn_name("attention", s, dt);
  c.op = kernels::Op::Attention;
  c.dtype = dt;
  c.make_inputs = attn_inputs(s, dt, false);
  c.make_outputs = [s](const Tensors& in) {
    DType d = in[0].dtype();
    return Tensors{zeros({s.batch, s.tq, s.heads, s.dim}, d),
                   zeros({s.batch, s.heads, s.tq}, kernels::stat_dtype(d))};
  };
  kernels::AttentionDesc desc = attn_desc(s);
  c.run = [desc](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.attention(desc, in[0], in[1], in[2], in[3], out[0], out[1]);
  };
  c.max_nmse = case_helpers::tolerance(dt, 1e-10, 1e-24);
  c.flops = attn_flops(s);
  c.bytes = double(2 * in_q(s) + 2 * s.batch * s.tk * s.kv_heads * s.dim) * dtype_size(dt);
  return c;
}

OpCase backward_case(const AttnSpec& s, DType dt) {
  OpCase c;
  c.name = attn_name("attention_backward", s, dt);
  c.op = kernels::Op::AttentionBackward;
  c.dtype = dt;
  c.make_inputs = attn_inputs(s, dt, true);
  c.make_outputs = [s](const Tensors& in) {
    DType d = in[0].dtype();
    return Tensors{zeros({s.batch, s.tq, s.heads, s.dim}, d),
                   zeros({s.batch, s.heads, s.tq}, kernels::stat_dtype(d)),
                   zeros({s.batch, s.tq, s.heads, s.dim}, d),
                   zeros({s.batch, s.tk, s.kv_heads, s.dim}, d),
                   zeros({s.batch, s.tk, s.kv_heads, s.dim}, d)};
  };
  kernels::AttentionDesc desc = attn_desc(s);
  c.run = [desc](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.attention(desc, in[0], in[1], in[2], in[3], out[0], out[1]);
    be.attention_backward(desc, in[0], in[1], in[2], in[3], out[0], out[1], in[4], out[2], out[3],
                          out[4]);
  };
  c.max_nmse = case_helpers::tolerance(dt, 1e-10, 1e-24);
  c.flops = 2.5 * attn_flops(s);
  c.bytes = double(4 * in_q(s) + 4 * s.batch * s.tk * s.kv_heads * s.dim) * dtype_size(dt);
  return c;
}

}  // namespace

void add_attention_cases(std::vector<OpCase>& v) {
  // {batch, tq, tk, heads, kv_heads, dim, causal, masked, q_scale}; f64 for the cheaper ones.
  const AttnSpec kBoth[] = {
      {2, 1, 1, 4, 4, 16, true, false},   {3, 7, 7, 4, 2, 7, true, true},
      {4, 33, 33, 4, 1, 16, false, true}, {2, 33, 33, 4, 4, 64, true, false, 4.0},
      {3, 1, 33, 4, 1, 64, true, true},   {2, 7, 128, 4, 2, 16, true, false},
      {2, 33, 7, 4, 2, 16, true, false},  {3, 128, 128, 4, 2, 64, true, true},
  };
  const AttnSpec kF32Only[] = {
      {2, 128, 128, 4, 1, 7, false, false},       {1, 512, 512, 4, 1, 64, true, false},
      {3, 512, 512, 4, 4, 16, false, true},       {2, 1, 512, 4, 2, 64, false, false},
      {1, 128, 128, 4, 4, 64, false, false, 4.0},
  };
  for (const AttnSpec& s : kBoth)
    for (DType dt : case_helpers::kCaseDTypes) {
      v.push_back(forward_case(s, dt));
      // With a single key P == 1, so dq and dk are exactly 0 and relative error is undefined.
      if (s.tk > 1) v.push_back(backward_case(s, dt));
    }
  for (const AttnSpec& s : kF32Only) {
    v.push_back(forward_case(s, DType::F32));
    v.push_back(backward_case(s, DType::F32));
  }
}

}  // namespace tessel::testing
