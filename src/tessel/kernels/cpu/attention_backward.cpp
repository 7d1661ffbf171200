// SPDX-License-Identifier: Apache-2.0
// CPU attention backward, flash-attention style (Dao et al. 2022; FlashAttention-2's loop order):
// D_i = rowsum(dO * O) first, then each task owns a (batch, kv head) and walks its key tiles; per
// key tile it recomputes P = exp(scale * Q K^T - lse) tile by tile for every query head of the
// group, accumulates dV and dK for the tile in small buffers and adds dS K into dq. A
// kv head's dk / dv rows are written by exactly one task, so grouped-query attention sums over
// its query heads without atomics. With fewer (batch, kv head) pairs than threads, the key tiles
// are also split between tasks, each adding into its own dq buffer, summed at the end.
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
struct BackwardScratch {
  std::vector<T> q, g, k, kt, vt, p, ds, dk, dv, bias, row_bias;
  explicit BackwardScratch(int64_t dim)
      : q(size_t(kQueryTile * dim)),
        g(size_t(kQueryTile * dim)),
        k(size_t(kKeyTile<T> * dim)),
        kt(size_t(dim * kKeyTile<T>)),
        vt(size_t(dim * kKeyTile<T>)),
        p(size_t(kQueryTile * kKeyTile<T>)),
        ds(size_t(kQueryTile * kKeyTile<T>)),
        dk(size_t(kKeyTile<T> * dim)),
        dv(size_t(kKeyTile<T> * dim)),
        bias(kKeyTile<T>),
        row_bias(kKeyTile<T>) {}
};

template <typename T>
struct Operands {
  const T *q, *k, *v, *lse, *dout, *rowdot;
  T *dk, *dv;
};

// One query tile against one key tile (K transposed in s.kt and s.vt, K's rows in s.k): P and dS
// from the saved lse and D, then dV += P^T dO, dK += dS^T Q (scratch) and dQ += dS K (dq_base,
// rows of stride q_ld). Q and dO rows are gathered into dense blocks first.
template <typename T>
void tile_pair(const Problem<T>& p, const Operands<T>& o, T* dq_base, int64_t b, int64_t h,
               int64_t q0, int rows, int64_t j0, int nk, BackwardScratch<T>& s) {
  int dim = int(p.dim);
  int64_t ld = p.q_ld();
  pack_rows(o.q + p.q_at(b, q0, h), ld, rows, dim, s.q.data());
  pack_rows(o.dout + p.q_at(b, q0, h), ld, rows, dim, s.g.data());
  const T* qr = s.q.data();
  const T* gr = s.g.data();
  scores_transposed<T, kKeyTile<T>>(qr, dim, rows, s.kt.data(), dim, s.p.data());
  scores_transposed<T, kKeyTile<T>>(gr, dim, rows, s.vt.data(), dim, s.ds.data());
  for (int r = 0; r < rows; ++r) {
    int64_t i = q0 + r, row = (b * p.heads + h) * p.tq + i;
    T row_lse = o.lse[row], row_dot = o.rowdot[row];
    T* pr = s.p.data() + r * kKeyTile<T>;
    T* dr = s.ds.data() + r * kKeyTile<T>;
    if (row_lse == kNegInf<T>) {  // the row saw no key: no gradient flows through it
      std::fill(pr, pr + kKeyTile<T>, T(0));
      std::fill(dr, dr + kKeyTile<T>, T(0));
      continue;
    }
    const T* bias = causal_bias<T, kKeyTile<T>>(s.bias.data(), p.key_begin(i) - j0,
                                                p.key_end(i) - j0, s.row_bias.data());
    scale_bias_row<T, kKeyTile<T>>(pr, p.scale, bias);
    exp_row<kKeyTile<T>>(pr, row_lse);
    // dS already carries the softmax scale, so dK and dQ below need no further scaling.
    for (int j = 0; j < kKeyTile<T>; ++j) dr[j] = pr[j] * (dr[j] - row_dot) * p.scale;
  }
  accumulate(s.dv.data(), dim, nk, s.p.data(), 1, kKeyTile<T>, rows, gr, dim, dim);
  accumulate(s.dk.data(), dim, nk, s.ds.data(), 1, kKeyTile<T>, rows, qr, dim, dim);
  accumulate(dq_base + p.q_at(b, q0, h), ld, rows, s.ds.data(), kKeyTile<T>, 1, nk, s.k.data(), dim,
             dim);
}

