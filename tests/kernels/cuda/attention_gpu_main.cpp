// SPDX-License-Identifier: Apache-2.0
// The CUDA attention launchers (kernels/cuda/attention/attention.h) against the fp64 reference
// backend on the host: forward (out, lse) and backward (dq, dk, dv) for f32, bf16 and f16 on odd
// sizes (T 1..257), grouped-query 2:1 and 4:1, head dims 64, 128 and 40 (the plain path), causal
// and not, sliding windows, padding masks and rows that see no key, on the tensor-core kernels
// and again on the plain ones; the paged KV store and paged attention against the reference's.
// Inputs are rounded to the tested dtype first, so the reference sees exactly what the GPU
// reads; errors are NMSE with bounds per dtype (one line per case gives its largest NMSE as a
// fraction of the bound), and every output sits between guard bytes. The deterministic backward
// must also repeat bit for bit. Exits 77 (CTest's skip code) where no CUDA device is visible.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "kernels/cuda/gpu_buffer.h"
#include "tessel/kernels/cuda/attention/attention.h"
#include "tessel/kernels/reference/reference_backend.h"

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::gpu_test;
namespace kc = tessel::kernels::cuda;

namespace {

int g_failures = 0, g_checks = 0;
double g_case_worst = 0;  // the largest NMSE / bound of the current case
std::mt19937_64 g_rng(20261204);

struct TypeCase {
  const char* name;
  DType dtype;
  kc::AttnType type;
  double out_bound, grad_bound;  // NMSE bounds
};
// bf16 keeps 8 significant bits (NMSE of one rounding ~ 1e-6), f16 11; the gradients also carry
// the rounded forward output through D = rowsum(dO * O).
const TypeCase kTypes[] = {
    {"f32", DType::F32, kc::AttnType::F32, 1e-9, 1e-8},
    {"bf16", DType::BF16, kc::AttnType::BF16, 1e-4, 2e-3},
    {"f16", DType::F16, kc::AttnType::F16, 1e-5, 1e-4},
};

// Random values rounded to `dtype`, returned in f64 (the reference's input) and in dtype.
std::pair<Tensor, Tensor> random_tensor(const Shape& shape, DType dtype, double scale = 1.0) {
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<double> v(size_t(shape.numel()));
  for (double& x : v) x = dist(g_rng);
  Tensor narrow = from_data<double>(v, shape).to(dtype);
  return {narrow.to(DType::F64), narrow};
}

void expect_close(const std::string& what, const Tensor& got, const Tensor& want, double bound) {
  ++g_checks;
  double e = nmse(got, want);
  g_case_worst = std::max(g_case_worst, bound > 0 ? e / bound : (e > 0 ? INFINITY : 0.0));
  if (!(e <= bound)) {
    std::fprintf(stderr, "FAIL %s: NMSE %.3g above %.3g\n", what.c_str(), e, bound);
    ++g_failures;
  }
}
void expect_guards(const std::string& what, const GuardedBuffer& b) {
  ++g_checks;
  if (!b.guards_intact()) {
    std::fprintf(stderr, "FAIL %s: written outside its bounds\n", what.c_str());
    ++g_failures;
  }
}
void expect_same_bits(const std::string& what, const Tensor& a, const Tensor& b) {
  ++g_checks;
  if (a.nbytes() != b.nbytes() || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) != 0) {
    std::fprintf(stderr, "FAIL %s: two runs differ\n", what.c_str());
    ++g_failures;
  }
}

struct AttnCase {
  int64_t batch, tq, tk, heads, kv_heads, dim;
  bool causal;
  int64_t window;
  int mask;  // 0 none, 1 random padding, 2 random padding and batch entry 1 all padding
};

std::string describe(const TypeCase& t, const AttnCase& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s B%ld Tq%ld Tk%ld H%ld Hkv%ld D%ld %s w%ld mask%d", t.name,
                long(c.batch), long(c.tq), long(c.tk), long(c.heads), long(c.kv_heads), long(c.dim),
                c.causal ? "causal" : "full", long(c.window), c.mask);
  return buf;
}

