// SPDX-License-Identifier: Apache-2.0
// Paged KV store and paged attention for the serving engine (PagedAttention, Kwon et al. 2023):
// keys and values live in block pools and each sequence reads its own through a block table.
// Attention runs one block per (query row, head) whose 4 warps split the keys (split-K inside
// the block, so a batch-1 decode still spreads a long context over 4 warps per head): lane l of
// a warp takes key l of each chunk of 32, reads its pool row through the block table and
// computes the whole dot product; an online softmax over the chunks (FlashAttention) keeps one
// f32 output row per warp, lane l owning columns l, l + 32, ...; the warps' partial rows are
// merged by their maxima at the end. q and the pools may each be f32, bf16 or f16 (computed in
// f32), as on the CPU backend.
#include "tessel/kernels/cuda/attention/attention.h"
#include "tessel/kernels/cuda/attention/attention_math.h"
#include "tessel/kernels/cuda/attention/device_common.cuh"

namespace tessel::kernels::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kCols = int(kMaxHeadDim / 32);

template <typename E>
__global__ void store_kernel(int64_t tokens, int64_t row, int64_t num_slots, const E* k, const E* v,
                             const int64_t* slots, E* k_pool, E* v_pool) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= tokens * row) return;
  const int64_t slot = slots[idx / row];
  if (slot < 0 || slot >= num_slots) return;
  k_pool[slot * row + idx % row] = k[idx];
  v_pool[slot * row + idx % row] = v[idx];
}

struct PagedArgs {
  PagedDims d;
  float scale;
  const int32_t* tables;
  const int64_t *seq_lens, *starts;
};

// One block per (query row, head); its warps split the keys (warp w takes chunks w, w + kWarps,
// ... of 32), each with its own softmax state, merged at the end through shared memory.
template <typename Q, typename P>
__global__ void __launch_bounds__(kWarps * 32)
    paged_kernel(PagedArgs a, const Q* q, const P* k_pool, const P* v_pool, Q* out) {
  __shared__ float qr[kMaxHeadDim];
  __shared__ float part_o[kWarps][kMaxHeadDim];
  __shared__ float part_m[kWarps], part_l[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const PagedDims& d = a.d;
  const int64_t unit = blockIdx.x;  // (row, head), head fastest
  const int64_t row = unit / d.heads, h = unit % d.heads, kvh = h / (d.heads / d.kv_heads);
  const int64_t s = sequence_of_row(a.starts, d.sequences, row);
  const int64_t n = a.starts[s + 1] - a.starts[s];
  const int64_t pos = paged_position(a.seq_lens[s], n, row - a.starts[s]);
  const int64_t first = paged_first(pos, d.window);
  const int32_t* table = a.tables + s * d.max_blocks;
  const int64_t dim = d.head_dim, ld = d.kv_heads * dim;

  for (int64_t c = threadIdx.x; c < dim; c += kWarps * 32)
    qr[c] = to_f32(q[unit * dim + c]) * a.scale;
  __syncthreads();
  float m = -INFINITY, l = 0.f, o[kCols] = {};
  for (int64_t t0 = first + 32 * warp; t0 <= pos; t0 += 32 * kWarps) {
    const int64_t t = t0 + lane;
    float sc = -INFINITY;
    int64_t at = 0;  // this lane's pool row offset
    if (t <= pos) {
      at = paged_slot(table, d.block_size, t) * ld + kvh * dim;
      float acc = 0.f;
      for (int64_t c = 0; c < dim; ++c) acc = fmaf(qr[c], to_f32(k_pool[at + c]), acc);
      sc = acc;
    }
    const float m_new = fmaxf(m, warp_max(sc));  // finite: key t0 is visible
    const float w = t <= pos ? expf(sc - m_new) : 0.f;
    const float corr = m == -INFINITY ? 0.f : expf(m - m_new);
    l = l * corr + warp_sum(w);
    m = m_new;
    const int cnt = int(pos + 1 - t0 < 32 ? pos + 1 - t0 : 32);
#pragma unroll
    for (int c = 0; c < kCols; ++c) o[c] *= corr;
    for (int u = 0; u < cnt; ++u) {
      const float wu = __shfl_sync(0xffffffffu, w, u);
      const int64_t au = __shfl_sync(0xffffffffu, at, u);
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int64_t col = lane + 32 * c;
        if (col < dim) o[c] = fmaf(wu, to_f32(v_pool[au + col]), o[c]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int64_t col = lane + 32 * c;
    if (col < dim) part_o[warp][col] = o[c];
  }
  if (lane == 0) {
    part_m[warp] = m;
    part_l[warp] = l;
  }
  __syncthreads();
  // Merge: warp 0 saw key `first`, so the largest max is finite; a warp with no keys weighs 0.
  float top = -INFINITY;
  for (int w = 0; w < kWarps; ++w) top = fmaxf(top, part_m[w]);
  float weight[kWarps], total = 0.f;
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = part_m[w] == -INFINITY ? 0.f : expf(part_m[w] - top);
    total += part_l[w] * weight[w];
  }
  const float inv = total > 0.f ? 1.f / total : 0.f;
  for (int64_t c = threadIdx.x; c < dim; c += kWarps * 32) {
    float acc = 0.f;
    for (int w = 0; w < kWarps; ++w) acc += part_o[w][c] * weight[w];
    out[unit * dim + c] = from_f32<Q>(acc * inv);
  }
}

template <typename Q, typename P>
void paged_typed(const PagedArgs& a, const void* q, const void* k_pool, const void* v_pool,
                 void* out, cudaStream_t stream) {
  const int64_t units = a.d.tokens * a.d.heads;
  TESSEL_LAUNCH(unsigned(units), kWarps * 32, 0, stream, paged_kernel<Q, P>)
  (a, static_cast<const Q*>(q), static_cast<const P*>(k_pool), static_cast<const P*>(v_pool),
   static_cast<Q*>(out));
  check_launch("paged_attention");
}

template <typename Q>
void paged_pool(const PagedArgs& a, AttnType pool_type, const void* q, const void* k_pool,
                const void* v_pool, void* out, cudaStream_t stream) {
  switch (pool_type) {
    case AttnType::F32:
      return paged_typed<Q, float>(a, q, k_pool, v_pool, out, stream);
    case AttnType::BF16:
      return paged_typed<Q, __nv_bfloat16>(a, q, k_pool, v_pool, out, stream);
    case AttnType::F16:
      return paged_typed<Q, __half>(a, q, k_pool, v_pool, out, stream);
  }
}

}  // namespace

void paged_kv_store(AttnType type, int64_t tokens, int64_t kv_heads, int64_t head_dim,
                    int64_t num_slots, const void* k, const void* v, const int64_t* slots,
                    void* k_pool, void* v_pool, cudaStream_t stream) {
  TESSEL_CHECK(tokens >= 0 && kv_heads > 0 && head_dim > 0 && num_slots >= 0,
               "paged_kv_store: bad sizes: tokens ", tokens, " kv_heads ", kv_heads, " head_dim ",
               head_dim, " slots ", num_slots);
  const int64_t row = kv_heads * head_dim, total = tokens * row;
  if (total == 0) return;
  const unsigned blocks = unsigned((total + 255) / 256);
  if (type == AttnType::F32) TESSEL_LAUNCH(blocks, 256, 0, stream, store_kernel<float>)
  (tokens, row, num_slots, static_cast<const float*>(k), static_cast<const float*>(v), slots,
   static_cast<float*>(k_pool), static_cast<float*>(v_pool));
  else  // bf16 and f16 move as 16-bit words
      TESSEL_LAUNCH(blocks, 256, 0, stream, store_kernel<uint16_t>)(
          tokens, row, num_slots, static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v),
          slots, static_cast<uint16_t*>(k_pool), static_cast<uint16_t*>(v_pool));
  check_launch("paged_kv_store");
}

