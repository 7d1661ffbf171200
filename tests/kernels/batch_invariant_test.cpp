// SPDX-License-Identifier: Apache-2.0
// Batch-invariant products (kernels/batch_invariant.h), on every kernel set this CPU runs: with the
// mode on, the Linear forward's product (A [m, k] times a transposed weight, f32 / bf16 / f16) and
// quant_matmul give every row the same bits alone, inside products of other sizes, next to other
// rows and at 1 or 2 threads; the results match the fp64 reference on odd shapes; every GEMM case
// of the op harness passes with the mode on; and the mode off keeps oneDNN's results.
#include "tessel/kernels/batch_invariant.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "op_harness.h"
#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/gemm_onednn.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/kernels/quant/dequantize.h"
#include "tessel/kernels/quant/quant_blocks.h"
#include "tessel/kernels/quant/quantize.h"
#include "tessel/kernels/quant_amx.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::testing {
namespace {

using kernels::BatchInvariantScope;
using kernels::GemmDesc;
using kernels::KernelSet;
using kernels::quant::QuantType;

// Restores the thread count when a test ends.
struct Restore {
  int threads = num_threads();
  ~Restore() { set_num_threads(threads); }
};

// y = x w^T on `be` for x [m, k], w [n, k] in x's dtype.
Tensor linear(kernels::Backend& be, const Tensor& x, const Tensor& w) {
  const int64_t m = x.size(0), n = w.size(0), k = x.size(1);
  Tensor y = zeros({m, n}, x.dtype());
  be.gemm(kernels::dense_gemm_desc(1, m, n, k, false, true), x, w, y);
  return y;
}

bool same_row(const Tensor& a, int64_t ia, const Tensor& b, int64_t ib) {
  const int64_t bytes = a.size(1) * int64_t(dtype_size(a.dtype()));
  return std::memcmp(static_cast<const char*>(a.data_ptr()) + ia * bytes,
                     static_cast<const char*>(b.data_ptr()) + ib * bytes, size_t(bytes)) == 0;
}

Tensor rows(const Tensor& x, int64_t begin, int64_t count) {
  return x.narrow(0, begin, count).clone();
}

// x with rows [begin, begin + count) kept and every other row replaced by fresh values.
Tensor other_neighbours(const Tensor& x, int64_t begin, int64_t count, Generator& g) {
  Tensor y = randn(x.shape(), DType::F32, &g).to(x.dtype());
  const int64_t bytes = x.size(1) * int64_t(dtype_size(x.dtype()));
  std::memcpy(static_cast<char*>(y.data_ptr()) + begin * bytes,
              static_cast<const char*>(x.data_ptr()) + begin * bytes, size_t(count * bytes));
  return y;
}

// Every row of `full` (x's product at one thread count) is compared with the same row computed
// by `product` alone, at an unaligned address, in slices of several sizes, next to other rows,
// and with the whole batch at 1 and 2 threads. Returns the number of rows that differ.
template <typename Product>
int64_t differing_rows(const Tensor& x, Product&& product, Generator& g) {
  const int64_t m = x.size(0);
  int64_t bad = 0;
  set_num_threads(2);
  const Tensor full = product(x);
  set_num_threads(1);
  const Tensor serial = product(x);
  for (int64_t i = 0; i < m; ++i) bad += !same_row(full, i, serial, i);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int64_t i = 0; i < m; i += threads == 1 ? 1 : 7) {
      bad += !same_row(full, i, product(rows(x, i, 1)), 0);
      // The row one element into a buffer: no alignment the kernel could depend on.
      Tensor shifted = rows(x, i > 0 ? i - 1 : i, i > 0 ? 2 : 1);
      Tensor one = shifted.narrow(0, i > 0 ? 1 : 0, 1);
      Tensor view = empty({x.size(1) + 1}, x.dtype());
      std::memcpy(static_cast<char*>(view.data_ptr()) + dtype_size(x.dtype()), one.data_ptr(),
                  size_t(x.size(1)) * dtype_size(x.dtype()));
      bad += !same_row(full, i, product(view.narrow(0, 1, x.size(1)).reshape({1, x.size(1)})), 0);
    }
    for (int64_t count : {2, 3, 5, 7, 13, 33}) {
      for (int64_t begin = 0; begin + count <= m; begin += 3 * count + 1) {
        const Tensor part = product(rows(x, begin, count));
        for (int64_t r = 0; r < count; ++r) bad += !same_row(full, begin + r, part, r);
      }
    }
    const int64_t begin = m / 3, count = std::max<int64_t>(1, m / 4);
    const Tensor mixed = product(other_neighbours(x, begin, count, g));
    for (int64_t r = begin; r < begin + count; ++r) bad += !same_row(full, r, mixed, r);
  }
  return bad;
}

std::string set_name(KernelSet set) {
  return std::string(kernels::kernel_set_name(set));
}