Tensor make_mask(const AttnCase& c) {
  if (c.mask == 0) return Tensor();
  std::vector<int8_t> m(size_t(c.batch * c.tk));
  for (size_t i = 0; i < m.size(); ++i) m[i] = (g_rng() % 4) != 0;
  if (c.mask == 2 && c.batch > 1)
    for (int64_t j = 0; j < c.tk; ++j) m[size_t(c.tk + j)] = 0;
  return from_data<int8_t>(m, Shape{c.batch, c.tk});
}

void finish_case(const std::string& name) {
  std::printf("case %-60s worst NMSE / bound %.3g\n", name.c_str(), g_case_worst);
  g_case_worst = 0;
}

void run_attention(const TypeCase& t, const AttnCase& c) {
  const std::string name =
      describe(t, c) + (kc::attention_path() == kc::AttentionPath::Plain ? " plain" : "");
  AttentionDesc desc;
  desc.batch = c.batch;
  desc.q_len = c.tq;
  desc.kv_len = c.tk;
  desc.heads = c.heads;
  desc.kv_heads = c.kv_heads;
  desc.head_dim = c.dim;
  desc.causal = c.causal;
  desc.scale = 1.0 / std::sqrt(double(c.dim));
  desc.window = c.window;
  const Shape qs{c.batch, c.tq, c.heads, c.dim}, ks{c.batch, c.tk, c.kv_heads, c.dim};
  auto [q64, q] = random_tensor(qs, t.dtype);
  auto [k64, k] = random_tensor(ks, t.dtype);
  auto [v64, v] = random_tensor(ks, t.dtype);
  auto [g64, g] = random_tensor(qs, t.dtype);
  Tensor mask = make_mask(c);

  ReferenceBackend ref;
  Tensor out64 = empty(qs, DType::F64), lse64 = empty(Shape{c.batch, c.heads, c.tq}, DType::F64);
  ref.attention(desc, q64, k64, v64, mask, out64, lse64);
  Tensor dq64 = empty(qs, DType::F64), dk64 = empty(ks, DType::F64), dv64 = empty(ks, DType::F64);
  ref.attention_backward(desc, q64, k64, v64, mask, out64, lse64, g64, dq64, dk64, dv64);

  kc::AttentionDims d{c.batch, c.tq,     c.tk,       c.heads, c.kv_heads,
                      c.dim,   c.causal, desc.scale, c.window};
  GuardedBuffer dq_(q), dk_(k), dv_(v), dg(g);
  std::unique_ptr<GuardedBuffer> dmask;
  if (mask.defined()) dmask = std::make_unique<GuardedBuffer>(mask);
  const int8_t* mp = dmask ? dmask->as<int8_t>() : nullptr;
  GuardedBuffer dout(empty(qs, t.dtype), false);
  GuardedBuffer dlse(empty(Shape{c.batch, c.heads, c.tq}, DType::F32), false);
  kc::attention_forward(d, t.type, dq_.data(), dk_.data(), dv_.data(), mp, dout.data(),
                        dlse.as<float>(), nullptr);
  cuda_ok(cudaDeviceSynchronize(), "attention_forward");
  expect_close(name + " out", dout.download(), out64, t.out_bound);
  expect_close(name + " lse", dlse.download(), lse64, 1e-9);
  expect_guards(name + " out", dout);
  expect_guards(name + " lse", dlse);

  // The default backward (tensor cores where they apply), then the deterministic one twice.
  for (bool det : {false, true}) {
    const std::string bname = name + (det ? " deterministic" : "");
    const size_t ws_bytes = kc::attention_backward_workspace_bytes(d, t.type, det);
    GuardedBuffer ws(empty(Shape{int64_t(ws_bytes / 4) + 1}, DType::F32), false);
    Tensor first[3];
    for (int run = 0; run < (det ? 2 : 1); ++run) {
      GuardedBuffer gq(empty(qs, t.dtype), false), gk(empty(ks, t.dtype), false),
          gv(empty(ks, t.dtype), false);
      kc::attention_backward(d, t.type, dq_.data(), dk_.data(), dv_.data(), mp, dout.data(),
                             dlse.as<float>(), dg.data(), gq.data(), gk.data(), gv.data(),
                             ws.data(), ws_bytes, det, nullptr);
      cuda_ok(cudaDeviceSynchronize(), "attention_backward");
      Tensor got[3] = {gq.download(), gk.download(), gv.download()};
      if (run == 0) {
        expect_close(bname + " dq", got[0], dq64, t.grad_bound);
        expect_close(bname + " dk", got[1], dk64, t.grad_bound);
        expect_close(bname + " dv", got[2], dv64, t.grad_bound);
        expect_guards(bname + " dq", gq);
        expect_guards(bname + " dk", gk);
        expect_guards(bname + " dv", gv);
        expect_guards(bname + " workspace", ws);
        for (int i = 0; i < 3; ++i) first[i] = got[i];
      } else {
        for (int i = 0; i < 3; ++i) expect_same_bits(bname + " repeat", got[i], first[i]);
      }
    }
  }
  finish_case(name);
}