void paged_attention(const PagedDims& d, AttnType q_type, AttnType pool_type, const void* q,
                     const void* k_pool, const void* v_pool, const int32_t* block_tables,
                     const int64_t* seq_lens, const int64_t* query_starts, void* out,
                     cudaStream_t stream) {
  TESSEL_CHECK(d.tokens >= 0 && d.heads > 0 && d.kv_heads > 0 && d.heads % d.kv_heads == 0,
               "paged_attention: heads ", d.heads, " must be a positive multiple of kv_heads ",
               d.kv_heads);
  TESSEL_CHECK(d.head_dim > 0 && d.head_dim <= kMaxHeadDim, "paged_attention: head_dim ",
               d.head_dim, " outside [1, ", kMaxHeadDim, "]");
  TESSEL_CHECK(d.block_size > 0 && d.sequences >= 0 && d.max_blocks >= 0 && d.window >= 0,
               "paged_attention: bad sizes: block_size ", d.block_size, " sequences ", d.sequences,
               " max_blocks ", d.max_blocks, " window ", d.window);
  TESSEL_CHECK(d.tokens == 0 || d.sequences > 0, "paged_attention: ", d.tokens,
               " query rows but no sequence");
  if (d.tokens == 0) return;
  PagedArgs a{d, float(d.scale > 0 ? d.scale : 1.0 / std::sqrt(double(d.head_dim))), block_tables,
              seq_lens, query_starts};
  switch (q_type) {
    case AttnType::F32:
      return paged_pool<float>(a, pool_type, q, k_pool, v_pool, out, stream);
    case AttnType::BF16:
      return paged_pool<__nv_bfloat16>(a, pool_type, q, k_pool, v_pool, out, stream);
    case AttnType::F16:
      return paged_pool<__half>(a, pool_type, q, k_pool, v_pool, out, stream);
  }
}

}  // namespace tessel::kernels::cuda
