// SPDX-License-Identifier: Apache-2.0
// Paged KV store and paged attention cases (PagedAttention, Kwon et al. 2023) against the fp64
// reference. Block sizes 1, 3, 7 and 16; H = 6 query heads over 6, 3, 2 and 1 kv heads; head dims
// 7, 8, 13, 16, 18, 33, 64, 80 and 128; sequences of 7, 13 and 33 keys among others; windows 0
// (none), 1 and 5; ragged batches of up to 7 sequences: decode only (n_s = 1), whole prompts (n_s =
// seq_len) and a mix of prefill chunks and decode steps. Block tables are shuffled block ids with
// -1 past each sequence's last block, the pools hold spare blocks that no sequence uses, and q, the
// pools and out run in f32, f64, bf16 and f16, plus f32 queries over bf16 / f16 pools.
#include <algorithm>
#include <numeric>

#include "case_helpers.h"

namespace tessel::testing {

namespace {

struct SeqSpec {
  int64_t len, n;  // keys after the step, new queries
};

struct Scenario {
  const char* name;
  std::vector<SeqSpec> seqs;
};

const std::vector<Scenario>& scenarios() {
  static const std::vector<Scenario> kAll = {
      {"decode", {{1, 1}, {5, 1}, {17, 1}, {40, 1}, {33, 1}}},
      {"prefill", {{7, 7}, {20, 20}, {13, 13}}},
      {"mix", {{12, 5}, {30, 8}, {3, 3}, {50, 1}, {9, 2}, {16, 16}, {41, 7}}},
      // 7, 13 and 33 keys: partial groups of the vectorised score loop, a tile and one key more.
      {"odd", {{7, 1}, {13, 13}, {33, 1}, {33, 5}, {13, 2}}},
  };
  return kAll;
}

struct PagedSpec {
  int64_t block_size, heads, kv_heads, dim, window;
  const Scenario* scenario;
};

struct PagedGeometry {
  int64_t tokens = 0, max_blocks = 0, num_blocks = 0;
};

PagedGeometry geometry(const PagedSpec& s) {
  PagedGeometry g;
  for (const SeqSpec& q : s.scenario->seqs) {
    const int64_t blocks = (q.len + s.block_size - 1) / s.block_size;
    g.tokens += q.n;
    g.max_blocks = std::max(g.max_blocks, blocks + 1);  // room for a -1 after every sequence
    g.num_blocks += blocks;
  }
  g.num_blocks += 3;  // spare blocks of random data that no table names
  return g;
}

// block_tables: the pool's blocks in a random order, dealt to the sequences; -1 elsewhere.
Tensor shuffled_tables(Generator& gen, const PagedSpec& s, const PagedGeometry& g) {
  Tensor u = rand({g.num_blocks}, DType::F64, &gen);
  std::vector<int32_t> order(size_t(g.num_blocks));
  std::iota(order.begin(), order.end(), 0);
  const double* key = u.data<double>();
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key[a] < key[b]; });
  const int64_t seqs = int64_t(s.scenario->seqs.size());
  Tensor tables = full({seqs, g.max_blocks}, -1.0, DType::I32);
  int32_t* t = tables.data<int32_t>();
  size_t next = 0;
  for (int64_t i = 0; i < seqs; ++i) {
    const int64_t blocks = (s.scenario->seqs[size_t(i)].len + s.block_size - 1) / s.block_size;
    for (int64_t b = 0; b < blocks; ++b) t[i * g.max_blocks + b] = order[next++];
  }
  return tables;
}

std::string paged_variant(const PagedSpec& s) {
  return std::string(s.scenario->name) + "_bs" + std::to_string(s.block_size) + "_h" +
         std::to_string(s.heads) + "kv" + std::to_string(s.kv_heads) + "_w" +
         std::to_string(s.window);
}

double paged_flops(const PagedSpec& s) {
  double pairs = 0;
  for (const SeqSpec& q : s.scenario->seqs)
    for (int64_t j = 0; j < q.n; ++j) {
      const int64_t p = q.len - q.n + j;
      const int64_t lo = s.window > 0 ? std::max<int64_t>(0, p - s.window + 1) : 0;
      pairs += double(p + 1 - lo);
    }
  return 4.0 * double(s.heads * s.dim) * pairs;
}

OpCase attention_case(const PagedSpec& s, DType q_dtype, DType pool_dtype) {
  OpCase c;
  const PagedGeometry g = geometry(s);
  c.name = "paged_attention/" + paged_variant(s) +
           (pool_dtype != q_dtype ? "_pool" + case_helpers::dtype_str(pool_dtype) : "") + "/" +
           shape_tag({g.tokens, s.heads, s.dim}) + "/" + case_helpers::dtype_str(q_dtype);
  c.op = kernels::Op::PagedAttention;
  c.dtype = q_dtype;
  c.make_inputs = [=](Generator& gen) {
    const Shape pool{g.num_blocks, s.block_size, s.kv_heads, s.dim};
    Tensor q = random_tensor(gen, {g.tokens, s.heads, s.dim}, q_dtype, 1.5);
    Tensor k = random_tensor(gen, pool, pool_dtype);
    Tensor v = random_tensor(gen, pool, pool_dtype);
    Tensor tables = shuffled_tables(gen, s, g);
    const int64_t seqs = int64_t(s.scenario->seqs.size());
    Tensor lens = empty({seqs}, DType::I64), starts = empty({seqs + 1}, DType::I64);
    starts.data<int64_t>()[0] = 0;
    for (int64_t i = 0; i < seqs; ++i) {
      lens.data<int64_t>()[i] = s.scenario->seqs[size_t(i)].len;
      starts.data<int64_t>()[i + 1] = starts.data<int64_t>()[i] + s.scenario->seqs[size_t(i)].n;
    }
    return Tensors{q, k, v, tables, lens, starts};
  };
  c.make_outputs = [](const Tensors& in) {
    return Tensors{full(in[0].shape(), 7.0, in[0].dtype())};
  };
  kernels::PagedAttentionDesc desc;
  desc.window = s.window;
  c.run = [desc](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.paged_attention(desc, in[0], in[1], in[2], in[3], in[4], in[5], out[0]);
  };
  c.max_nmse = case_helpers::tolerance(q_dtype, 1e-10, 1e-24);
  c.flops = paged_flops(s);
  c.bytes = double(2 * g.tokens * s.heads * s.dim) * double(dtype_size(q_dtype));
  return c;
}

