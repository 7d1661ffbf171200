// SPDX-License-Identifier: Apache-2.0
// The CUDA paged KV store and paged attention (kernels/cuda/attention/paged_attention.cu), their
// real source and launch code, run on the CPU through warp_emulation.h against the fp64
// reference: shuffled block tables, an empty sequence, prefill and decode rows, a window, GQA,
// and q and pools of different dtypes.
#include "kernels/cuda/warp_emulation.h"
// The kernel source itself, after the emulation.
#include "tessel/kernels/cuda/attention/paged_attention.cu"
//
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kernels/cuda/emulation_cases.h"

namespace tessel::gpu_test {
namespace {

void check_paged(DType q_dtype, DType pool_dtype, int64_t window) {
  std::mt19937_64 rng(7);
  const int64_t heads = 4, kv_heads = 2, dim = 40, block = 4;
  // 150 keys: every warp of the block takes chunks, so their merge counts.
  const std::vector<int64_t> lens = {9, 0, 150, 5}, rows = {9, 0, 1, 2};
  const int64_t seqs = int64_t(lens.size()), max_blocks = 38, num_blocks = 48;
  std::vector<int32_t> order(static_cast<size_t>(num_blocks));
  for (int64_t i = 0; i < num_blocks; ++i) order[size_t(i)] = int32_t(i);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> table(size_t(seqs * max_blocks), -1);
  std::vector<int64_t> slots, starts{0};
  size_t next = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t b = 0; b < (lens[size_t(s)] + block - 1) / block; ++b)
      table[size_t(s * max_blocks + b)] = order[next++];
    for (int64_t t = 0; t < lens[size_t(s)]; ++t)
      slots.push_back(int64_t(table[size_t(s * max_blocks + t / block)]) * block + t % block);
    starts.push_back(starts.back() + rows[size_t(s)]);
  }
  const int64_t keys = int64_t(slots.size()), tokens = starts.back();
  auto random = [&](const Shape& shape, DType dtype) {
    std::normal_distribution<double> dist(0.0, 1.0);
    std::vector<double> v(size_t(shape.numel()));
    for (double& x : v) x = dist(rng);
    return from_data<double>(v, shape).to(dtype);
  };
  Tensor k = random(Shape{keys, kv_heads, dim}, pool_dtype);
  Tensor v = random(Shape{keys, kv_heads, dim}, pool_dtype);
  Tensor q = random(Shape{tokens, heads, dim}, q_dtype);
  Tensor slot_t = from_data<int64_t>(slots, Shape{keys});
  Tensor table_t = from_data<int32_t>(table, Shape{seqs, max_blocks});
  Tensor lens_t = from_data<int64_t>(lens, Shape{seqs});
  Tensor starts_t = from_data<int64_t>(starts, Shape{seqs + 1});
  const Shape pool{num_blocks, block, kv_heads, dim};

  kernels::ReferenceBackend ref;
  Tensor kp64 = zeros(pool, DType::F64), vp64 = zeros(pool, DType::F64);
  ref.paged_kv_store(k.to(DType::F64), v.to(DType::F64), slot_t, kp64, vp64);
  Tensor want = empty(q.shape(), DType::F64);
  kernels::PagedAttentionDesc desc;
  desc.window = window;
  ref.paged_attention(desc, q.to(DType::F64), kp64, vp64, table_t, lens_t, starts_t, want);

  Tensor kp = zeros(pool, pool_dtype), vp = zeros(pool, pool_dtype);
  kernels::cuda::paged_kv_store(attn_type(pool_dtype), keys, kv_heads, dim, num_blocks * block,
                                k.data_ptr(), v.data_ptr(), slot_t.data<int64_t>(), kp.data_ptr(),
                                vp.data_ptr(), nullptr);
  EXPECT_EQ(nmse(kp, kp64), 0.0);
  EXPECT_EQ(nmse(vp, vp64), 0.0);
  kernels::cuda::PagedDims d{tokens, heads, kv_heads, dim, block, seqs, max_blocks, 0.0, window};
  Tensor out = empty(q.shape(), q_dtype);
  kernels::cuda::paged_attention(d, attn_type(q_dtype), attn_type(pool_dtype), q.data_ptr(),
                                 kp.data_ptr(), vp.data_ptr(), table_t.data<int32_t>(),
                                 lens_t.data<int64_t>(), starts_t.data<int64_t>(), out.data_ptr(),
                                 nullptr);
  EXPECT_LE(nmse(out, want), std::max(out_bound(q_dtype), out_bound(pool_dtype)))
      << dtype_name(q_dtype) << " q, " << dtype_name(pool_dtype) << " pools, window " << window;
}

TEST(CudaAttentionEmulation, PagedStoreAndAttentionMatchTheReference) {
  check_paged(DType::F32, DType::F32, 0);
  check_paged(DType::BF16, DType::BF16, 0);
  check_paged(DType::F16, DType::F16, 6);
  check_paged(DType::F32, DType::BF16, 6);
}

}  // namespace
}  // namespace tessel::gpu_test
