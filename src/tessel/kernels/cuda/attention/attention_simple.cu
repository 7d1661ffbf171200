// SPDX-License-Identifier: Apache-2.0
// Plain-FMA attention kernels (no tensor cores): the f32 path, head dims the tensor-core kernel
// does not take, and the backward pass. One warp per query row (forward, dQ) or per key row (dK,
// dV); lane l takes key (or query) l of each chunk of 32 and computes its whole dot product, then
// the warp shares the 32 weights by shuffles to accumulate the output row, lane l owning columns
// l, l + 32, ... The forward is the online softmax of FlashAttention (Dao et al. 2022): no score
// matrix is stored. The backward recomputes P = exp(scale * q.k - lse) from the saved lse and
// D_i = rowsum(dO * O) (FlashAttention-2's backward); every output row is summed by one warp in
// a fixed order, so the result is deterministic without atomics.
#include "tessel/kernels/cuda/attention/attention_math.h"
#include "tessel/kernels/cuda/attention/device_common.cuh"
#include "tessel/kernels/cuda/attention/launch_internal.h"

namespace tessel::kernels::cuda::detail {

namespace {

constexpr int kWarps = 4;
constexpr int kCols = int(kMaxHeadDim / 32);  // output columns per lane

struct Problem {
  int64_t batch, tq, tk, heads, kv_heads, group, dim;
  float scale;
  Visibility vis;
  const int8_t* mask;

  __device__ int64_t q_at(int64_t b, int64_t i, int64_t h) const {
    return ((b * tq + i) * heads + h) * dim;
  }
  __device__ int64_t kv_at(int64_t b, int64_t j, int64_t h) const {
    return ((b * tk + j) * kv_heads + h) * dim;
  }
  __device__ bool key_kept(int64_t b, int64_t j) const {
    return mask == nullptr || mask[b * tk + j] != 0;
  }
};

Problem make_problem(const AttentionDims& d, const int8_t* mask) {
  return {d.batch,    d.q_len,        d.kv_len,
          d.heads,    d.kv_heads,     d.heads / d.kv_heads,
          d.head_dim, float(d.scale), Visibility::make(d.q_len, d.kv_len, d.causal, d.window),
          mask};
}

template <typename T>
__device__ float dot_row(const float* a, const T* b, int64_t dim) {
  float acc = 0.f;
  for (int64_t c = 0; c < dim; ++c) acc = fmaf(a[c], to_f32(b[c]), acc);
  return acc;
}

template <typename T>
__device__ void load_row(float* dst, const T* src, int64_t dim, int lane) {
  for (int64_t c = lane; c < dim; c += 32) dst[c] = to_f32(src[c]);
  __syncwarp();
}

// acc[m] (column lane + 32 m) += w * row[column].
template <typename T>
__device__ void axpy_row(float* acc, float w, const T* row, int64_t dim, int lane) {
#pragma unroll
  for (int m = 0; m < kCols; ++m) {
    int64_t c = lane + 32 * m;
    if (c < dim) acc[m] = fmaf(w, to_f32(row[c]), acc[m]);
  }
}

template <typename T>
__device__ void store_row(T* dst, const float* acc, float factor, int64_t dim, int lane) {
#pragma unroll
  for (int m = 0; m < kCols; ++m) {
    int64_t c = lane + 32 * m;
    if (c < dim) dst[c] = from_f32<T>(acc[m] * factor);
  }
}

// One warp per query row (b, h, i), rows ordered with i fastest.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    forward_kernel(Problem p, const T* q, const T* k, const T* v, T* out, float* lse) {
  __shared__ float qs[kWarps][kMaxHeadDim];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= p.batch * p.heads * p.tq) return;
  const int64_t i = row % p.tq, h = (row / p.tq) % p.heads, b = row / (p.tq * p.heads);
  const int64_t kvh = h / p.group;
  float* qr = qs[warp];
  load_row(qr, q + p.q_at(b, i, h), p.dim, lane);
  float m = -INFINITY, l = 0.f, o[kCols] = {};
  const int64_t kb = p.vis.key_begin(i), ke = p.vis.key_end(i);
  for (int64_t j0 = kb; j0 < ke; j0 += 32) {
    const int64_t j = j0 + lane;
    float s = -INFINITY;
    if (j < ke && p.key_kept(b, j)) s = p.scale * dot_row(qr, k + p.kv_at(b, j, kvh), p.dim);
    const float m_new = fmaxf(m, warp_max(s));
    if (m_new == -INFINITY) continue;  // nothing visible yet (uniform over the warp)
    const float w = s == -INFINITY ? 0.f : expf(s - m_new);
    const float corr = m == -INFINITY ? 0.f : expf(m - m_new);
    l = l * corr + warp_sum(w);
    m = m_new;
#pragma unroll
    for (int c = 0; c < kCols; ++c) o[c] *= corr;
    const int n = int(ke - j0 < 32 ? ke - j0 : 32);
    for (int u = 0; u < n; ++u) {
      const float wu = __shfl_sync(0xffffffffu, w, u);
      if (wu != 0.f) axpy_row(o, wu, v + p.kv_at(b, j0 + u, kvh), p.dim, lane);
    }
  }
  store_row(out + p.q_at(b, i, h), o, l > 0.f ? 1.f / l : 0.f, p.dim, lane);
  if (lane == 0) lse[(b * p.heads + h) * p.tq + i] = l > 0.f ? m + logf(l) : -INFINITY;
}

