// SPDX-License-Identifier: Apache-2.0
// Validation of the paged KV-cache kernels (paged_check.h). The per-sequence checks walk only the
// block-table entries a sequence uses, so the cost is O(S + keys / block_size + N).
#include "tessel/kernels/cpu/paged_check.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessel::kernels {

namespace {

bool is_half_or_f32(DType d) {
  return d == DType::F32 || d == DType::BF16 || d == DType::F16;
}

void need(const char* op, const char* what, const Tensor& t) {
  TESSEL_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

void index_tensor(const char* op, const char* what, const Tensor& t, DType dtype,
                  const Shape& shape) {
  need(op, what, t);
  TESSEL_CHECK(t.dtype() == dtype && t.shape() == shape, op, ": ", what, " must be ",
               dtype_name(dtype), " ", shape, ", got ", dtype_name(t.dtype()), " ", t.shape());
}

PagedPoolShape check_pools(const Backend& backend, Op op, const Tensor& k_pool,
                           const Tensor& v_pool) {
  const char* name = op_name(op).data();
  need(name, "k_pool", k_pool);
  need(name, "v_pool", v_pool);
  TESSEL_CHECK(backend.supports(op, k_pool.dtype()), name, ": the ", backend.name(),
               " backend does not run ", dtype_name(k_pool.dtype()), " pools");
  TESSEL_CHECK(k_pool.ndim() == 4, name,
               ": k_pool must be 4-D [num_blocks, block_size, kv_heads, head_dim], got ",
               k_pool.shape());
  TESSEL_CHECK(v_pool.shape() == k_pool.shape() && v_pool.dtype() == k_pool.dtype(), name,
               ": v_pool ", dtype_name(v_pool.dtype()), " ", v_pool.shape(), " must match k_pool ",
               dtype_name(k_pool.dtype()), " ", k_pool.shape());
  PagedPoolShape p{k_pool.size(0), k_pool.size(1), k_pool.size(2), k_pool.size(3)};
  TESSEL_CHECK(p.block_size > 0 && p.kv_heads > 0 && p.head_dim > 0, name,
               ": block_size, kv_heads and head_dim must be > 0, got pools ", k_pool.shape());
  return p;
}

}  // namespace

PagedKvStoreShape validate_paged_kv_store(const Backend& backend, const Tensor& k, const Tensor& v,
                                          const Tensor& slots, const Tensor& k_pool,
                                          const Tensor& v_pool) {
  const char* op = "paged_kv_store";
  PagedKvStoreShape s;
  s.pool = check_pools(backend, Op::PagedKvStore, k_pool, v_pool);
  need(op, "k", k);
  need(op, "v", v);
  const Shape want{k.ndim() == 3 ? k.size(0) : -1, s.pool.kv_heads, s.pool.head_dim};
  TESSEL_CHECK(k.ndim() == 3 && k.shape() == want && v.shape() == want, op, ": k ", k.shape(),
               " and v ", v.shape(), " must be [N, ", s.pool.kv_heads, ", ", s.pool.head_dim,
               "] (the pools' kv_heads and head_dim)");
  TESSEL_CHECK(k.dtype() == k_pool.dtype() && v.dtype() == k_pool.dtype(), op, ": k ",
               dtype_name(k.dtype()), " and v ", dtype_name(v.dtype()),
               " must have the pools' dtype ", dtype_name(k_pool.dtype()));
  s.tokens = k.size(0);
  index_tensor(op, "slots", slots, DType::I64, {s.tokens});
  const int64_t num_slots = s.pool.num_blocks * s.pool.block_size;
  const int64_t* slot = slots.data<int64_t>();
  for (int64_t i = 0; i < s.tokens; ++i)
    TESSEL_CHECK(slot[i] >= 0 && slot[i] < num_slots, op, ": slot ", slot[i], " of token ", i,
                 " outside [0, ", num_slots, ") (", s.pool.num_blocks, " blocks of ",
                 s.pool.block_size, ")");
  // Two tokens into one slot would leave the slot's contents to the thread schedule.
  std::vector<int64_t> sorted(slot, slot + s.tokens);
  std::sort(sorted.begin(), sorted.end());
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  TESSEL_CHECK(dup == sorted.end(), op, ": slot ", dup == sorted.end() ? -1 : *dup,
               " is written by more than one token");
  return s;
}

PagedAttentionShape validate_paged_attention(const Backend& backend, const PagedAttentionDesc& desc,
                                             const Tensor& q, const Tensor& k_pool,
                                             const Tensor& v_pool, const Tensor& block_tables,
                                             const Tensor& seq_lens, const Tensor& query_starts,
                                             const Tensor& out) {
  const char* op = "paged_attention";
  PagedAttentionShape s;
  s.pool = check_pools(backend, Op::PagedAttention, k_pool, v_pool);
  need(op, "q", q);
  need(op, "out", out);
  TESSEL_CHECK(q.ndim() == 3 && q.size(2) == s.pool.head_dim, op, ": q ", q.shape(),
               " must be [N, H, ", s.pool.head_dim, "] (the pools' head_dim)");
  s.tokens = q.size(0);
  s.heads = q.size(1);
  TESSEL_CHECK(s.heads > 0 && s.heads % s.pool.kv_heads == 0, op, ": q has ", s.heads,
               " heads, which the pools' ", s.pool.kv_heads, " kv heads must divide");
  const DType qd = q.dtype(), pd = k_pool.dtype();
  TESSEL_CHECK(qd == DType::F64 ? pd == DType::F64 : is_half_or_f32(qd) && is_half_or_f32(pd), op,
               ": q ", dtype_name(qd), " with ", dtype_name(pd),
               " pools: f64 goes with f64, else q and the pools are each f32, bf16 or f16");
  TESSEL_CHECK(out.dtype() == qd && out.shape() == q.shape(), op, ": out must be ", dtype_name(qd),
               " ", q.shape(), " (q's dtype and shape), got ", dtype_name(out.dtype()), " ",
               out.shape());
  TESSEL_CHECK(std::isfinite(desc.scale) && desc.scale >= 0, op, ": scale ", desc.scale,
               " must be finite and >= 0 (0 = 1/sqrt(D))");
  TESSEL_CHECK(desc.window >= 0, op, ": window ", desc.window, " must be >= 0 (0 = unlimited)");
  s.scale = desc.scale > 0 ? desc.scale : 1.0 / std::sqrt(double(s.pool.head_dim));

  need(op, "block_tables", block_tables);
  TESSEL_CHECK(block_tables.ndim() == 2 && block_tables.dtype() == DType::I32, op,
               ": block_tables must be i32 [S, max_blocks], got ", dtype_name(block_tables.dtype()),
               " ", block_tables.shape());
  s.sequences = block_tables.size(0);
  s.max_blocks = block_tables.size(1);
  index_tensor(op, "seq_lens", seq_lens, DType::I64, {s.sequences});
  index_tensor(op, "query_starts", query_starts, DType::I64, {s.sequences + 1});
  const int64_t* len = seq_lens.data<int64_t>();
  const int64_t* start = query_starts.data<int64_t>();
  const int32_t* table = block_tables.data<int32_t>();
  TESSEL_CHECK(start[0] == 0 && start[s.sequences] == s.tokens, op,
               ": query_starts must run from 0 to N = ", s.tokens, " (q's rows), got ", start[0],
               " .. ", start[s.sequences]);
  for (int64_t i = 0; i < s.sequences; ++i) {
    const int64_t n = start[i + 1] - start[i];
    TESSEL_CHECK(n >= 0, op, ": query_starts decreases at sequence ", i, ": ", start[i], " then ",
                 start[i + 1]);
    TESSEL_CHECK(len[i] >= n, op, ": sequence ", i, " has ", n, " new queries but seq_len ", len[i],
                 " (its keys include its new tokens)");
    const int64_t blocks = (len[i] + s.pool.block_size - 1) / s.pool.block_size;
    TESSEL_CHECK(blocks <= s.max_blocks, op, ": sequence ", i, " has ", len[i], " keys, ", blocks,
                 " blocks of ", s.pool.block_size, ", but block_tables has room for ",
                 s.max_blocks);
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t block = table[i * s.max_blocks + b];
      TESSEL_CHECK(block >= 0 && block < s.pool.num_blocks, op, ": block_tables[", i, "][", b,
                   "] = ", block, " outside [0, ", s.pool.num_blocks, ") (sequence ", i, " has ",
                   len[i], " keys)");
    }
  }
  return s;
}

}  // namespace tessel::kernels
