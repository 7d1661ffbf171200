// SPDX-License-Identifier: Apache-2.0
// The quantized matmul y[m, n] = x[m, k] W[n, k]^T with W in a GGUF weight format, read in place
// (backend.h; formats in quant/quant_blocks.h). Each task owns a range of output columns (W's
// rows, split over the one OpenMP pool): it decodes one weight row at a time into L1
// (quant_decode.h) and multiplies it with every activation row, so each weight byte is read from
// memory once per call whatever m is. For the Q types and Int8 the activations are first rounded
// to int8 per 32-element block and the products are integer (quant_dot.h: AVX-512 VNNI, AVX2 or
// plain loops, by kernel set and CPU; Int8 and Q8_0 rows are read in place, without a decode); F16
// / BF16 rows are widened to f32 in registers and multiplied in f32 (gemm_invariant.h's tiles).
// Every output element depends only on its own row of x (the activations are rounded per row
// and block), so the Q types are batch-invariant as they are; F16 / BF16 use fixed-order tiles
// in every mode.
#include "tessel/core/cpu_features.h"
#include "tessel/kernels/cpu/gemm_invariant.h"
#include "tessel/kernels/cpu/isa_region.h"
#include "tessel/kernels/cpu/kernel_checks.h"
#include "tessel/kernels/quant/quant_blocks.h"
TESSEL_ISA_BEGIN
#include "tessel/kernels/cpu/cpu_backend.h"
#include "tessel/kernels/cpu/quant_decode.h"
#include "tessel/kernels/cpu/quant_dot.h"