OpCase store_case(int64_t block_size, int64_t kv_heads, int64_t dim, int64_t tokens, DType dt) {
  OpCase c;
  const int64_t blocks = (tokens + block_size - 1) / block_size + 2;
  c.name = "paged_kv_store/bs" + std::to_string(block_size) + "/" +
           shape_tag({tokens, kv_heads, dim}) + "/" + case_helpers::dtype_str(dt);
  c.op = kernels::Op::PagedKvStore;
  c.dtype = dt;
  c.make_inputs = [=](Generator& gen) {
    const Shape pool{blocks, block_size, kv_heads, dim};
    // Distinct slots in a random order over the whole pool.
    Tensor u = rand({blocks * block_size}, DType::F64, &gen);
    std::vector<int64_t> order(size_t(blocks * block_size));
    std::iota(order.begin(), order.end(), 0);
    const double* key = u.data<double>();
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key[a] < key[b]; });
    Tensor slots = empty({tokens}, DType::I64);
    std::copy_n(order.begin(), tokens, slots.data<int64_t>());
    return Tensors{random_tensor(gen, {tokens, kv_heads, dim}, dt),
                   random_tensor(gen, {tokens, kv_heads, dim}, dt), slots,
                   random_tensor(gen, pool, dt), random_tensor(gen, pool, dt)};
  };
  c.make_outputs = [](const Tensors& in) { return Tensors{in[3].clone(), in[4].clone()}; };
  c.run = [](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.paged_kv_store(in[0], in[1], in[2], out[0], out[1]);
  };
  c.max_nmse = 0;  // a copy
  c.bytes = 4.0 * double(tokens * kv_heads * dim) * double(dtype_size(dt));
  return c;
}

}  // namespace

void add_paged_attention_cases(std::vector<OpCase>& v) {
  const int64_t kBlockSizes[] = {1, 3, 16};
  const int64_t kKvHeads[] = {6, 3, 2, 1};
  const int64_t kDims[] = {8, 18, 64};
  const int64_t kWindows[] = {0, 1, 5};
  const std::vector<Scenario>& sc = scenarios();
  int i = 0;
  for (int64_t bs : kBlockSizes)
    for (int64_t kvh : kKvHeads)
      for (int64_t w : kWindows) {
        const PagedSpec s{bs, 6, kvh, kDims[i % 3], w, &sc[size_t(i / 3 % 4)]};
        v.push_back(attention_case(s, DType::F32, DType::F32));
        ++i;
      }
  // Every scenario with every head dim once more in f32 (blocks of 7), and the other dtypes on a
  // selection.
  for (const Scenario& scen : sc)
    for (int64_t d : kDims)
      v.push_back(attention_case({7, 6, 2, d, 0, &scen}, DType::F32, DType::F32));
  for (const Scenario& scen : sc) {
    v.push_back(attention_case({3, 6, 3, 18, 5, &scen}, DType::F64, DType::F64));
    for (DType dt : {DType::BF16, DType::F16}) {
      v.push_back(attention_case({16, 6, 2, 64, 0, &scen}, dt, dt));
      v.push_back(attention_case({3, 6, 1, 18, 5, &scen}, dt, dt));
      v.push_back(attention_case({16, 6, 3, 64, 0, &scen}, DType::F32, dt));
    }
  }
  // The vectorised head-dim loops at the dims of real models (16, 64, 80, 128) over 7, 13 and 33
  // keys: f32 with and without grouped heads and a window, and 16-bit pools.
  const Scenario& odd = sc[3];
  for (int64_t d : {16, 80, 128}) {
    v.push_back(attention_case({16, 6, 6, d, 0, &odd}, DType::F32, DType::F32));
    v.push_back(attention_case({3, 6, 2, d, 5, &odd}, DType::F32, DType::F32));
    v.push_back(attention_case({7, 6, 3, d, 0, &odd}, DType::F32, DType::BF16));
    v.push_back(attention_case({7, 6, 1, d, 0, &odd}, DType::F16, DType::F16));
  }
  v.push_back(attention_case({16, 6, 6, 64, 0, &odd}, DType::F32, DType::F32));
  // 16-bit pools read in place: head dims 7, 13 and 33 end in a partial vector in every kernel
  // set (4, 8 and 16 lanes), with and without grouped heads and a window.
  for (int64_t d : {7, 13, 33}) {
    v.push_back(attention_case({3, 6, 2, d, 5, &odd}, DType::F32, DType::BF16));
    v.push_back(attention_case({16, 6, 3, d, 0, &odd}, DType::F32, DType::F16));
    v.push_back(attention_case({7, 6, 1, d, 0, &sc[2]}, DType::BF16, DType::BF16));
    v.push_back(attention_case({7, 6, 6, d, 1, &odd}, DType::F16, DType::F16));
  }
  for (DType dt : case_helpers::kCaseDTypes) {
    v.push_back(store_case(1, 3, 8, 7, dt));
    v.push_back(store_case(3, 2, 18, 13, dt));
    v.push_back(store_case(16, 1, 64, 33, dt));
  }
}

}  // namespace tessel::testing
