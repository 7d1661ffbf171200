// SPDX-License-Identifier: Apache-2.0
// Attention cases, forward and backward (the backward case runs the forward first and checks
// out, lse, dq, dk and dv): sequence lengths 1..512, head dims 6 / 7 / 16 / 34 / 64, multi-head
// (H 4/4, 7/7), grouped (4/2, 6/2) and multi-query (4/1) heads, causal or not, padding masks (one
// batch row fully masked), Mistral's sliding window (1, 3, 5, 20, 70, 100, 256, = T and > T: the
// last two must equal no window), decode with a KV cache (Tq 1 and 3 < Tk, with and without a
// window) and more queries than keys. The reference is O(T^2 D) in double, so the long sequences
// appear in a few cases only.
#include <algorithm>
#include <cmath>

#include "case_helpers.h"

namespace tessel::testing {

namespace {

struct AttnSpec {
  int64_t batch, tq, tk, heads, kv_heads, dim;
  bool causal, masked;
  double q_scale = 1.0;  // > 1 sharpens the softmax (large running-max corrections)
  int64_t window = 0;    // sliding window (causal only); 0 = unlimited
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
                        (s.q_scale != 1.0 ? "_sharp" : "") +
                        (s.window > 0 ? "_w" + std::to_string(s.window) : "");
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
  d.window = s.window;
  return d;
}

int64_t in_q(const AttnSpec& s) {
  return s.batch * s.tq * s.heads * s.dim;
}

// 4 B H D per visible (query, key) pair, padding ignored.
double attn_flops(const AttnSpec& s) {
  double pairs = double(s.tq) * double(s.tk);
  if (s.causal) {
    pairs = 0;
    for (int64_t i = 0; i < s.tq; ++i) {
      int64_t p = i + s.tk - s.tq, hi = std::min(p + 1, s.tk);
      int64_t lo = s.window > 0 ? std::max<int64_t>(p - s.window + 1, 0) : 0;
      pairs += double(std::max<int64_t>(hi - lo, 0));
    }
  }
  return 4.0 * double(s.batch * s.heads * s.dim) * pairs;
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
  // A window of one key: P == 1, so dq and dk vanish; the kernel's dP - rowsum(P dP) is then the
  // difference of one dot product summed in two orders (D terms of O(1): ~1e-7 in f32, 1e-16 in
  // f64), far below the O(0.1) a wrong mask gives.
  if (s.window == 1) c.zero_max_abs = dt == DType::F64 ? 1e-13 : 1e-5;
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
  // The attention variants of the LLaMA family (Llama, Mistral, Qwen2): GQA 6/2, H 7/7, MQA,
  // sliding windows (shorter than T, equal to T, longer) over padding and GQA, decode steps of 1
  // and 3 queries against a cache (3 < kDirectRows: K and V are read in place), with a window.
  // 200 keys cross several key tiles in every kernel set and dtype (16 to 64 keys per tile), so
  // the window's tile skipping and its partial first tile are both exercised.
  const AttnSpec kLlama[] = {
      {2, 13, 13, 6, 2, 16, true, false},
      {3, 13, 13, 7, 7, 34, false, true},
      {3, 13, 13, 7, 7, 6, true, true},
      {2, 13, 13, 7, 7, 6, true, false, 1.0, 1},
      {3, 13, 13, 6, 2, 16, true, true, 1.0, 5},
      {2, 13, 13, 4, 1, 16, true, false, 1.0, 5},
      {2, 13, 13, 4, 1, 16, true, false, 1.0, 13},
      {2, 13, 13, 4, 1, 16, true, false, 1.0, 1000},
      {3, 1, 40, 6, 2, 16, true, false},
      {3, 1, 40, 6, 2, 16, true, true, 1.0, 5},
      {3, 3, 40, 7, 7, 16, true, false},
      {3, 3, 40, 6, 2, 16, true, true, 1.0, 5},
      {2, 3, 40, 4, 1, 16, true, false, 1.0, 1},
      {2, 7, 128, 4, 2, 16, true, false, 1.0, 20},
      {2, 33, 7, 4, 2, 16, true, false, 1.0, 3},
      {2, 200, 200, 6, 2, 16, true, false, 4.0, 70},
      {4, 200, 200, 4, 1, 7, true, true, 1.0, 100},
  };
  const AttnSpec kF32Only[] = {
      {2, 128, 128, 4, 1, 7, false, false},
      {1, 512, 512, 4, 1, 64, true, false},
      {3, 512, 512, 4, 4, 16, false, true},
      {2, 1, 512, 4, 2, 64, false, false},
      {1, 128, 128, 4, 4, 64, false, false, 4.0},
      // Mistral-like: GQA 8/2 with a 256-key window over 512 tokens, and with padding.
      {1, 512, 512, 8, 2, 64, true, false, 1.0, 256},
      {3, 300, 300, 6, 2, 64, true, true, 1.0, 100},
      {2, 1, 512, 8, 2, 64, true, false, 1.0, 256},
      {2, 3, 512, 8, 2, 64, true, true, 1.0, 256},
  };
  for (const AttnSpec& s : kBoth)
    for (DType dt : case_helpers::kCaseDTypes) {
      v.push_back(forward_case(s, dt));
      // With a single key P == 1, so dq and dk are exactly 0 and relative error is undefined.
      if (s.tk > 1) v.push_back(backward_case(s, dt));
    }
  for (const AttnSpec& s : kLlama)
    for (DType dt : case_helpers::kCaseDTypes) {
      v.push_back(forward_case(s, dt));
      v.push_back(backward_case(s, dt));
    }
  for (const AttnSpec& s : kF32Only) {
    v.push_back(forward_case(s, DType::F32));
    v.push_back(backward_case(s, DType::F32));
  }
}

}  // namespace tessel::testing
