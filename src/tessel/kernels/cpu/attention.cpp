// SPDX-License-Identifier: Apache-2.0
// CPU attention forward, flash-attention style (Dao et al. 2022, FlashAttention-2 partitioning):
// each task owns one (batch, head, query tile) and streams over key tiles with an online softmax
// (running row max and sum), so no Tq x Tk score matrix is ever stored; it writes the output and
// each row's log-sum-exp for the backward pass (attention_backward.cpp). K and V are packed once
// per call into dense tiles; fully masked key tiles and, with a causal mask, tiles past a query
// tile's last visible key (and, with a sliding window, before its first) are skipped.
#include <vector>

#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/attention_check.h"
#include "tessel/kernels/cpu/isa_region.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/attention_common.h"
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/half_convert.h"
#include "tessel/kernels/cpu/half_kernels.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

namespace {

using namespace attention_tiles;

template <typename T>
struct ForwardScratch {
  std::vector<T> q, acc, scores, row_max, row_sum, bias, row_bias;
  explicit ForwardScratch(int64_t dim)
      : q(size_t(kQueryTile * dim)),
        acc(size_t(kQueryTile * dim)),
        scores(size_t(kQueryTile * kKeyTile<T>)),
        row_max(kQueryTile),
        row_sum(kQueryTile),
        bias(kKeyTile<T>),
        row_bias(kKeyTile<T>) {}
};

// Below this many query rows K is not worth transposing (decode steps).
constexpr int kDirectRows = 4;

// Folds one tile of raw scores into the running softmax state of each row: masks and scales
// them, rescales the row's accumulator when its max grows, and leaves the tile's probabilities
// (relative to the new max) in `scores` for the P V product.
template <typename T>
void online_softmax(const Problem<T>& p, int64_t q0, int rows, int64_t j0, ForwardScratch<T>& s) {
  for (int r = 0; r < rows; ++r) {
    T* row = s.scores.data() + r * kKeyTile<T>;
    const T* bias = causal_bias<T, kKeyTile<T>>(s.bias.data(), p.key_begin(q0 + r) - j0,
                                                p.key_end(q0 + r) - j0, s.row_bias.data());
    scale_bias_row<T, kKeyTile<T>>(row, p.scale, bias);
    T old_max = s.row_max[size_t(r)];
    T new_max = std::max(old_max, row_max<T, kKeyTile<T>>(row));
    if (new_max == kNegInf<T>) {  // the row has seen no key yet
      std::fill(row, row + kKeyTile<T>, T(0));
      continue;
    }
    exp_row<kKeyTile<T>>(row, new_max);
    T correction = old_max == kNegInf<T> ? T(0) : std::exp(old_max - new_max);
    s.row_sum[size_t(r)] = s.row_sum[size_t(r)] * correction + row_sum<T, kKeyTile<T>>(row);
    s.row_max[size_t(r)] = new_max;
    if (correction != T(1)) {
      T* acc = s.acc.data() + r * p.dim;
      for (int64_t c = 0; c < p.dim; ++c) acc[c] *= correction;
    }
  }
}

// K transposed and V gathered once per call, tile by tile: kt is [B][Hkv][key tile][D][kKeyTile]
// (zero-padded), vp is [B][Hkv][key tile][kKeyTile][D], so that every query tile and every head
// of a group reads the same dense tiles.
template <typename T>
struct PackedKv {
  std::vector<T> kt, vp;
  int64_t tile_size = 0;
  int64_t offset(const Problem<T>& p, int64_t b, int64_t kvh, int64_t j0) const {
    int64_t tile = (b * p.kv_heads + kvh) * p.key_tiles() + j0 / kKeyTile<T>;
    return tile * tile_size;
  }
  const T* k_tile(const Problem<T>& p, int64_t b, int64_t kvh, int64_t j0) const {
    return kt.data() + offset(p, b, kvh, j0);
  }
  const T* v_tile(const Problem<T>& p, int64_t b, int64_t kvh, int64_t j0) const {
    return vp.data() + offset(p, b, kvh, j0);
  }
};

template <typename T>
PackedKv<T> pack_kv(const Problem<T>& p, const T* k, const T* v) {
  PackedKv<T> packed;
  int64_t tiles = p.key_tiles();
  packed.tile_size = p.dim * kKeyTile<T>;
  packed.kt.resize(size_t(p.batch * p.kv_heads * tiles * packed.tile_size));
  packed.vp.resize(packed.kt.size());
  parallel_for(0, p.batch * p.kv_heads * tiles, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      int64_t tile = t % tiles, bh = t / tiles, j0 = tile * kKeyTile<T>;
      int nk = int(std::min<int64_t>(kKeyTile<T>, p.tk - j0));
      int64_t at = p.kv_at(bh / p.kv_heads, j0, bh % p.kv_heads);
      transpose_tile<T, kKeyTile<T>>(k + at, p.kv_ld(), nk, int(p.dim),
                                     packed.kt.data() + t * packed.tile_size);
      pack_rows(v + at, p.kv_ld(), nk, int(p.dim), packed.vp.data() + t * packed.tile_size);
    }
  });
  return packed;
}

