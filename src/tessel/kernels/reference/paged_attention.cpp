// SPDX-License-Identifier: Apache-2.0
// Reference paged KV store and paged attention, in double: each query row gathers the keys and
// values of its visible positions through the block table, takes a two-pass softmax over the
// scaled scores and a weighted sum, the plain definition (Backend::paged_attention) without the
// CPU kernel's tiles or online rescaling.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tessel/kernels/cpu/paged_check.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

void ReferenceBackend::paged_kv_store(const Tensor& k, const Tensor& v, const Tensor& slots,
                                      Tensor& k_pool, Tensor& v_pool) {
  const PagedKvStoreShape s = validate_paged_kv_store(*this, k, v, slots, k_pool, v_pool);
  const int64_t row = s.pool.kv_heads * s.pool.head_dim;
  const int64_t* slot = slots.data<int64_t>();
  for (int64_t i = 0; i < s.tokens; ++i)
    for (int64_t c = 0; c < row; ++c) {
      k_pool.data<double>()[slot[i] * row + c] = k.data<double>()[i * row + c];
      v_pool.data<double>()[slot[i] * row + c] = v.data<double>()[i * row + c];
    }
}

void ReferenceBackend::paged_attention(const PagedAttentionDesc& desc, const Tensor& q,
                                       const Tensor& k_pool, const Tensor& v_pool,
                                       const Tensor& block_tables, const Tensor& seq_lens,
                                       const Tensor& query_starts, Tensor& out) {
  const PagedAttentionShape s = validate_paged_attention(*this, desc, q, k_pool, v_pool,
                                                         block_tables, seq_lens, query_starts, out);
  const int64_t heads = s.heads, kv_heads = s.pool.kv_heads, dim = s.pool.head_dim;
  const int64_t bs = s.pool.block_size, group = heads / kv_heads;
  const double* qp = q.data<double>();
  const double* kp = k_pool.data<double>();
  const double* vp = v_pool.data<double>();
  double* op = out.data<double>();
  const int32_t* table = block_tables.data<int32_t>();
  const int64_t* len = seq_lens.data<int64_t>();
  const int64_t* start = query_starts.data<int64_t>();
  std::vector<double> w;
  for (int64_t sq = 0; sq < s.sequences; ++sq) {
    const int64_t n = start[sq + 1] - start[sq];
    for (int64_t j = 0; j < n; ++j) {
      const int64_t p = len[sq] - n + j, row = start[sq] + j;
      const int64_t first = desc.window > 0 ? std::max<int64_t>(0, p - desc.window + 1) : 0;
      for (int64_t h = 0; h < heads; ++h) {
        const double* qv = qp + (row * heads + h) * dim;
        const int64_t kvh = h / group;
        const auto at = [&](int64_t t) {
          const int64_t slot = int64_t(table[sq * s.max_blocks + t / bs]) * bs + t % bs;
          return (slot * kv_heads + kvh) * dim;
        };
        w.assign(size_t(p + 1 - first), 0.0);
        double max = -INFINITY;
        for (int64_t t = first; t <= p; ++t) {
          double dot = 0;
          for (int64_t c = 0; c < dim; ++c) dot += qv[c] * kp[at(t) + c];
          w[size_t(t - first)] = dot * s.scale;
          max = std::max(max, dot * s.scale);
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - max));
        double* o = op + (row * heads + h) * dim;
        for (int64_t c = 0; c < dim; ++c) o[c] = 0;
        for (int64_t t = first; t <= p; ++t)
          for (int64_t c = 0; c < dim; ++c) o[c] += w[size_t(t - first)] / sum * vp[at(t) + c];
      }
    }
  }
}

}  // namespace tessel::kernels