namespace tessel::kernels::TESSEL_KERNEL_ISA {

namespace {

using quant::QuantType;

// Bytes of W per task at least: below this the fork/join costs more than the rows.
constexpr int64_t kTaskBytes = int64_t(1) << 16;

using DotRow = float (*)(const int8_t*, const float*, const int8_t*, const float*, int64_t);

// The fastest dot product this set and CPU run; `split`: the format has two scales per 32
// weights (Q6_K).
DotRow choose_dot_row(bool split) {
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  if (cpu_features().avx512_vnni) return split ? cpu::dot_row_vnni<true> : cpu::dot_row_vnni<false>;
#endif
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  return split ? cpu::dot_row_avx2<true> : cpu::dot_row_avx2<false>;
#else
  (void)split;
  return cpu::dot_row_scalar;
#endif
}

cpu::QuantizedRows quantize_activations(const QuantMatmulShape& s, const float* x) {
  const int64_t blocks = s.k / cpu::kActBlock;
  cpu::QuantizedRows act;
  act.q.resize(size_t(s.m * s.k));
  act.d.resize(size_t(s.m * blocks));
  act.sum.resize(size_t(s.m * blocks));
  for (int64_t i = 0; i < s.m; ++i)
    cpu::quantize_activation_row(x + i * s.k, s.k, act.q.data() + i * s.k,
                                 act.d.data() + i * blocks, act.sum.data() + i * blocks);
  return act;
}

int64_t task_grain(const QuantMatmulShape& s) {
  return std::max<int64_t>(1, kTaskBytes / std::max<int64_t>(s.row_bytes, 1));
}

void int8_matmul(QuantType type, const QuantMatmulShape& s, const float* x, const uint8_t* w,
                 float* y) {
  const int64_t blocks = s.k / cpu::kActBlock;
  const cpu::QuantizedRows act = quantize_activations(s, x);
  static const DotRow split_dot = choose_dot_row(true), dot = choose_dot_row(false);
  const DotRow dot_row = type == QuantType::Q6_K ? split_dot : dot;
  parallel_for(0, s.n, task_grain(s), [&](int64_t lo, int64_t hi) {
    cpu::DecodedRow row(s.k);
    for (int64_t j = lo; j < hi; ++j) {
      cpu::decode_row(type, w + j * s.row_bytes, s.k, row);
      for (int64_t i = 0; i < s.m; ++i) {
        const int8_t* xq = act.q.data() + i * s.k;
        const float* dx = act.d.data() + i * blocks;
        float v = dot_row(row.q.data(), row.scale.data(), xq, dx, blocks);
        if (row.has_offset)
          v -= cpu::offset_term(row.offset.data(), dx, act.sum.data() + i * blocks, blocks);
        y[i * s.n + j] = v;
      }
    }
  });
}

// Q8_0 rows need no decoding either: q8_0_rows (quant_dot.h) reads each block's scale and codes
// in place, kQ8Rows rows at a time.
using Q8Rows = void (*)(const uint8_t*, int64_t, const int8_t*, const float*, int64_t, float*);

std::array<Q8Rows, 2> choose_q8_0_rows() {  // {kQ8Rows rows, one row}
#if TESSEL_KERNEL_ISA_LEVEL >= 2
  if (cpu_features().avx512_vnni)
    return {cpu::q8_0_rows_vnni<cpu::kQ8Rows>, cpu::q8_0_rows_vnni<1>};
#endif
#if TESSEL_KERNEL_ISA_LEVEL >= 1
  return {cpu::q8_0_rows_avx2<cpu::kQ8Rows>, cpu::q8_0_rows_avx2<1>};
#else
  return {[](const uint8_t* w, int64_t rb, const int8_t* x, const float* dx, int64_t blocks,
             float* out) { cpu::q8_0_rows_scalar(w, rb, cpu::kQ8Rows, x, dx, blocks, out); },
          [](const uint8_t* w, int64_t rb, const int8_t* x, const float* dx, int64_t blocks,
             float* out) { cpu::q8_0_rows_scalar(w, rb, 1, x, dx, blocks, out); }};
#endif
}

void q8_0_matmul(const QuantMatmulShape& s, const float* x, const uint8_t* w, float* y) {
  const int64_t blocks = s.k / cpu::kActBlock;
  const cpu::QuantizedRows act = quantize_activations(s, x);
  static const std::array<Q8Rows, 2> rows_fn = choose_q8_0_rows();
  constexpr int64_t kR = cpu::kQ8Rows;
  // Whole groups of kR rows per task, so a row's result does not depend on the split.
  const int64_t groups = (s.n + kR - 1) / kR;
  parallel_for(0, groups, std::max<int64_t>(1, task_grain(s) / kR), [&](int64_t lo, int64_t hi) {
    float out[kR];
    for (int64_t gj = lo; gj < hi; ++gj) {
      const int64_t j0 = gj * kR, rows = std::min(kR, s.n - j0);
      for (int64_t i = 0; i < s.m; ++i) {
        const int8_t* xq = act.q.data() + i * s.k;
        const float* dx = act.d.data() + i * blocks;
        if (rows == kR) {
          rows_fn[0](w + j0 * s.row_bytes, s.row_bytes, xq, dx, blocks, out);
        } else {
          for (int64_t r = 0; r < rows; ++r)
            rows_fn[1](w + (j0 + r) * s.row_bytes, s.row_bytes, xq, dx, blocks, out + r);
        }
        for (int64_t r = 0; r < rows; ++r) y[i * s.n + j0 + r] = out[r];
      }
    }
  });
}

// Int8 rows (quant_format.h: the scale d, then k codes) need no decoding: the dot products read
// the codes where they lie with a unit scale per 16 and d applies once per output. The last
// k % 32 weights, which no activation block covers, are multiplied in f32 with x as it is.
void int8_row_matmul(const QuantMatmulShape& s, const float* x, const uint8_t* w, float* y) {
  const int64_t blocks = s.k / cpu::kActBlock, covered = blocks * cpu::kActBlock;
  const cpu::QuantizedRows act = quantize_activations(s, x);
  const std::vector<float> unit(size_t(2 * blocks), 1.0f);
  static const DotRow dot = choose_dot_row(false);
  parallel_for(0, s.n, task_grain(s), [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      const uint8_t* row = w + j * s.row_bytes;
      float d;
      std::memcpy(&d, row, sizeof d);
      const auto* q = reinterpret_cast<const int8_t*>(row + quant::kInt8ScaleBytes);
      for (int64_t i = 0; i < s.m; ++i) {
        float v = blocks > 0 ? dot(q, unit.data(), act.q.data() + i * s.k,
                                   act.d.data() + i * blocks, blocks)
                             : 0.0f;
        const float* xi = x + i * s.k;
        for (int64_t c = covered; c < s.k; ++c) v += xi[c] * float(q[c]);
        y[i * s.n + j] = d * v;
      }
    }
  });
}

// F16 / BF16 rows are multiplied in f32 with the activations as they are, through the invariant
// tiles with the weight widened in registers (gemm_invariant.h): one fixed-order dot product per
// output, so batch-invariant with the mode on or off.
void half_matmul(QuantType type, const QuantMatmulShape& s, const float* x, const uint8_t* w,
                 float* y) {
  cpu::invariant_matmul_half(s.m, s.n, s.k, x, s.k,
                             type == QuantType::BF16 ? DType::BF16 : DType::F16,
                             reinterpret_cast<const uint16_t*>(w), s.row_bytes / 2, y, s.n);
}

}  // namespace

void CpuBackend::quant_matmul(QuantType type, const Tensor& x, const Tensor& w, Tensor& y) {
  const QuantMatmulShape s = validate_quant_matmul(*this, type, x, w, y);
  float* yp = y.data<float>();
  if (s.m == 0 || s.n == 0) return;
  if (s.k == 0) {
    std::fill(yp, yp + s.m * s.n, 0.0f);
    return;
  }
  const float* xp = x.data<float>();
  const auto* wp = static_cast<const uint8_t*>(w.data_ptr());
  if (type == QuantType::F16 || type == QuantType::BF16)
    half_matmul(type, s, xp, wp, yp);
  else if (type == QuantType::Int8)
    int8_row_matmul(s, xp, wp, yp);
  else if (type == QuantType::Q8_0)
    q8_0_matmul(s, xp, wp, yp);
  else
    int8_matmul(type, s, xp, wp, yp);
}

}  // namespace tessel::kernels::TESSEL_KERNEL_ISA
TESSEL_ISA_END
