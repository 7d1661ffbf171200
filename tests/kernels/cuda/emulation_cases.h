// SPDX-License-Identifier: Apache-2.0
// Shared by the emulated tensor-core attention tests: small attention problems (bf16 / f16 inputs
// rounded on the host, the fp64 reference's results) and the NMSE comparison.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/gpu_buffer.h"
#include "tessel/kernels/cuda/attention/attention.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::gpu_test {

struct EmulatedCase {
  int64_t batch, tq, tk, heads, kv_heads, dim;
  bool causal;
  int64_t window;
  bool mask;
};

inline std::string case_name(const EmulatedCase& c, DType dtype) {
  return std::string(dtype_name(dtype)) + " B" + std::to_string(c.batch) + " Tq" +
         std::to_string(c.tq) + " Tk" + std::to_string(c.tk) + " H" + std::to_string(c.heads) +
         " Hkv" + std::to_string(c.kv_heads) + " D" + std::to_string(c.dim) +
         (c.causal ? " causal" : " full") + " w" + std::to_string(c.window) +
         (c.mask ? " mask" : "");
}

// Inputs in `dtype` and in f64 (the same values), and the reference's forward and backward.
struct EmulatedProblem {
  kernels::AttentionDesc desc;
  kernels::cuda::AttentionDims dims;
  Tensor q, k, v, dout, mask;   // dtype (mask i8 or undefined)
  Tensor out, lse, dq, dk, dv;  // f64, the reference's
  Tensor out_narrow, lse_f32;   // the reference's out in dtype, lse in f32

  EmulatedProblem(const EmulatedCase& c, DType dtype, uint64_t seed) {
    std::mt19937_64 rng(seed);
    desc.batch = c.batch;
    desc.q_len = c.tq;
    desc.kv_len = c.tk;
    desc.heads = c.heads;
    desc.kv_heads = c.kv_heads;
    desc.head_dim = c.dim;
    desc.causal = c.causal;
    desc.scale = 1.0 / std::sqrt(double(c.dim));
    desc.window = c.window;
    dims = {c.batch, c.tq, c.tk, c.heads, c.kv_heads, c.dim, c.causal, desc.scale, c.window};
    const Shape qs{c.batch, c.tq, c.heads, c.dim}, ks{c.batch, c.tk, c.kv_heads, c.dim};
    auto random = [&](const Shape& s) {
      std::normal_distribution<double> dist(0.0, 1.0);
      std::vector<double> v(size_t(s.numel()));
      for (double& x : v) x = dist(rng);
      return from_data<double>(v, s).to(dtype);
    };
    q = random(qs);
    k = random(ks);
    v = random(ks);
    dout = random(qs);
    if (c.mask) {
      std::vector<int8_t> m(size_t(c.batch * c.tk));
      for (auto& x : m) x = (rng() % 4) != 0;
      mask = from_data<int8_t>(m, Shape{c.batch, c.tk});
    }
    kernels::ReferenceBackend ref;
    out = empty(qs, DType::F64);
    lse = empty(Shape{c.batch, c.heads, c.tq}, DType::F64);
    ref.attention(desc, q.to(DType::F64), k.to(DType::F64), v.to(DType::F64), mask, out, lse);
    dq = empty(qs, DType::F64);
    dk = empty(ks, DType::F64);
    dv = empty(ks, DType::F64);
    ref.attention_backward(desc, q.to(DType::F64), k.to(DType::F64), v.to(DType::F64), mask, out,
                           lse, dout.to(DType::F64), dq, dk, dv);
    out_narrow = out.to(dtype);
    lse_f32 = lse.to(DType::F32);
  }
  const int8_t* mask_ptr() const { return mask.defined() ? mask.data<int8_t>() : nullptr; }
};

inline kernels::cuda::AttnType attn_type(DType d) {
  return d == DType::F32    ? kernels::cuda::AttnType::F32
         : d == DType::BF16 ? kernels::cuda::AttnType::BF16
                            : kernels::cuda::AttnType::F16;
}
// NMSE bounds of the GPU test (attention_gpu_main.cpp): out, then gradients.
inline double out_bound(DType d) {
  return d == DType::F32 ? 1e-9 : d == DType::BF16 ? 1e-4 : 1e-5;
}
inline double grad_bound(DType d) {
  return d == DType::F32 ? 1e-8 : d == DType::BF16 ? 2e-3 : 1e-4;
}

// Small enough for one emulated thread per CUDA thread on a CPU; every rule of the kernels:
// several key and query blocks, partial tiles, GQA 2:1 and 4:1, Tq != Tk, windows, padding.
inline std::vector<EmulatedCase> emulated_cases() {
  return {
      {1, 70, 70, 2, 1, 64, true, 0, false},   {1, 13, 33, 4, 1, 64, false, 0, true},
      {1, 70, 130, 2, 1, 64, true, 40, false}, {2, 33, 7, 2, 2, 64, true, 0, true},
      {1, 65, 65, 2, 1, 128, true, 0, false},
  };
}

}  // namespace tessel::gpu_test