// dQ and D_i = rowsum(dO * O): one warp per query row.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    dq_kernel(Problem p, const T* q, const T* k, const T* v, const T* out, const float* lse,
              const T* dout, T* dq, float* rowdot) {
  __shared__ float qs[kWarps][kMaxHeadDim], gs[kWarps][kMaxHeadDim];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= p.batch * p.heads * p.tq) return;
  const int64_t i = row % p.tq, h = (row / p.tq) % p.heads, b = row / (p.tq * p.heads);
  const int64_t kvh = h / p.group, stat = (b * p.heads + h) * p.tq + i;
  float* qr = qs[warp];
  float* gr = gs[warp];
  load_row(qr, q + p.q_at(b, i, h), p.dim, lane);
  load_row(gr, dout + p.q_at(b, i, h), p.dim, lane);
  float part = 0.f;
  for (int64_t c = lane; c < p.dim; c += 32) part += gr[c] * to_f32(out[p.q_at(b, i, h) + c]);
  const float di = warp_sum(part);
  if (lane == 0) rowdot[stat] = di;
  const float row_lse = lse[stat];
  float acc[kCols] = {};
  if (row_lse != -INFINITY) {  // a row that saw no key passes no gradient
    const int64_t kb = p.vis.key_begin(i), ke = p.vis.key_end(i);
    for (int64_t j0 = kb; j0 < ke; j0 += 32) {
      const int64_t j = j0 + lane;
      float ds = 0.f;
      if (j < ke && p.key_kept(b, j)) {
        const float pr = expf(p.scale * dot_row(qr, k + p.kv_at(b, j, kvh), p.dim) - row_lse);
        const float dp = dot_row(gr, v + p.kv_at(b, j, kvh), p.dim);
        ds = pr * (dp - di) * p.scale;
      }
      const int n = int(ke - j0 < 32 ? ke - j0 : 32);
      for (int u = 0; u < n; ++u) {
        const float du = __shfl_sync(0xffffffffu, ds, u);
        if (du != 0.f) axpy_row(acc, du, k + p.kv_at(b, j0 + u, kvh), p.dim, lane);
      }
    }
  }
  store_row(dq + p.q_at(b, i, h), acc, 1.f, p.dim, lane);
}

// dK and dV: one warp per key row (b, kvh, j), summing over every query head of its group.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    dkv_kernel(Problem p, const T* q, const T* k, const T* v, const float* lse, const T* dout,
               const float* rowdot, T* dk, T* dv) {
  __shared__ float ks[kWarps][kMaxHeadDim], vs[kWarps][kMaxHeadDim];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  if (row >= p.batch * p.kv_heads * p.tk) return;
  const int64_t j = row % p.tk, kvh = (row / p.tk) % p.kv_heads, b = row / (p.tk * p.kv_heads);
  float* kr = ks[warp];
  float* vr = vs[warp];
  load_row(kr, k + p.kv_at(b, j, kvh), p.dim, lane);
  load_row(vr, v + p.kv_at(b, j, kvh), p.dim, lane);
  float gk[kCols] = {}, gv[kCols] = {};
  if (p.key_kept(b, j)) {
    const int64_t qb = p.vis.query_begin(j), qe = p.vis.query_end(j);
    for (int64_t h = kvh * p.group; h < (kvh + 1) * p.group; ++h) {
      for (int64_t i0 = qb; i0 < qe; i0 += 32) {
        const int64_t i = i0 + lane;
        float pr = 0.f, ds = 0.f;
        if (i < qe && p.vis.sees(i, j)) {
          const int64_t stat = (b * p.heads + h) * p.tq + i;
          const float row_lse = lse[stat];
          if (row_lse != -INFINITY) {
            pr = expf(p.scale * dot_row(kr, q + p.q_at(b, i, h), p.dim) - row_lse);
            const float dp = dot_row(vr, dout + p.q_at(b, i, h), p.dim);
            ds = pr * (dp - rowdot[stat]) * p.scale;
          }
        }
        const int n = int(qe - i0 < 32 ? qe - i0 : 32);
        for (int u = 0; u < n; ++u) {
          const float pu = __shfl_sync(0xffffffffu, pr, u);
          const float du = __shfl_sync(0xffffffffu, ds, u);
          if (pu != 0.f) axpy_row(gv, pu, dout + p.q_at(b, i0 + u, h), p.dim, lane);
          if (du != 0.f) axpy_row(gk, du, q + p.q_at(b, i0 + u, h), p.dim, lane);
        }
      }
    }
  }
  store_row(dk + p.kv_at(b, j, kvh), gk, 1.f, p.dim, lane);
  store_row(dv + p.kv_at(b, j, kvh), gv, 1.f, p.dim, lane);
}