const AttnCase kAttnCases[] = {
    {2, 7, 7, 4, 2, 64, true, 0, 0},       {2, 13, 13, 4, 1, 128, false, 0, 1},
    {1, 33, 33, 8, 2, 64, true, 5, 0},     {1, 13, 33, 4, 2, 128, true, 0, 0},
    {1, 1, 257, 4, 1, 128, true, 64, 0},   {1, 257, 257, 2, 1, 128, true, 0, 1},
    {1, 257, 257, 4, 2, 64, false, 0, 0},  {2, 33, 33, 2, 2, 40, true, 0, 1},
    {1, 33, 7, 2, 1, 64, true, 0, 0},      {2, 13, 13, 2, 1, 64, false, 0, 2},
    {1, 130, 130, 4, 2, 128, true, 70, 0}, {1, 70, 130, 4, 4, 64, true, 0, 0},
};

// ---- paged ----

struct PagedCase {
  int64_t heads, kv_heads, dim, block_size, window;
  std::vector<int64_t> seq_lens, new_rows;
};

void run_paged(const TypeCase& qt, const TypeCase& pt, const PagedCase& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "paged q %s pool %s H%ld Hkv%ld D%ld bs%ld w%ld", qt.name, pt.name,
                long(c.heads), long(c.kv_heads), long(c.dim), long(c.block_size), long(c.window));
  const std::string name = buf;
  const int64_t seqs = int64_t(c.seq_lens.size());
  int64_t max_blocks = 0, total_blocks = 0, tokens = 0, keys = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t blocks = (c.seq_lens[size_t(s)] + c.block_size - 1) / c.block_size;
    max_blocks = std::max(max_blocks, blocks);
    total_blocks += blocks;
    tokens += c.new_rows[size_t(s)];
    keys += c.seq_lens[size_t(s)];
  }
  const int64_t num_blocks = total_blocks + 3;  // some blocks no sequence uses
  std::vector<int32_t> order(static_cast<size_t>(num_blocks));
  for (int64_t i = 0; i < num_blocks; ++i) order[size_t(i)] = int32_t(i);
  std::shuffle(order.begin(), order.end(), g_rng);
  std::vector<int32_t> table(size_t(seqs * std::max<int64_t>(max_blocks, 1)), -1);
  std::vector<int64_t> slots, starts{0};
  size_t next = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t len = c.seq_lens[size_t(s)], blocks = (len + c.block_size - 1) / c.block_size;
    for (int64_t b = 0; b < blocks; ++b) table[size_t(s * max_blocks + b)] = order[next++];
    for (int64_t t = 0; t < len; ++t)
      slots.push_back(int64_t(table[size_t(s * max_blocks + t / c.block_size)]) * c.block_size +
                      t % c.block_size);
    starts.push_back(starts.back() + c.new_rows[size_t(s)]);
  }
  const Shape pool{num_blocks, c.block_size, c.kv_heads, c.dim};
  auto [k64, k] = random_tensor(Shape{keys, c.kv_heads, c.dim}, pt.dtype);
  auto [v64, v] = random_tensor(Shape{keys, c.kv_heads, c.dim}, pt.dtype);
  auto [q64, q] = random_tensor(Shape{tokens, c.heads, c.dim}, qt.dtype);
  Tensor slot_t = from_data<int64_t>(slots, Shape{keys});
  Tensor table_t = from_data<int32_t>(table, Shape{seqs, std::max<int64_t>(max_blocks, 1)});
  Tensor lens_t = from_data<int64_t>(c.seq_lens, Shape{seqs});
  Tensor starts_t = from_data<int64_t>(starts, Shape{seqs + 1});

  ReferenceBackend ref;
  Tensor kp64 = zeros(pool, DType::F64), vp64 = zeros(pool, DType::F64);
  ref.paged_kv_store(k64, v64, slot_t, kp64, vp64);
  Tensor out64 = empty(Shape{tokens, c.heads, c.dim}, DType::F64);
  PagedAttentionDesc pd;
  pd.window = c.window;
  ref.paged_attention(pd, q64, kp64, vp64, table_t, lens_t, starts_t, out64);

  GuardedBuffer dk(k), dv(v), dslots(slot_t), dq(q), dtable(table_t), dlens(lens_t),
      dstarts(starts_t);
  GuardedBuffer kpool(zeros(pool, pt.dtype)), vpool(zeros(pool, pt.dtype));
  kc::paged_kv_store(pt.type, keys, c.kv_heads, c.dim, num_blocks * c.block_size, dk.data(),
                     dv.data(), dslots.as<int64_t>(), kpool.data(), vpool.data(), nullptr);
  kc::PagedDims d{tokens, c.heads,    c.kv_heads, c.dim,   c.block_size,
                  seqs,   max_blocks, 0.0,        c.window};
  if (max_blocks == 0) d.max_blocks = 1;
  GuardedBuffer dout(empty(Shape{tokens, c.heads, c.dim}, qt.dtype), false);
  kc::paged_attention(d, qt.type, pt.type, dq.data(), kpool.data(), vpool.data(),
                      dtable.as<int32_t>(), dlens.as<int64_t>(), dstarts.as<int64_t>(), dout.data(),
                      nullptr);
  cuda_ok(cudaDeviceSynchronize(), "paged attention");
  expect_close(name + " k_pool", kpool.download(), kp64, 0.0);
  expect_close(name + " v_pool", vpool.download(), vp64, 0.0);
  expect_guards(name + " k_pool", kpool);
  expect_guards(name + " v_pool", vpool);
  expect_close(name + " out", dout.download(), out64, std::max(qt.out_bound, pt.out_bound));
  expect_guards(name + " out", dout);
  finish_case(name);
}

