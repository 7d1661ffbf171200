// SPDX-License-Identifier: Apache-2.0
// ops::paged_kv_store and ops::paged_attention: equal to ops::attention on the same keys laid out
// contiguously (causal, same window, grouped heads), bitwise batch-invariant (a sequence's rows
// alone equal its rows inside a batch of 33 mixed sequences with other block tables; a prompt in
// chunks of 1 and 5 equals it all at once, over other block sizes; one thread equals two), 16-bit
// pools read in place bitwise equal to f32 pools of their widened values, and the errors:
// gradients, out-of-range slots and block-table entries, inconsistent query ranges.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "tessel/autograd/grad_mode.h"
#include "tessel/core/threads.h"
#include "tessel/ops/ops.h"

namespace tessel::ops {
namespace {

Tensor rn(const Shape& s, uint64_t seed, DType dtype = DType::F32) {
  Generator g(seed);
  return randn(s, DType::F32, &g).to(dtype);
}

// A pool of blocks handed out in a shuffled order, so that no two caches lay a sequence out alike.
class PagedCache {
 public:
  PagedCache(int64_t num_blocks, int64_t block_size, int64_t kv_heads, int64_t dim, DType dtype,
             uint32_t seed)
      : block_size_(block_size),
        k_(full({num_blocks, block_size, kv_heads, dim}, 9.0, dtype)),
        v_(full({num_blocks, block_size, kv_heads, dim}, -9.0, dtype)),
        free_(size_t(num_blocks)) {
    std::iota(free_.begin(), free_.end(), 0);
    std::shuffle(free_.begin(), free_.end(), std::mt19937(seed));
  }

  int add_sequence() {
    tables_.emplace_back();
    lens_.push_back(0);
    return int(tables_.size()) - 1;
  }

  // Appends k, v [n, Hkv, D] to sequence s, taking new blocks as it grows.
  void append(int s, const Tensor& k, const Tensor& v) {
    const int64_t n = k.size(0);
    std::vector<int64_t> slots(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = lens_[size_t(s)] + i;
      if (t / block_size_ >= int64_t(tables_[size_t(s)].size())) {
        TESSEL_CHECK(!free_.empty(), "test cache: out of blocks");
        tables_[size_t(s)].push_back(free_.back());
        free_.pop_back();
      }
      slots[size_t(i)] =
          int64_t(tables_[size_t(s)][size_t(t / block_size_)]) * block_size_ + t % block_size_;
    }
    paged_kv_store(k, v, from_data(slots, {n}), k_, v_);
    lens_[size_t(s)] += n;
  }

  // Attention of the given sequences' new rows (q packed in `seqs` order, n[i] rows each).
  Tensor attend(const Tensor& q, const std::vector<int>& seqs, const std::vector<int64_t>& n,
                int64_t window = 0) const {
    size_t width = 1;
    for (int s : seqs) width = std::max(width, tables_[size_t(s)].size() + 2);
    std::vector<int32_t> table(seqs.size() * width, -1);
    std::vector<int64_t> lens, starts{0};
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto& t = tables_[size_t(seqs[i])];
      std::copy(t.begin(), t.end(), table.begin() + ptrdiff_t(i * width));
      lens.push_back(lens_[size_t(seqs[i])]);
      starts.push_back(starts.back() + n[i]);
    }
    const int64_t s = int64_t(seqs.size());
    return paged_attention(q, k_, v_, from_data(table, {s, int64_t(width)}), from_data(lens, {s}),
                           from_data(starts, {s + 1}), PagedAttentionOptions{0.0, window});
  }

  Tensor& k_pool() { return k_; }
  Tensor& v_pool() { return v_; }

