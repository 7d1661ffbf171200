// SPDX-License-Identifier: Apache-2.0
// Tensor-core attention forward for bf16 / f16 (FlashAttention-2, Dao 2023): a block of 8 warps
// owns 128 query rows of one (batch, head), each warp 16 rows, and streams over tiles of 64 keys
// with an online softmax kept in registers. S = Q K^T and O += P V run on mma.sync m16n8k16 with
// f32 accumulation; P goes from the accumulator registers of S straight into the A operand of
// P V (attention_math.h documents the fragment layout). K and V tiles are double-buffered in
// shared memory with cp.async, so the next tile loads while this one is multiplied; V is read
// transposed by ldmatrix.trans. Query blocks run heaviest-first under a causal mask, and only the
// key tiles some row of the block sees are visited (a sliding window visits O(window) of them).
#include <cstdint>

#include "tessel/kernels/cuda/attention/attention_math.h"
#include "tessel/kernels/cuda/attention/device_common.cuh"
#include "tessel/kernels/cuda/attention/launch_internal.h"
#include "tessel/kernels/cuda/attention/mma_ptx.cuh"

namespace tessel::kernels::cuda::detail {

namespace {

constexpr int kRows = 128;  // query rows per block: 16 per warp
constexpr int kKeys = 64;   // keys per tile
constexpr int kThreads = 256;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D>
struct Layout {
  static constexpr int kStride = D + 8;  // padded row (elements): conflict-free fragment loads
  static constexpr int kTile = kKeys * kStride;
  static constexpr size_t kBytes = size_t(kRows + 4 * kKeys) * kStride * 2 + 2 * kKeys * 4;
};

struct Params {
  const void *q, *k, *v;
  const int8_t* mask;
  void* out;
  float* lse;
  int64_t tq, tk, heads, kv_heads, group;
  float scale_log2;  // scale * log2(e): the softmax runs on exp2
  Visibility vis;
};

// Loads `Rows` rows of D elements (row r from src + r * ld, valid while r < valid_rows) into a
// padded shared tile.
template <typename T, int D, int Rows>
__device__ void load_tile(T* dst, const T* src, int64_t ld, int64_t valid_rows) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  for (int c = threadIdx.x; c < Rows * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = r < valid_rows;
    cp_async16(dst + r * Layout<D>::kStride + col, valid ? src + r * ld + col : src, valid);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(Params p) {
  TESSEL_DYNAMIC_SHARED(smem_raw);
  using L = Layout<D>;
  T* qs = reinterpret_cast<T*>(smem_raw);
  T* ks = qs + kRows * L::kStride;                            // [2][kKeys][kStride]
  T* vs = ks + 2 * L::kTile;                                  // [2][kKeys][kStride]
  float* bias = reinterpret_cast<float*>(vs + 2 * L::kTile);  // [2][kKeys]: 0 or -inf

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t q0 = int64_t(gridDim.x - 1 - blockIdx.x) * kRows;  // heaviest first (causal)
  const int64_t h = blockIdx.y, b = blockIdx.z, kvh = h / p.group;
  const T* qg = static_cast<const T*>(p.q) + ((b * p.tq + q0) * p.heads + h) * D;
  const T* kg = static_cast<const T*>(p.k) + (b * p.tk * p.kv_heads + kvh) * D;
  const T* vg = static_cast<const T*>(p.v) + (b * p.tk * p.kv_heads + kvh) * D;
  const int64_t ldq = p.heads * D, ldkv = p.kv_heads * D;

  const KeyRange range = key_range(p.vis, q0, kRows, kKeys);
  const int tiles =
      range.end > range.begin ? int((range.end - range.begin + kKeys - 1) / kKeys) : 0;
  auto load_kv = [&](int tile, int buf) {
    const int64_t j0 = range.begin + int64_t(tile) * kKeys;
    load_tile<T, D, kKeys>(ks + buf * L::kTile, kg + j0 * ldkv, ldkv, p.tk - j0);
    load_tile<T, D, kKeys>(vs + buf * L::kTile, vg + j0 * ldkv, ldkv, p.tk - j0);
    if (threadIdx.x < kKeys) {
      const int64_t j = j0 + threadIdx.x;
      const bool kept = j < p.tk && (p.mask == nullptr || p.mask[b * p.tk + j] != 0);
      bias[buf * kKeys + threadIdx.x] = kept ? 0.f : -INFINITY;
    }
  };
  if (tiles > 0) {
    load_tile<T, D, kRows>(qs, qg, ldq, p.tq - q0);
    load_kv(0, 0);
    cp_async_commit();
  }

  // Rows of this thread: r0 = warp row group, r0 + 8.
  const int g = lane / 4, quad = lane % 4;
  const int64_t row0 = q0 + warp * 16;
  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  uint32_t qf[D / 16][4];
  for (int it = 0; it < tiles; ++it) {
    const int buf = it & 1;
    if (it + 1 < tiles) {
      load_kv(it + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (it == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          qf[kk][r] = lds32(qs + (warp * 16 + mma_a_row(lane, r)) * L::kStride + kk * 16 +
                            mma_a_col(lane, r));
    }
    const T* kt = ks + buf * L::kTile;
    const T* vt = vs + buf * L::kTile;
    const float* bt = bias + buf * kKeys;
    const int64_t j0 = range.begin + int64_t(it) * kKeys;

    float s[kKeys / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
        const T* krow = kt + (n * 8 + mma_b_n(lane)) * L::kStride + kk * 16;
        mma16816<T>(s[n], qf[kk], lds32(krow + mma_b_k(lane, 0)), lds32(krow + mma_b_k(lane, 1)));
      }

    // Masking: padding / past-the-end keys through the bias, causal and window per element
    // unless every row of this warp sees the whole tile.
    const bool whole = block_sees_whole_tile(p.vis, row0, 16, j0, kKeys);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n * 8 + mma_c_col(lane, e);
        float x = s[n][e] * p.scale_log2 + bt[col];
        if (!whole && !p.vis.sees(row0 + mma_c_row(lane, e), j0 + col)) x = -INFINITY;
        s[n][e] = x;
        tile_max[e >> 1] = fmaxf(tile_max[e >> 1], x);
      }
    float corr[2], base[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      tile_max[hr] = fmaxf(tile_max[hr], __shfl_xor_sync(0xffffffffu, tile_max[hr], 1));
      tile_max[hr] = fmaxf(tile_max[hr], __shfl_xor_sync(0xffffffffu, tile_max[hr], 2));
      const float m_new = fmaxf(m[hr], tile_max[hr]);
      base[hr] = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing visible yet stays 0
      corr[hr] = exp2f(m[hr] - base[hr]);
      m[hr] = m_new;
      l[hr] *= corr[hr];
    }
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2f(s[n][e] - base[e >> 1]);
        l[e >> 1] += s[n][e];
      }
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= corr[e >> 1];

#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t a[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float* c = s[p_tile_of_a_register(kk, r)] + p_element_of_a_register(r);
        a[r] = pack2<T>(c[0], c[1]);
      }
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, vt + (kk * 16 + ldmatrix_v_key(lane)) * L::kStride + np * 16 +
                                  ldmatrix_v_dim(lane));
        mma16816<T>(o[2 * np], a, bv[0], bv[1]);
        mma16816<T>(o[2 * np + 1], a, bv[2], bv[3]);
      }
    }
    __syncthreads();  // the next iteration's loads overwrite this buffer
  }

  T* og = static_cast<T*>(p.out) + ((b * p.tq) * p.heads + h) * D;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 1);
    l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 2);
    const int64_t i = row0 + g + 8 * hr;
    if (i >= p.tq) continue;
    const float inv = l[hr] > 0.f ? 1.f / l[hr] : 0.f;
    T* orow = og + i * ldq;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<uint32_t*>(orow + n * 8 + 2 * quad) =
          pack2<T>(o[n][2 * hr] * inv, o[n][2 * hr + 1] * inv);
    if (quad == 0)
      p.lse[(b * p.heads + h) * p.tq + i] = l[hr] > 0.f ? (m[hr] + log2f(l[hr])) * kLn2 : -INFINITY;
  }
}