const PagedCase kPagedCases[] = {
    {8, 2, 64, 16, 0, {7, 33, 257, 1}, {1, 1, 1, 1}},     // decode, GQA 4:1
    {4, 2, 128, 16, 0, {13, 40, 0, 300}, {13, 3, 0, 1}},  // prefill + decode, an empty one
    {8, 4, 128, 8, 20, {33, 100, 257}, {5, 1, 2}},        // sliding window
    {6, 2, 40, 16, 0, {70, 5}, {2, 5}},                   // a head dim off the tiles
};

}  // namespace

int main() {
  require_gpu_or_skip("attention_gpu");
  try {
    for (const TypeCase& t : kTypes)
      for (const AttnCase& c : kAttnCases) {
        kc::set_attention_path(kc::AttentionPath::Auto);
        run_attention(t, c);
        // bf16 / f16 at D 64 and 128 ran the tensor-core kernels: the plain ones as well.
        if (t.type != kc::AttnType::F32 && (c.dim == 64 || c.dim == 128)) {
          kc::set_attention_path(kc::AttentionPath::Plain);
          run_attention(t, c);
        }
      }
    kc::set_attention_path(kc::AttentionPath::Auto);
    for (const PagedCase& c : kPagedCases) {
      for (const TypeCase& t : kTypes) run_paged(t, t, c);
      run_paged(kTypes[0], kTypes[1], c);  // f32 queries over bf16 pools
      run_paged(kTypes[2], kTypes[0], c);  // f16 queries over f32 pools
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
    return 1;
  }
  std::printf("attention_gpu: %d of %d checks failed\n", g_failures, g_checks);
  return g_failures == 0 ? 0 : 1;
}
