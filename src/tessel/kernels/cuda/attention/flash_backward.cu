// SPDX-License-Identifier: Apache-2.0
// Tensor-core attention backward for bf16 / f16 (FlashAttention-2's backward, Dao 2023): a block
// of 4 warps owns 64 keys of one (batch, kv head), keeps their dK and dV in registers (each warp
// 16 keys) and walks every query head of the group and every query block that sees the keys. Per
// block of 64 queries it recomputes the transposed scores S^T = K Q^T and dP^T = V dO^T on
// mma.sync, P^T = exp(scale S^T - lse) from the forward's saved lse, dS^T = P^T (dP^T - D) scale
// with D = rowsum(dO * O); then dV += P^T dO and dK += dS^T Q straight from the accumulator
// registers, and dQ += dS K through dS in shared memory, added into an f32 buffer with atomics
// (the order of those additions varies from run to run: attention.h's `deterministic` takes the
// plain path instead). Q, dO, lse and D are double-buffered with cp.async; Q, dO and K are read
// transposed by ldmatrix.trans.
#include <cstdint>

#include "tessel/kernels/cuda/attention/attention_math.h"
#include "tessel/kernels/cuda/attention/device_common.cuh"
#include "tessel/kernels/cuda/attention/launch_internal.h"
#include "tessel/kernels/cuda/attention/mma_ptx.cuh"