unsigned blocks_for(int64_t rows) {
  return unsigned((rows + kWarps - 1) / kWarps);
}

template <typename T>
void forward_typed(const AttentionDims& d, const void* q, const void* k, const void* v,
                   const int8_t* mask, void* out, float* lse, cudaStream_t stream) {
  const Problem p = make_problem(d, mask);
  const int64_t rows = d.batch * d.heads * d.q_len;
  if (rows == 0) return;
  TESSEL_LAUNCH(blocks_for(rows), kWarps * 32, 0, stream, forward_kernel<T>)
  (p, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
   static_cast<T*>(out), lse);
  check_launch("attention forward (plain)");
}

template <typename T>
void backward_typed(const AttentionDims& d, const void* q, const void* k, const void* v,
                    const int8_t* mask, const void* out, const float* lse, const void* dout,
                    void* dq, void* dk, void* dv, float* rowdot, cudaStream_t stream) {
  const Problem p = make_problem(d, mask);
  const int64_t q_rows = d.batch * d.heads * d.q_len, k_rows = d.batch * d.kv_heads * d.kv_len;
  const T *tq = static_cast<const T*>(q), *tk = static_cast<const T*>(k);
  const T *tv = static_cast<const T*>(v), *tg = static_cast<const T*>(dout);
  if (q_rows > 0) {
    TESSEL_LAUNCH(blocks_for(q_rows), kWarps * 32, 0, stream, dq_kernel<T>)
    (p, tq, tk, tv, static_cast<const T*>(out), lse, tg, static_cast<T*>(dq), rowdot);
    check_launch("attention backward dq (plain)");
  }
  if (k_rows > 0) {  // reads the rowdot the dq kernel wrote (same stream, so after it)
    TESSEL_LAUNCH(blocks_for(k_rows), kWarps * 32, 0, stream, dkv_kernel<T>)
    (p, tq, tk, tv, lse, tg, rowdot, static_cast<T*>(dk), static_cast<T*>(dv));
    check_launch("attention backward dk/dv (plain)");
  }
}

}  // namespace

void simple_forward(const AttentionDims& d, AttnType type, const void* q, const void* k,
                    const void* v, const int8_t* mask, void* out, float* lse, cudaStream_t stream) {
  switch (type) {
    case AttnType::F32:
      return forward_typed<float>(d, q, k, v, mask, out, lse, stream);
    case AttnType::BF16:
      return forward_typed<__nv_bfloat16>(d, q, k, v, mask, out, lse, stream);
    case AttnType::F16:
      return forward_typed<__half>(d, q, k, v, mask, out, lse, stream);
  }
}

void simple_backward(const AttentionDims& d, AttnType type, const void* q, const void* k,
                     const void* v, const int8_t* mask, const void* out, const float* lse,
                     const void* dout, void* dq, void* dk, void* dv, float* rowdot,
                     cudaStream_t stream) {
  switch (type) {
    case AttnType::F32:
      return backward_typed<float>(d, q, k, v, mask, out, lse, dout, dq, dk, dv, rowdot, stream);
    case AttnType::BF16:
      return backward_typed<__nv_bfloat16>(d, q, k, v, mask, out, lse, dout, dq, dk, dv, rowdot,
                                           stream);
    case AttnType::F16:
      return backward_typed<__half>(d, q, k, v, mask, out, lse, dout, dq, dk, dv, rowdot, stream);
  }
}

}  // namespace tessel::kernels::cuda::detail