// All key tiles t = split, split + splits, ... of one (batch, kv head).
template <typename T>
void backward_unit(const Problem<T>& p, const Operands<T>& o, T* dq_target, int64_t b, int64_t kvh,
                   int64_t split, int64_t splits, BackwardScratch<T>& s) {
  int dim = int(p.dim);
  for (int64_t kt = split; kt < p.key_tiles(); kt += splits) {
    int64_t j0 = kt * kKeyTile<T>;
    int nk = int(std::min<int64_t>(kKeyTile<T>, p.tk - j0));
    std::fill(s.dk.begin(), s.dk.end(), T(0));
    std::fill(s.dv.begin(), s.dv.end(), T(0));
    if (p.key_bias(b, j0, s.bias.data())) {
      transpose_tile<T, kKeyTile<T>>(o.k + p.kv_at(b, j0, kvh), p.kv_ld(), nk, dim, s.kt.data());
      transpose_tile<T, kKeyTile<T>>(o.v + p.kv_at(b, j0, kvh), p.kv_ld(), nk, dim, s.vt.data());
      pack_rows(o.k + p.kv_at(b, j0, kvh), p.kv_ld(), nk, dim, s.k.data());
      // With a causal mask, queries before j0 - offset see none of this tile; with a sliding
      // window, neither do those whose window starts after its last key.
      int64_t q_start = p.query_begin(j0), q_end = p.query_end(j0 + nk - 1);
      for (int64_t h = kvh * p.group; h < (kvh + 1) * p.group; ++h) {
        for (int64_t q0 = q_start; q0 < q_end; q0 += kQueryTile) {
          int rows = int(std::min<int64_t>(kQueryTile, q_end - q0));
          tile_pair(p, o, dq_target, b, h, q0, rows, j0, nk, s);
        }
      }
    }
    for (int j = 0; j < nk; ++j) {
      std::copy_n(s.dk.data() + j * dim, dim, o.dk + p.kv_at(b, j0 + j, kvh));
      std::copy_n(s.dv.data() + j * dim, dim, o.dv + p.kv_at(b, j0 + j, kvh));
    }
  }
}

template <typename T>
void backward(const AttentionDesc& d, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& mask, const Tensor& out, const Tensor& lse, const Tensor& dout,
              Tensor& dq, Tensor& dk, Tensor& dv) {
  Problem<T> p = Problem<T>::make(d, mask);
  int dim = int(p.dim);
  // D_i = rowsum(dO * O) = rowsum(P * dP): the softmax-gradient term, once per query row.
  std::vector<T> rowdot(size_t(p.batch * p.heads * p.tq));
  const T* po = out.data<T>();
  const T* pg = dout.data<T>();
  parallel_for(0, p.batch * p.tq, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t bi = lo; bi < hi; ++bi) {
      int64_t b = bi / p.tq, i = bi % p.tq;
      for (int64_t h = 0; h < p.heads; ++h)
        rowdot[size_t((b * p.heads + h) * p.tq + i)] =
            dot(pg + p.q_at(b, i, h), po + p.q_at(b, i, h), dim);
    }
  });

  int64_t pairs = p.batch * p.kv_heads;
  int64_t key_tiles = p.key_tiles();
  int64_t splits = 1;
  if (pairs > 0 && pairs < num_threads())
    splits = std::clamp<int64_t>((num_threads() + pairs - 1) / pairs, 1,
                                 std::max<int64_t>(key_tiles, 1));
  T* pdq = dq.data<T>();
  std::vector<T> partial(size_t((splits - 1) * dq.numel()), T(0));
  Operands<T> ops{q.data<T>(), k.data<T>(),   v.data<T>(),  lse.data<T>(),
                  pg,          rowdot.data(), dk.data<T>(), dv.data<T>()};
  parallel_for(0, pairs * splits, 1, [&](int64_t lo, int64_t hi) {
    BackwardScratch<T> scratch(p.dim);
    for (int64_t u = lo; u < hi; ++u) {
      int64_t split = u % splits, pair = u / splits;
      int64_t b = pair / p.kv_heads, kvh = pair % p.kv_heads;
      T* target = split == 0 ? pdq : partial.data() + (split - 1) * dq.numel();
      if (split == 0)
        for (int64_t i = 0; i < p.tq; ++i)
          std::fill_n(pdq + p.q_at(b, i, kvh * p.group), p.group * dim, T(0));
      backward_unit(p, ops, target, b, kvh, split, splits, scratch);
    }
  });
  if (splits > 1) {
    parallel_for(0, dq.numel(), 4096, [&](int64_t lo, int64_t hi) {
      for (int64_t s = 0; s < splits - 1; ++s) {
        const T* src = partial.data() + s * dq.numel();
        for (int64_t e = lo; e < hi; ++e) pdq[e] += src[e];
      }
    });
  }
}

}  // namespace

void CpuBackend::attention_backward(const AttentionDesc& d, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& mask, const Tensor& out,
                                    const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk,
                                    Tensor& dv) {
  check_attention_backward("attention_backward", d, q, k, v, mask, out, lse, dout, dq, dk, dv);
  if (cpu::is_half(q.dtype()))
    return cpu::half_attention_backward(*this, d, q, k, v, mask, out, lse, dout, dq, dk, dv);
  switch (q.dtype()) {
    case DType::F32:
      return backward<float>(d, q, k, v, mask, out, lse, dout, dq, dk, dv);
    case DType::F64:
      return backward<double>(d, q, k, v, mask, out, lse, dout, dq, dk, dv);
    default:
      TESSEL_FAIL("attention_backward: the cpu backend supports f32 and f64, got ",
                  dtype_name(q.dtype()));
  }
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
