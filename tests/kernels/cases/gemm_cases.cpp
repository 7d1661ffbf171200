// SPDX-License-Identifier: Apache-2.0
// GEMM cases: every transpose combination on odd shapes, batched and strided-batched products
// (shared A or B, overlapping A), padded leading dimensions and batch strides, alpha / beta other
// than 1 / 0, k == 0, and C full of NaN with beta == 0 (C must not be read), in f32, f64, bf16,
// f16.
#include <cmath>
#include <limits>

#include "case_helpers.h"

namespace tessel::testing {

namespace {

struct GemmSpec {
  std::string variant;
  kernels::GemmDesc desc;
  bool nan_c = false;  // fill C with NaN (only meaningful with beta == 0)
};

// Elements an operand needs: one past the furthest element the descriptor touches.
int64_t extent(int64_t batch, int64_t stride, int64_t rows, int64_t ld, int64_t cols) {
  if (batch == 0 || rows == 0 || cols == 0) return 0;
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

OpCase gemm_case(const GemmSpec& spec, DType dtype) {
  const kernels::GemmDesc d = spec.desc;
  int64_t ra = d.trans_a ? d.k : d.m, ca = d.trans_a ? d.m : d.k;
  int64_t rb = d.trans_b ? d.n : d.k, cb = d.trans_b ? d.k : d.n;
  int64_t na = extent(d.batch, d.stride_a, ra, d.lda, ca);
  int64_t nb = extent(d.batch, d.stride_b, rb, d.ldb, cb);
  int64_t nc = extent(d.batch, d.stride_c, d.m, d.ldc, d.n);
  OpCase c;
  c.name = "gemm/" + spec.variant + "/" + shape_tag({d.batch, d.m, d.n, d.k}) + "/" +
           std::string(dtype_name(dtype));
  c.op = kernels::Op::Gemm;
  c.dtype = dtype;
  bool nan_c = spec.nan_c;
  c.make_inputs = [=](Generator& gen) {
    Tensor c0 = random_tensor(gen, {nc}, dtype);
    if (nan_c) c0.fill(std::numeric_limits<double>::quiet_NaN());
    return Tensors{random_tensor(gen, {na}, dtype), random_tensor(gen, {nb}, dtype), c0};
  };
  c.make_outputs = [](const Tensors& in) { return Tensors{in[2].clone()}; };
  c.run = [d](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.gemm(d, in[0], in[1], out[0]);
  };
  c.max_nmse = case_helpers::tolerance(dtype, 1e-10, 1e-24);
  c.flops = 2.0 * d.batch * d.m * d.n * d.k;
  c.bytes = double(na + nb + (d.beta != 0 ? 2 : 1) * nc) * dtype_size(dtype);
  return c;
}

std::vector<GemmSpec> gemm_specs() {
  std::vector<GemmSpec> specs;
  const char* kTrans[] = {"nn", "nt", "tn", "tt"};
  // Mixed odd shapes (m, n, k), each under every transpose combination.
  const int64_t kShapes[][3] = {{7, 13, 33}, {1, 257, 7}, {33, 1, 13}, {257, 33, 1}, {13, 7, 257}};
  for (auto& s : kShapes)
    for (int t = 0; t < 4; ++t)
      specs.push_back({kTrans[t], kernels::dense_gemm_desc(1, s[0], s[1], s[2], t & 2, t & 1)});
  specs.push_back({"nn", kernels::dense_gemm_desc(1, 64, 64, 64, false, false)});
  specs.push_back({"nn", kernels::dense_gemm_desc(1, 257, 257, 257, false, false)});

  // Batched: every transpose combination, and B shared by the batch (a linear layer).
  for (int t = 0; t < 4; ++t)
    specs.push_back({std::string("batched_") + kTrans[t],
                     kernels::dense_gemm_desc(3, 13, 7, 33, t & 2, t & 1)});
  specs.push_back({"shared_b", kernels::dense_gemm_desc(5, 7, 33, 13, false, false, false)});
  specs.push_back({"shared_b_nt", kernels::dense_gemm_desc(4, 33, 13, 7, false, true, false)});
  kernels::GemmDesc shared_a = kernels::dense_gemm_desc(3, 13, 33, 7, true, false);
  shared_a.stride_a = 0;
  specs.push_back({"shared_a_tn", shared_a});

  // Padded leading dimensions and gaps between batch entries.
  for (int t = 0; t < 4; ++t) {
    kernels::GemmDesc d = kernels::dense_gemm_desc(3, 13, 33, 7, t & 2, t & 1);
    d.lda += 3;
    d.ldb += 5;
    d.ldc += 2;
    d.stride_a = (d.trans_a ? d.k : d.m) * d.lda + 11;
    d.stride_b = (d.trans_b ? d.n : d.k) * d.ldb + 1;
    d.stride_c = d.m * d.ldc + 7;
    specs.push_back({std::string("padded_") + kTrans[t], d});
  }
  kernels::GemmDesc one_padded = kernels::dense_gemm_desc(1, 33, 7, 257, false, true);
  one_padded.lda = 300;
  one_padded.ldb = 260;
  one_padded.ldc = 9;
  specs.push_back({"padded_nt", one_padded});

  // B rows 4 KiB apart in f32 (cpu/gemm.cpp: below 64 rows OpenBLAS or oneDNN in place by the
  // CPU), batched with shared B.
  kernels::GemmDesc ld4k = kernels::dense_gemm_desc(2, 13, 33, 7, false, false, false);
  ld4k.ldb = 1024;
  ld4k.beta = 0.5;
  specs.push_back({"ld4k_b", ld4k});
  // From 64 rows B is copied to rows 64 bytes longer first: shared and per-entry B (with a gap
  // between entries), A transposed, accumulation into C.
  kernels::GemmDesc ld4k_rows = kernels::dense_gemm_desc(2, 65, 33, 7, false, false, false);
  ld4k_rows.ldb = 1024;
  ld4k_rows.beta = 0.5;
  specs.push_back({"ld4k_b_padded_shared", ld4k_rows});
  kernels::GemmDesc ld4k_batched = kernels::dense_gemm_desc(3, 67, 13, 33, true, false);
  ld4k_batched.ldb = 2048;
  ld4k_batched.stride_b = 33 * 2048 + 3;
  specs.push_back({"ld4k_b_padded_batched_tn", ld4k_batched});

  // Per-head products read from and written into [tokens, heads, dim] layouts: batch entries
  // side by side within each row.
  kernels::GemmDesc heads = kernels::dense_gemm_desc(3, 13, 7, 33, false, true);
  heads.lda = 3 * 33;
  heads.stride_a = 33;
  heads.ldb = 3 * 33;
  heads.stride_b = 33;
  heads.ldc = 3 * 7;
  heads.stride_c = 7;
  specs.push_back({"interleaved_heads", heads});

  // Batch entries of A that overlap (each starts one row after the previous): legal for reads.
  kernels::GemmDesc overlap = kernels::dense_gemm_desc(3, 13, 7, 33, false, false);
  overlap.stride_a = overlap.lda;
  specs.push_back({"overlapping_a", overlap});

  // alpha and beta: scaled accumulation, plain accumulation, and beta == 0 over a NaN C.
  kernels::GemmDesc ab = kernels::dense_gemm_desc(2, 33, 13, 7, false, true);
  ab.alpha = 0.5;
  ab.beta = -0.75;
  specs.push_back({"alpha_beta", ab});
  kernels::GemmDesc acc = kernels::dense_gemm_desc(1, 7, 257, 13, true, false);
  acc.beta = 1.0;
  specs.push_back({"accumulate", acc});
  kernels::GemmDesc nan = kernels::dense_gemm_desc(2, 13, 7, 33, false, false);
  nan.alpha = -2.0;
  specs.push_back({"beta0_nan_c", nan, true});
  kernels::GemmDesc k0 = kernels::dense_gemm_desc(2, 7, 13, 0, false, false);
  k0.beta = 0.5;
  specs.push_back({"k0_beta", k0});
  specs.push_back({"k0_nan_c", kernels::dense_gemm_desc(1, 7, 13, 0, false, true), true});
  specs.push_back({"empty_m", kernels::dense_gemm_desc(2, 0, 13, 7, false, false)});

  // The decode step (cpu/gemv.cpp: m <= 4 against a transposed B): every m, a row count that
  // leaves a remainder after passes of four rows, fewer rows than one pass, a k with a vector
  // tail, padding, alpha and beta, beta == 0 over NaN, and a shared B over a batch.
  for (int64_t m = 1; m <= 5; ++m)
    specs.push_back(
        {"decode_m" + std::to_string(m), kernels::dense_gemm_desc(1, m, 257, 769, false, true)});
  specs.push_back({"decode_n3", kernels::dense_gemm_desc(1, 1, 3, 33, false, true)});
  kernels::GemmDesc dpad = kernels::dense_gemm_desc(1, 3, 33, 13, false, true);
  dpad.lda = 17;
  dpad.ldb = 19;
  dpad.ldc = 37;
  dpad.alpha = 0.5;
  dpad.beta = -0.75;
  specs.push_back({"decode_padded_alpha_beta", dpad});
  specs.push_back({"decode_beta0_nan_c", kernels::dense_gemm_desc(1, 2, 13, 7, false, true), true});
  specs.push_back({"decode_shared_b", kernels::dense_gemm_desc(3, 1, 33, 13, false, true, false)});

  // Several rows across the vector lanes (cpu/gemm_lanes.cpp: 4 or 8 to 48 rows against a
  // transposed B): one, two and three lane groups with full tiles of B rows and a shorter last
  // one, B rows a multiple of 4 KiB apart (the skewed tiles, whose classes leave k's ends to a
  // tail) with alpha and beta, a shared B over a batch, beta == 0 over NaN.
  for (int64_t m : {4, 7, 8, 13, 16, 17, 31, 33, 48})
    specs.push_back(
        {"lanes_m" + std::to_string(m), kernels::dense_gemm_desc(1, m, 61, 129, false, true)});
  for (int64_t m : {13, 20, 41}) {
    kernels::GemmDesc skew = kernels::dense_gemm_desc(1, m, 53, m == 20 ? 517 : 300, false, true);
    skew.ldb = m == 20 ? 2048 : 1024;
    skew.alpha = 0.5;
    skew.beta = -0.75;
    specs.push_back({"lanes_skew_m" + std::to_string(m), skew});
  }
  // Padded rows of A, B and C: the sums go back to C transposed a block at a time, ldc apart.
  kernels::GemmDesc lpad = kernels::dense_gemm_desc(1, 19, 45, 70, false, true);
  lpad.lda = 75;
  lpad.ldb = 71;
  lpad.ldc = 51;
  specs.push_back({"lanes_padded", lpad});
  specs.push_back({"lanes_shared_b", kernels::dense_gemm_desc(3, 9, 29, 65, false, true, false)});
  specs.push_back(
      {"lanes_beta0_nan_c", kernels::dense_gemm_desc(1, 12, 30, 20, false, true), true});
  return specs;
}

}  // namespace

void add_gemm_cases(std::vector<OpCase>& v) {
  for (const GemmSpec& s : gemm_specs())
    for (DType dt : case_helpers::kCaseDTypes) v.push_back(gemm_case(s, dt));
}

}  // namespace tessel::testing