namespace tessel::kernels::cuda::detail {

namespace {

constexpr int kBlock = 64;  // keys per block, and queries per step
constexpr int kThreads = 128;
constexpr int kDsStride = kBlock + 8;
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct Layout {
  static constexpr int kStride = D + 8;
  static constexpr int kTile = kBlock * kStride;
  // K, V, Q x2, dO x2 tiles; dS; lse x2, D x2, key bias (floats).
  static constexpr size_t kBytes =
      size_t(6 * kTile + kBlock * kDsStride) * 2 + size_t(5 * kBlock) * 4;
};

struct Params {
  const void *q, *k, *v, *dout;
  const float *lse, *rowdot;
  const int8_t* mask;
  float* dq_accum;  // [B, Tq, H, D]
  void *dk, *dv;
  int64_t tq, tk, heads, kv_heads, group;
  float scale, scale_log2;
  Visibility vis;
};

template <typename T, int D>
__device__ void load_rows(T* dst, const T* src, int64_t ld, int64_t valid_rows) {
  constexpr int kChunks = D / 8;
  for (int c = threadIdx.x; c < kBlock * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = r < valid_rows;
    cp_async16(dst + r * Layout<D>::kStride + col, valid ? src + r * ld + col : src, valid);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) flash_backward_kernel(Params p) {
  TESSEL_DYNAMIC_SHARED(smem_raw);
  using L = Layout<D>;
  T* ks = reinterpret_cast<T*>(smem_raw);
  T* vs = ks + L::kTile;
  T* qs = vs + L::kTile;                                              // [2][kBlock][kStride]
  T* gs = qs + 2 * L::kTile;                                          // [2][kBlock][kStride]
  T* dss = gs + 2 * L::kTile;                                         // [kBlock queries][kDsStride]
  float* lse_s = reinterpret_cast<float*>(dss + kBlock * kDsStride);  // [2][kBlock], log2 units
  float* dd_s = lse_s + 2 * kBlock;                                   // [2][kBlock]
  float* kbias = dd_s + 2 * kBlock;                                   // [kBlock]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j0 = int64_t(blockIdx.x) * kBlock, kvh = blockIdx.y, b = blockIdx.z;
  const int64_t ldq = p.heads * D, ldkv = p.kv_heads * D;
  const int64_t last_key = j0 + kBlock - 1 < p.tk - 1 ? j0 + kBlock - 1 : p.tk - 1;
  const int64_t qb = p.vis.query_begin(j0), qe = p.vis.query_end(last_key);
  const int nq = qe > qb ? int((qe - qb + kBlock - 1) / kBlock) : 0;
  const int steps = nq * int(p.group);

  const T* kg = static_cast<const T*>(p.k) + ((b * p.tk + j0) * p.kv_heads + kvh) * D;
  const T* vg = static_cast<const T*>(p.v) + ((b * p.tk + j0) * p.kv_heads + kvh) * D;
  if (steps > 0) {  // else no query sees these keys: dK = dV = 0 below
    load_rows<T, D>(ks, kg, ldkv, p.tk - j0);
    load_rows<T, D>(vs, vg, ldkv, p.tk - j0);
  }
  if (threadIdx.x < kBlock) {
    const int64_t j = j0 + threadIdx.x;
    const bool kept = j < p.tk && (p.mask == nullptr || p.mask[b * p.tk + j] != 0);
    kbias[threadIdx.x] = kept ? 0.f : -INFINITY;
  }
  auto step_head = [&](int step) { return kvh * p.group + step / nq; };
  auto step_q0 = [&](int step) { return qb + int64_t(step % nq) * kBlock; };
  auto load_step = [&](int step, int buf) {
    const int64_t h = step_head(step), q0 = step_q0(step);
    const int64_t at = ((b * p.tq + q0) * p.heads + h) * D;
    load_rows<T, D>(qs + buf * L::kTile, static_cast<const T*>(p.q) + at, ldq, p.tq - q0);
    load_rows<T, D>(gs + buf * L::kTile, static_cast<const T*>(p.dout) + at, ldq, p.tq - q0);
    if (threadIdx.x < kBlock) {
      const int64_t i = q0 + threadIdx.x, stat = (b * p.heads + h) * p.tq + i;
      lse_s[buf * kBlock + threadIdx.x] = i < p.tq ? p.lse[stat] * kLog2e : -INFINITY;
      dd_s[buf * kBlock + threadIdx.x] = i < p.tq ? p.rowdot[stat] : 0.f;
    }
  };
  if (steps > 0) {
    load_step(0, 0);
    cp_async_commit();
  }

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  const int key_row0 = warp * 16;  // this warp's keys, local
  for (int step = 0; step < steps; ++step) {
    const int buf = step & 1;
    if (step + 1 < steps) {
      load_step(step + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int64_t h = step_head(step), q0 = step_q0(step);
    const T* qt = qs + buf * L::kTile;
    const T* gt = gs + buf * L::kTile;

    // S^T and dP^T: this warp's 16 keys x 64 queries.
    float st[kBlock / 8][4] = {}, dpt[kBlock / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ak[4], av[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int at = (key_row0 + mma_a_row(lane, r)) * L::kStride + kk * 16 + mma_a_col(lane, r);
        ak[r] = lds32(ks + at);
        av[r] = lds32(vs + at);
      }
#pragma unroll
      for (int n = 0; n < kBlock / 8; ++n) {
        const int at = (n * 8 + mma_b_n(lane)) * L::kStride + kk * 16;
        mma16816<T>(st[n], ak, lds32(qt + at + mma_b_k(lane, 0)),
                    lds32(qt + at + mma_b_k(lane, 1)));
        mma16816<T>(dpt[n], av, lds32(gt + at + mma_b_k(lane, 0)),
                    lds32(gt + at + mma_b_k(lane, 1)));
      }
    }
    // P^T and dS^T in place; dS (queries x keys) also into shared memory for dQ.
#pragma unroll
    for (int n = 0; n < kBlock / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kr = key_row0 + mma_c_row(lane, e), qc = n * 8 + mma_c_col(lane, e);
        const float row_lse = lse_s[buf * kBlock + qc];
        const bool visible =
            row_lse != -INFINITY && kbias[kr] == 0.f && p.vis.sees(q0 + qc, j0 + kr);
        const float pr = visible ? exp2f(st[n][e] * p.scale_log2 - row_lse) : 0.f;
        const float ds = pr * (dpt[n][e] - dd_s[buf * kBlock + qc]) * p.scale;
        st[n][e] = pr;
        dpt[n][e] = ds;
        dss[qc * kDsStride + kr] = from_f32<T>(ds);
      }
      // dV += P^T dO and dK += dS^T Q (the reduction runs over this step's 64 queries).
#pragma unroll
    for (int kk = 0; kk < kBlock / 16; ++kk) {
      uint32_t ap[4], ad[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int tile = p_tile_of_a_register(kk, r), e = p_element_of_a_register(r);
        ap[r] = pack2<T>(st[tile][e], st[tile][e + 1]);
        ad[r] = pack2<T>(dpt[tile][e], dpt[tile][e + 1]);
      }
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        const int at =
            (kk * 16 + ldmatrix_v_key(lane)) * L::kStride + np * 16 + ldmatrix_v_dim(lane);
        uint32_t bg[4], bq[4];
        ldmatrix_x4_trans(bg, gt + at);
        mma16816<T>(dv[2 * np], ap, bg[0], bg[1]);
        mma16816<T>(dv[2 * np + 1], ap, bg[2], bg[3]);
        ldmatrix_x4_trans(bq, qt + at);
        mma16816<T>(dk[2 * np], ad, bq[0], bq[1]);
        mma16816<T>(dk[2 * np + 1], ad, bq[2], bq[3]);
      }
    }
    __syncthreads();  // every warp's dS is in shared memory
    // dQ for this warp's 16 queries = dS (16 x 64 keys) K (64 keys x D), 64 columns at a time.
    float* dq_rows = p.dq_accum + ((b * p.tq + q0) * p.heads + h) * D;
#pragma unroll
    for (int half = 0; half < D / 64; ++half) {
      float acc[8][4] = {};
#pragma unroll
      for (int kk = 0; kk < kBlock / 16; ++kk) {
        uint32_t a[4];
#pragma unroll
        for (int r = 0; r < 4; ++r)
          a[r] = lds32(dss + (warp * 16 + mma_a_row(lane, r)) * kDsStride + kk * 16 +
                       mma_a_col(lane, r));
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t bk[4];
          ldmatrix_x4_trans(bk, ks + (kk * 16 + ldmatrix_v_key(lane)) * L::kStride + half * 64 +
                                    np * 16 + ldmatrix_v_dim(lane));
          mma16816<T>(acc[2 * np], a, bk[0], bk[1]);
          mma16816<T>(acc[2 * np + 1], a, bk[2], bk[3]);
        }
      }
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qr = warp * 16 + mma_c_row(lane, e);
          if (q0 + qr < p.tq)
            atomicAdd(dq_rows + qr * ldq + half * 64 + n * 8 + mma_c_col(lane, e), acc[n][e]);
        }
    }
    __syncthreads();  // dS and this buffer are overwritten next
  }

  // dK and dV rows of this block (zero for keys no query sees).
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t j = j0 + key_row0 + lane / 4 + 8 * hr;
    if (j >= p.tk) continue;
    T* dkr = static_cast<T*>(p.dk) + ((b * p.tk + j) * p.kv_heads + kvh) * D;
    T* dvr = static_cast<T*>(p.dv) + ((b * p.tk + j) * p.kv_heads + kvh) * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const int col = n * 8 + 2 * (lane % 4);
      *reinterpret_cast<uint32_t*>(dkr + col) = pack2<T>(dk[n][2 * hr], dk[n][2 * hr + 1]);
      *reinterpret_cast<uint32_t*>(dvr + col) = pack2<T>(dv[n][2 * hr], dv[n][2 * hr + 1]);
    }
  }
}