 private:
  int64_t block_size_;
  Tensor k_, v_;
  std::vector<int32_t> free_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<int64_t> lens_;
};

// Rows [r0, r0 + rows) of a and rows [s0, s0 + rows) of b, compared bit for bit.
bool same_rows(const Tensor& a, int64_t r0, const Tensor& b, int64_t s0, int64_t rows) {
  const size_t row = size_t(a.numel() / a.size(0)) * dtype_size(a.dtype());
  return std::memcmp(static_cast<const char*>(a.data_ptr()) + size_t(r0) * row,
                     static_cast<const char*>(b.data_ptr()) + size_t(s0) * row,
                     size_t(rows) * row) == 0;
}

struct Geometry {
  int64_t heads, kv_heads, dim, window, block_size;
};

TEST(PagedAttention, EqualsContiguousAttention) {
  const Geometry kCases[] = {{6, 6, 64, 0, 16}, {6, 2, 18, 5, 3},  {6, 1, 8, 1, 1},
                             {12, 4, 64, 0, 7}, {6, 3, 18, 0, 16}, {6, 6, 8, 33, 5}};
  // (keys after the step, new queries) per sequence: decode steps, a whole prompt, chunks.
  const std::vector<std::pair<int64_t, int64_t>> kSeqs = {
      {1, 1}, {40, 1}, {23, 23}, {37, 9}, {70, 2}};
  uint64_t seed = 1;
  for (const Geometry& g : kCases) {
    PagedCache cache(180 / g.block_size + 8, g.block_size, g.kv_heads, g.dim, DType::F32,
                     uint32_t(seed));
    std::vector<Tensor> qs, want;
    std::vector<int> seqs;
    std::vector<int64_t> n;
    for (auto [len, rows] : kSeqs) {
      Tensor k = rn({1, len, g.kv_heads, g.dim}, ++seed),
             v = rn({1, len, g.kv_heads, g.dim}, ++seed);
      Tensor q = rn({1, rows, g.heads, g.dim}, ++seed);
      want.push_back(
          attention(q, k, v, true, Tensor(), 0.0, g.window).reshape({rows, g.heads, g.dim}));
      const int s = cache.add_sequence();
      cache.append(s, k.reshape({len, g.kv_heads, g.dim}), v.reshape({len, g.kv_heads, g.dim}));
      qs.push_back(q.reshape({rows, g.heads, g.dim}));
      seqs.push_back(s);
      n.push_back(rows);
    }
    const Tensor got = cache.attend(concat(qs, 0), seqs, n, g.window).to(DType::F64);
    const std::vector<double> all = got.to_vector<double>();
    size_t at = 0;
    for (const Tensor& w : want) {
      for (double x : w.to(DType::F64).to_vector<double>()) {
        ASSERT_NEAR(all[at], x, 2e-5) << "heads " << g.heads << "/" << g.kv_heads << " dim "
                                      << g.dim << " window " << g.window << " element " << at;
        ++at;
      }
    }
    ASSERT_EQ(at, all.size());
  }
}

class PagedInvariance : public ::testing::TestWithParam<DType> {};

// A target sequence (61 keys, 7 new rows) alone, and as sequence 17 of 33 mixed ones (decode
// steps, prompts, chunks) in another cache whose blocks are handed out differently.
TEST_P(PagedInvariance, AloneEqualsInsideABatchOf33) {
  const DType dt = GetParam();
  const int64_t heads = 6, kv_heads = 2, dim = 64, block = 16, len = 61, rows = 7;
  Tensor tk = rn({len, kv_heads, dim}, 100, dt), tv = rn({len, kv_heads, dim}, 101, dt);
  Tensor tq = rn({rows, heads, dim}, 102, dt);
  for (int64_t window : {int64_t(0), int64_t(5)}) {
    PagedCache alone(8, block, kv_heads, dim, dt, 7);
    const int a = alone.add_sequence();
    alone.append(a, tk, tv);
    const Tensor want = alone.attend(tq, {a}, {rows}, window);

    PagedCache batch(400, block, kv_heads, dim, dt, 99);
    std::mt19937 rng(5);
    std::vector<Tensor> qs;
    std::vector<int> seqs;
    std::vector<int64_t> n;
    int64_t target_row = 0;
    for (int i = 0; i < 33; ++i) {
      const int s = batch.add_sequence();
      if (i == 17) {
        batch.append(s, tk, tv);
        target_row = std::accumulate(n.begin(), n.end(), int64_t(0));
        qs.push_back(tq);
        n.push_back(rows);
      } else {
        const int64_t l = 1 + int64_t(rng() % 120);
        const int64_t kind = i % 3;  // decode step, whole prompt, chunk
        const int64_t r = kind == 0 ? 1 : kind == 1 ? l : 1 + int64_t(rng() % uint32_t(l));
        batch.append(s, rn({l, kv_heads, dim}, 200 + uint64_t(i), dt),
                     rn({l, kv_heads, dim}, 300 + uint64_t(i), dt));
        qs.push_back(rn({r, heads, dim}, 400 + uint64_t(i), dt));
        n.push_back(r);
      }
      seqs.push_back(s);
    }
    const Tensor q = concat(qs, 0);
    const Tensor got = batch.attend(q, seqs, n, window);
    EXPECT_TRUE(same_rows(got, target_row, want, 0, rows)) << "window " << window;

    // The same batch on one thread and on two.
    const int threads = num_threads();
    set_num_threads(1);
    const Tensor one = batch.attend(q, seqs, n, window);
    set_num_threads(2);
    const Tensor two = batch.attend(q, seqs, n, window);
    set_num_threads(threads);
    EXPECT_TRUE(same_rows(one, 0, two, 0, q.size(0))) << "window " << window;
    EXPECT_TRUE(same_rows(one, 0, got, 0, q.size(0))) << "window " << window;
  }
}

// A 75-token prompt processed whole, in chunks of 5 and one token at a time, each in a cache of
// another block size: every row's output is the same bits.
TEST_P(PagedInvariance, ChunkedPrefillEqualsWholePrompt) {
  const DType dt = GetParam();
  const int64_t heads = 6, kv_heads = 3, dim = 18, len = 75;  // three 32-key tiles
  Tensor k = rn({len, kv_heads, dim}, 11, dt), v = rn({len, kv_heads, dim}, 12, dt);
  Tensor q = rn({len, heads, dim}, 13, dt);
  for (int64_t window : {int64_t(0), int64_t(5)}) {
    std::vector<Tensor> outs;
    const std::pair<int64_t, int64_t> kRuns[] = {{len, 1}, {5, 16}, {1, 3}};  // (chunk, block)
    for (auto [chunk, block] : kRuns) {
      PagedCache cache(90, block, kv_heads, dim, dt, uint32_t(chunk));
      const int s = cache.add_sequence();
      std::vector<Tensor> parts;
      for (int64_t at = 0; at < len; at += chunk) {
        const int64_t c = std::min(chunk, len - at);
        cache.append(s, k.narrow(0, at, c), v.narrow(0, at, c));
        parts.push_back(cache.attend(q.narrow(0, at, c), {s}, {c}, window));
      }
      outs.push_back(concat(parts, 0));
    }
    EXPECT_TRUE(same_rows(outs[0], 0, outs[1], 0, len)) << "chunks of 5, window " << window;
    EXPECT_TRUE(same_rows(outs[0], 0, outs[2], 0, len)) << "chunks of 1, window " << window;
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, PagedInvariance,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(PagedAttention, F32QueriesOverBf16PoolsAndF32Store) {
  // An f32 model over a bf16 cache: paged_kv_store rounds k, v into the pool; attention equals
  // contiguous attention over the rounded keys.
  const int64_t heads = 4, kv_heads = 2, dim = 16, len = 19;
  PagedCache cache(8, 4, kv_heads, dim, DType::BF16, 3);
  Tensor k = rn({len, kv_heads, dim}, 21), v = rn({len, kv_heads, dim}, 22);
  Tensor q = rn({3, heads, dim}, 23);
  const int s = cache.add_sequence();
  cache.append(s, k, v);
  const Tensor got = cache.attend(q, {s}, {3});
  EXPECT_EQ(got.dtype(), DType::F32);
  const Tensor want = attention(q.reshape({1, 3, heads, dim}),
                                k.to(DType::BF16).to(DType::F32).reshape({1, len, kv_heads, dim}),
                                v.to(DType::BF16).to(DType::F32).reshape({1, len, kv_heads, dim}));
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], 2e-5) << "element " << i;
}

TEST(PagedAttention, SixteenBitPoolsReadInPlaceEqualTheirWidenedValuesBitwise) {
  // A bf16 / f16 pool is widened in registers as the kernel reads it: exact, so the output is bit
  // for bit the one of an f32 pool holding the widened values, at head dims that end in a partial
  // vector of every kernel set (7, 13, 33) and over 7, 13 and 33 keys (partial key groups, a
  // tile and one key more), with grouped heads and a window.
  for (DType pool : {DType::BF16, DType::F16})
    for (int64_t dim : {7, 13, 33})
      for (int64_t len : {7, 13, 33}) {
        const int64_t heads = 6, kv_heads = 2, rows = 3;
        Tensor k = rn({len, kv_heads, dim}, 31 + uint64_t(dim)).to(pool);
        Tensor v = rn({len, kv_heads, dim}, 32 + uint64_t(len)).to(pool);
        Tensor q = rn({rows, heads, dim}, 33);
        PagedCache half(12, 3, kv_heads, dim, pool, 4), wide(12, 3, kv_heads, dim, DType::F32, 4);
        const int a = half.add_sequence(), b = wide.add_sequence();
        half.append(a, k, v);
        wide.append(b, k.to(DType::F32), v.to(DType::F32));
        for (int64_t window : {0, 5}) {
          const Tensor got = half.attend(q, {a}, {rows}, window);
          const Tensor want = wide.attend(q, {b}, {rows}, window);
          EXPECT_TRUE(same_rows(got, 0, want, 0, rows))
              << dtype_name(pool) << " dim " << dim << " keys " << len << " window " << window;
        }
      }
}

TEST(PagedAttention, RefusesGradientsAndBadIndices) {
  const int64_t heads = 4, kv_heads = 2, dim = 8, block = 4;
  PagedCache cache(3, block, kv_heads, dim, DType::F32, 1);
  const int s = cache.add_sequence();
  cache.append(s, rn({6, kv_heads, dim}, 1), rn({6, kv_heads, dim}, 2));
  Tensor q = rn({2, heads, dim}, 3);
  EXPECT_NO_THROW(cache.attend(q, {s}, {2}));

  Tensor qg = rn({2, heads, dim}, 3);
  qg.set_requires_grad(true);
  EXPECT_THROW(cache.attend(qg, {s}, {2}), Error);
  {
    autograd::NoGradGuard no_grad;
    EXPECT_NO_THROW(cache.attend(qg, {s}, {2}));
  }

  auto attend = [&](std::vector<int32_t> table, std::vector<int64_t> lens,
                    std::vector<int64_t> starts) {
    const int64_t seqs = int64_t(lens.size());
    return paged_attention(q, cache.k_pool(), cache.v_pool(),
                           from_data(table, {seqs, int64_t(table.size()) / seqs}),
                           from_data(lens, {seqs}), from_data(starts, {seqs + 1}));
  };
  EXPECT_NO_THROW(attend({0, 1}, {6}, {0, 2}));
  EXPECT_THROW(attend({0, 3}, {6}, {0, 2}), Error);              // block 3 of 3
  EXPECT_THROW(attend({0, -1}, {6}, {0, 2}), Error);             // a used entry of -1
  EXPECT_THROW(attend({0, 1}, {9}, {0, 2}), Error);              // 9 keys need 3 blocks
  EXPECT_THROW(attend({0, 1}, {1}, {0, 2}), Error);              // 2 new rows but 1 key
  EXPECT_THROW(attend({0, 1}, {6}, {0, 1}), Error);              // rows do not end at N
  EXPECT_THROW(attend({0, 1, 0, 1}, {6, 6}, {0, 3, 2}), Error);  // decreasing starts
  EXPECT_NO_THROW(attend({0, 1, 0, 1}, {6, 6}, {0, 1, 2}));      // shared blocks are fine

  Tensor k = rn({2, kv_heads, dim}, 4), v = rn({2, kv_heads, dim}, 5);
  auto store = [&](std::vector<int64_t> slots) {
    paged_kv_store(k, v, from_data(slots, {2}), cache.k_pool(), cache.v_pool());
  };
  EXPECT_NO_THROW(store({10, 11}));
  EXPECT_THROW(store({11, 12}), Error);  // 12 slots
  EXPECT_THROW(store({-1, 3}), Error);
  EXPECT_THROW(store({5, 5}), Error);  // one slot twice
  Tensor kg = k.clone();
  kg.set_requires_grad(true);
  EXPECT_THROW(paged_kv_store(kg, v, from_data(std::vector<int64_t>{1, 2}, {2}), cache.k_pool(),
                              cache.v_pool()),
               Error);
}

}  // namespace
}  // namespace tessel::ops