TEST(BatchInvariant, ScopeRestoresTheSetting) {
  const bool before = kernels::batch_invariant();
  {
    BatchInvariantScope on;
    EXPECT_TRUE(kernels::batch_invariant());
    {
      BatchInvariantScope off(false);
      EXPECT_FALSE(kernels::batch_invariant());
    }
    EXPECT_TRUE(kernels::batch_invariant());
  }
  EXPECT_EQ(kernels::batch_invariant(), before);
  kernels::set_batch_invariant(true);
  EXPECT_TRUE(kernels::batch_invariant());
  kernels::set_batch_invariant(before);
}

struct GemmShape {
  int64_t m, n, k;
};

// The fp64 NMSE of one product on `be` (mode on) with alpha, beta and padded leading dimensions.
double product_nmse(kernels::Backend& be, DType dt, const GemmShape& s, double alpha, double beta,
                    int64_t pad, uint64_t seed) {
  Generator g(seed);
  GemmDesc d = kernels::dense_gemm_desc(1, s.m, s.n, s.k, false, true);
  d.lda += pad, d.ldb += 2 * pad, d.ldc += 3 * pad;
  d.alpha = alpha, d.beta = beta;
  const Tensor a = randn({s.m, d.lda}, DType::F32, &g).to(dt);
  const Tensor b = randn({s.n, d.ldb}, DType::F32, &g).to(dt);
  const Tensor c0 = randn({s.m, d.ldc}, DType::F32, &g).to(dt);
  Tensor c = c0.clone();
  be.gemm(d, a, b, c);
  Tensor want = c0.to(DType::F64);
  kernels::reference_backend().gemm(d, a.to(DType::F64), b.to(DType::F64), want);
  return nmse(c.to(DType::F64), want);
}

double bound(DType dt) {
  return dt == DType::F32 ? 1e-10 : dt == DType::BF16 ? 1e-4 : 2e-6;
}

TEST(BatchInvariantGemm, MatchesTheFp64Reference) {
  Restore restore;
  BatchInvariantScope on;
  for (KernelSet set : kernels::runnable_kernel_sets()) {
    kernels::Backend& be = kernels::cpu_backend_for(set);
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      std::vector<GemmShape> shapes;
      for (int64_t m = 1; m <= 40; ++m) shapes.push_back({m, 13, 33});
      for (int64_t m : {7, 13, 33, 257})
        for (int64_t k : {7, 33, 768})
          for (int64_t n : {13, 1031})
            if (m * n * k <= 33 * 1031 * 768 || dt == DType::F32) shapes.push_back({m, n, k});
      uint64_t seed = 1;
      for (const GemmShape& s : shapes) {
        const double e = product_nmse(be, dt, s, 1.0, 0.0, 0, seed++);
        EXPECT_LE(e, bound(dt)) << set_name(set) << " " << dtype_name(dt) << " " << s.m << "x"
                                << s.n << "x" << s.k;
      }
      // alpha, beta and leading dimensions wider than the rows.
      for (const GemmShape& s : {GemmShape{7, 13, 33}, GemmShape{13, 50, 97}})
        for (int64_t pad : {0, 5}) {
          EXPECT_LE(product_nmse(be, dt, s, 0.5, 1.5, pad, seed++), bound(dt))
              << set_name(set) << " " << dtype_name(dt) << " alpha/beta pad " << pad;
          EXPECT_LE(product_nmse(be, dt, s, 2.0, 0.0, pad, seed++), bound(dt))
              << set_name(set) << " " << dtype_name(dt) << " alpha pad " << pad;
        }
    }
  }
}