// D_i = rowsum(dO * O) per query row and a zeroed dQ accumulator row: one warp per (b, i, h).
template <typename T>
__global__ void prepare_kernel(int64_t rows, int64_t tq, int64_t heads, int64_t dim, const T* out,
                               const T* dout, float* rowdot, float* dq_accum) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // row = (b * tq + i) * heads + h
  float part = 0.f;
  for (int64_t c = lane; c < dim; c += 32) {
    part += to_f32(dout[row * dim + c]) * to_f32(out[row * dim + c]);
    dq_accum[row * dim + c] = 0.f;
  }
  part = warp_sum(part);
  const int64_t h = row % heads, i = (row / heads) % tq, b = row / (heads * tq);
  if (lane == 0) rowdot[(b * heads + h) * tq + i] = part;
}

template <typename T>
__global__ void finish_kernel(int64_t n, const float* dq_accum, T* dq) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dq[i] = from_f32<T>(dq_accum[i]);
}

template <typename T, int D>
void launch(const AttentionDims& d, const void* q, const void* k, const void* v, const int8_t* mask,
            const void* out, const float* lse, const void* dout, void* dq, void* dk, void* dv,
            float* workspace, cudaStream_t stream) {
  // Per call, not once: the attribute belongs to the current device, and a process may drive
  // several.
  allow_shared_bytes(flash_backward_kernel<T, D>, Layout<D>::kBytes, "attention backward");
  const int64_t q_rows = d.batch * d.q_len * d.heads;
  float* rowdot = workspace;
  float* dq_accum = workspace + q_rows;
  if (q_rows > 0) {
    TESSEL_LAUNCH(unsigned((q_rows * 32 + 127) / 128), 128, 0, stream, prepare_kernel<T>)
    (q_rows, d.q_len, d.heads, D, static_cast<const T*>(out), static_cast<const T*>(dout), rowdot,
     dq_accum);
    check_launch("attention backward prepare");
  }
  if (d.kv_len > 0) {
    Params p{q,
             k,
             v,
             dout,
             lse,
             rowdot,
             mask,
             dq_accum,
             dk,
             dv,
             d.q_len,
             d.kv_len,
             d.heads,
             d.kv_heads,
             d.heads / d.kv_heads,
             float(d.scale),
             float(d.scale) * kLog2e,
             Visibility::make(d.q_len, d.kv_len, d.causal, d.window)};
    const dim3 grid(unsigned((d.kv_len + kBlock - 1) / kBlock), unsigned(d.kv_heads),
                    unsigned(d.batch));
    TESSEL_LAUNCH(grid, kThreads, Layout<D>::kBytes, stream, flash_backward_kernel<T, D>)(p);
    check_launch("attention backward (tensor cores)");
  }
  if (q_rows > 0) {
    const int64_t n = q_rows * D;
    TESSEL_LAUNCH(unsigned((n + 255) / 256), 256, 0, stream, finish_kernel<T>)
    (n, dq_accum, static_cast<T*>(dq));
    check_launch("attention backward dq");
  }
}

}  // namespace

size_t flash_backward_workspace_floats(const AttentionDims& d) {
  return size_t(d.batch * d.q_len * d.heads) * size_t(1 + d.head_dim);
}

void flash_backward(const AttentionDims& d, AttnType type, const void* q, const void* k,
                    const void* v, const int8_t* mask, const void* out, const float* lse,
                    const void* dout, void* dq, void* dk, void* dv, float* workspace,
                    cudaStream_t stream) {
  if (d.batch == 0) return;
  const bool bf16 = type == AttnType::BF16;
  if (d.head_dim == 64)
    return bf16 ? launch<__nv_bfloat16, 64>(d, q, k, v, mask, out, lse, dout, dq, dk, dv, workspace,
                                            stream)
                : launch<__half, 64>(d, q, k, v, mask, out, lse, dout, dq, dk, dv, workspace,
                                     stream);
  return bf16
             ? launch<__nv_bfloat16, 128>(d, q, k, v, mask, out, lse, dout, dq, dk, dv, workspace,
                                          stream)
             : launch<__half, 128>(d, q, k, v, mask, out, lse, dout, dq, dk, dv, workspace, stream);
}

}  // namespace tessel::kernels::cuda::detail