template <typename T, int D>
void launch(const AttentionDims& d, const void* q, const void* k, const void* v, const int8_t* mask,
            void* out, float* lse, cudaStream_t stream) {
  // Per call, not once: the attribute belongs to the current device, and a process may drive
  // several.
  allow_shared_bytes(flash_forward_kernel<T, D>, Layout<D>::kBytes, "attention forward");
  Params p{q,
           k,
           v,
           mask,
           out,
           lse,
           d.q_len,
           d.kv_len,
           d.heads,
           d.kv_heads,
           d.heads / d.kv_heads,
           float(d.scale) * kLog2e,
           Visibility::make(d.q_len, d.kv_len, d.causal, d.window)};
  const dim3 grid(unsigned((d.q_len + kRows - 1) / kRows), unsigned(d.heads), unsigned(d.batch));
  TESSEL_LAUNCH(grid, kThreads, Layout<D>::kBytes, stream, flash_forward_kernel<T, D>)(p);
  check_launch("attention forward (tensor cores)");
}

}  // namespace

bool flash_supported(const AttentionDims& d, AttnType type,
                     std::initializer_list<const void*> ptrs) {
  for (const void* ptr : ptrs)
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  return type != AttnType::F32 && (d.head_dim == 64 || d.head_dim == 128) && d.batch <= 65535 &&
         d.heads <= 65535;
}

void flash_forward(const AttentionDims& d, AttnType type, const void* q, const void* k,
                   const void* v, const int8_t* mask, void* out, float* lse, cudaStream_t stream) {
  if (d.batch == 0 || d.q_len == 0) return;
  const bool bf16 = type == AttnType::BF16;
  if (d.head_dim == 64)
    return bf16 ? launch<__nv_bfloat16, 64>(d, q, k, v, mask, out, lse, stream)
                : launch<__half, 64>(d, q, k, v, mask, out, lse, stream);
  return bf16 ? launch<__nv_bfloat16, 128>(d, q, k, v, mask, out, lse, stream)
              : launch<__half, 128>(d, q, k, v, mask, out, lse, stream);
}

}  // namespace tessel::kernels::cuda::detail