// Every GEMM case of the harness (all transposes, batches, broadcasts, strides, alpha, beta,
// beta = 0 over NaN) with the mode on: the invariant kernel takes the A B^T ones.
TEST(BatchInvariantGemm, HarnessGemmCasesPassWithTheModeOn) {
  BatchInvariantScope on;
  int64_t checked = 0;
  for (KernelSet set : kernels::runnable_kernel_sets()) {
    kernels::Backend& be = kernels::cpu_backend_for(set);
    for (const OpCase& c : all_op_cases()) {
      if (c.op != kernels::Op::Gemm || !be.supports(c.op, c.dtype)) continue;
      EXPECT_EQ(check_op_case(c, be), "") << set_name(set) << " " << c.name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(BatchInvariantGemm, RowsAreTheSameInEveryBatch) {
  Restore restore;
  BatchInvariantScope on;
  for (KernelSet set : kernels::runnable_kernel_sets()) {
    kernels::Backend& be = kernels::cpu_backend_for(set);
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      // Under 32 rows bf16 / f16 are read in place, from 32 on widened into buffers: the same bits.
      for (const GemmShape& s :
           {GemmShape{300, 13, 7}, GemmShape{300, 1031, 33}, GemmShape{100, 1031, 768},
            GemmShape{41, 50, 768}, GemmShape{37, 29, 3072}}) {
        Generator g(uint64_t(s.m * 7 + s.k));
        const Tensor x = randn({s.m, s.k}, DType::F32, &g).to(dt);
        const Tensor w = randn({s.n, s.k}, DType::F32, &g).to(dt);
        const int64_t bad = differing_rows(
            x, [&](const Tensor& xs) { return linear(be, xs, w); }, g);
        EXPECT_EQ(bad, 0) << set_name(set) << " " << dtype_name(dt) << " " << s.m << "x" << s.n
                          << "x" << s.k;
      }
    }
  }
}

// The mode off leaves the library's path alone where it is the faster one: a 65-row product
// (above the tiled kernel's 48 rows, cpu/gemm.cpp) is oneDNN's, bit for bit.
TEST(BatchInvariantGemm, ModeOffKeepsTheLibraryResult) {
  BatchInvariantScope off(false);
  Generator g(5);
  const Tensor x = randn({65, 768}, DType::F32, &g), w = randn({1031, 768}, DType::F32, &g);
  const Tensor y = linear(kernels::cpu_backend(), x, w);
  Tensor want = zeros({65, 1031}, DType::F32);
  kernels::onednn::gemm(kernels::dense_gemm_desc(1, 65, 1031, 768, false, true), x.data<float>(),
                        w.data<float>(), want.data<float>());
  EXPECT_EQ(std::memcmp(y.data_ptr(), want.data_ptr(), size_t(65 * 1031) * sizeof(float)), 0);
}

Tensor quant_weight(QuantType type, int64_t n, int64_t k, Generator& g) {
  const Tensor wf = randn({n, k}, DType::F32, &g);
  const std::vector<uint8_t> bytes = kernels::quant::quantize_rows(type, wf.data<float>(), n, k);
  return kernels::quant::quantized_weight(type, bytes, n, k);
}

Tensor quant_product(kernels::Backend& be, QuantType type, const Tensor& x, const Tensor& w,
                     int64_t n) {
  Tensor y = zeros({x.size(0), n}, DType::F32);
  be.quant_matmul(type, x, w, y);
  return y;
}

// The Q types and Int8 rows round each activation row on its own and give every output one dot
// product, so they are invariant with the mode off as well; F16 / BF16 weights take the invariant
// tiles. Except where the avx512 set has AMX-INT8 tiles: with the mode off, Q8_0 and the k-quants
// decode (m < 4) on the VNNI rows, faster than the tiles' order (QuantAmx*.OutsideTheInvariant...).
TEST(BatchInvariantQuant, RowsAreTheSameInEveryBatch) {
  Restore restore;
  std::vector<QuantType> types(std::begin(kernels::quant::kAllQuantTypes),
                               std::end(kernels::quant::kAllQuantTypes));
  types.push_back(QuantType::Int8);
  for (KernelSet set : kernels::runnable_kernel_sets()) {
    kernels::Backend& be = kernels::cpu_backend_for(set);
    for (QuantType type : types) {
      const bool q_type = type != QuantType::F16 && type != QuantType::BF16;
      for (bool mode : {true, false}) {
        if (!mode && !q_type) continue;
        const bool amx_decode = set == KernelSet::Avx512 && kernels::quant_amx_enabled() &&
                                (type == QuantType::Q8_0 || type == QuantType::Q4_K ||
                                 type == QuantType::Q5_K || type == QuantType::Q6_K);
        if (!mode && amx_decode) continue;
        BatchInvariantScope scope(mode);
        for (const GemmShape& s : {GemmShape{70, 1031, 768}, GemmShape{40, 13, 256}}) {
          Generator g(uint64_t(s.n + s.k));
          const Tensor w = quant_weight(type, s.n, s.k, g);
          const Tensor x = randn({s.m, s.k}, DType::F32, &g);
          const int64_t bad = differing_rows(
              x, [&](const Tensor& xs) { return quant_product(be, type, xs, w, s.n); }, g);
          EXPECT_EQ(bad, 0) << set_name(set) << " " << kernels::quant::quant_type_name(type)
                            << (mode ? " mode on " : " mode off ") << s.m << "x" << s.n << "x"
                            << s.k;
        }
      }
    }
  }
}

// F16 / BF16 weights under the mode against the fp64 product of the same weights.
TEST(BatchInvariantQuant, HalfWeightsMatchTheFp64Reference) {
  BatchInvariantScope on;
  for (KernelSet set : kernels::runnable_kernel_sets()) {
    kernels::Backend& be = kernels::cpu_backend_for(set);
    for (QuantType type : {QuantType::F16, QuantType::BF16})
      for (const GemmShape& s :
           {GemmShape{1, 13, 7}, GemmShape{13, 1031, 33}, GemmShape{33, 50, 768}}) {
        Generator g(uint64_t(s.m + s.n));
        const Tensor w = quant_weight(type, s.n, s.k, g);
        const Tensor x = randn({s.m, s.k}, DType::F32, &g);
        const Tensor y = quant_product(be, type, x, w, s.n);
        Tensor want = zeros({s.m, s.n}, DType::F64);
        kernels::reference_backend().quant_matmul(type, x.to(DType::F64), w, want);
        EXPECT_LE(nmse(y.to(DType::F64), want), 1e-10)
            << set_name(set) << " " << kernels::quant::quant_type_name(type) << " " << s.m << "x"
            << s.n << "x" << s.k;
      }
  }
}

}  // namespace
}  // namespace tessel::testing