// One (batch, head, query tile). `kv` is null for decode steps, which read K and V in place.
template <typename T>
void forward_tile(const Problem<T>& p, const T* q, const T* k, const T* v, const PackedKv<T>* kv,
                  T* out, T* lse, int64_t b, int64_t h, int64_t q0, int rows,
                  ForwardScratch<T>& s) {
  int dim = int(p.dim);
  int64_t kvh = h / p.group;
  pack_rows(q + p.q_at(b, q0, h), p.q_ld(), rows, dim, s.q.data());
  std::fill(s.acc.begin(), s.acc.begin() + rows * dim, T(0));
  std::fill(s.row_max.begin(), s.row_max.end(), kNegInf<T>);
  std::fill(s.row_sum.begin(), s.row_sum.end(), T(0));
  // The first row's window starts first and the last row sees the last key: the tiles in between
  // are all that any row of the tile sees (O(window) of them with a sliding window).
  int64_t key_end = p.key_end(q0 + rows - 1);
  int64_t key_start = p.key_begin(q0) / kKeyTile<T> * kKeyTile<T>;
  for (int64_t j0 = key_start; j0 < key_end; j0 += kKeyTile<T>) {
    if (!p.key_bias(b, j0, s.bias.data())) continue;  // all padding
    int nk = int(std::min<int64_t>(kKeyTile<T>, p.tk - j0));
    const T* v_rows = v + p.kv_at(b, j0, kvh);
    int64_t ldv = p.kv_ld();
    if (kv == nullptr) {
      scores_direct<T, kKeyTile<T>>(s.q.data(), dim, rows, k + p.kv_at(b, j0, kvh), p.kv_ld(), nk,
                                    dim, s.scores.data());
    } else {
      scores_transposed<T, kKeyTile<T>>(s.q.data(), dim, rows, kv->k_tile(p, b, kvh, j0), dim,
                                        s.scores.data());
      v_rows = kv->v_tile(p, b, kvh, j0);
      ldv = dim;
    }
    online_softmax(p, q0, rows, j0, s);
    accumulate(s.acc.data(), dim, rows, s.scores.data(), kKeyTile<T>, 1, nk, v_rows, ldv, dim);
  }
  for (int r = 0; r < rows; ++r) {
    T sum = s.row_sum[size_t(r)];
    T inv = sum > 0 ? T(1) / sum : T(0);
    T* o = out + p.q_at(b, q0 + r, h);
    const T* acc = s.acc.data() + r * dim;
    for (int c = 0; c < dim; ++c) o[c] = acc[c] * inv;
    lse[(b * p.heads + h) * p.tq + q0 + r] =
        sum > 0 ? s.row_max[size_t(r)] + std::log(sum) : kNegInf<T>;
  }
}

template <typename T>
void forward(const AttentionDesc& d, const Tensor& q, const Tensor& k, const Tensor& v,
             const Tensor& mask, Tensor& out, Tensor& lse) {
  Problem<T> p = Problem<T>::make(d, mask);
  const T* pq = q.data<T>();
  const T* pk = k.data<T>();
  const T* pv = v.data<T>();
  T* po = out.data<T>();
  T* pl = lse.data<T>();
  int64_t q_tiles = (p.tq + kQueryTile - 1) / kQueryTile;
  // Decode steps (a few query rows) take dot products against K directly instead.
  PackedKv<T> packed = p.tq >= kDirectRows ? pack_kv(p, pk, pv) : PackedKv<T>();
  const PackedKv<T>* kv = p.tq >= kDirectRows ? &packed : nullptr;
  parallel_for(0, p.batch * p.heads * q_tiles, 1, [&](int64_t lo, int64_t hi) {
    ForwardScratch<T> scratch(p.dim);
    for (int64_t t = lo; t < hi; ++t) {
      int64_t qt = t % q_tiles, bh = t / q_tiles;
      int64_t q0 = qt * kQueryTile;
      int rows = int(std::min<int64_t>(kQueryTile, p.tq - q0));
      forward_tile(p, pq, pk, pv, kv, po, pl, bh / p.heads, bh % p.heads, q0, rows, scratch);
    }
  });
}

}  // namespace

void CpuBackend::attention(const AttentionDesc& d, const Tensor& q, const Tensor& k,
                           const Tensor& v, const Tensor& mask, Tensor& out, Tensor& lse) {
  check_attention("attention", d, q, k, v, mask, out, lse);
  if (cpu::is_half(q.dtype())) return cpu::half_attention(*this, d, q, k, v, mask, out, lse);
  switch (q.dtype()) {
    case DType::F32:
      return forward<float>(d, q, k, v, mask, out, lse);
    case DType::F64:
      return forward<double>(d, q, k, v, mask, out, lse);
    default:
      TESSEL_FAIL("attention: the cpu backend supports f32 and f64, got ", dtype_name(q.dtype()));
  }
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
