// SPDX-License-Identifier: Apache-2.0
// Quantized matmul cases: y = x W^T with W in each GGUF weight format (Q8_0, Q4_0, Q4_K, Q5_K,
// Q6_K, F16, BF16) and in tessel's Int8 rows (also k = 229 and 13, not multiples of 32), built by
// quantizing Gaussian weights, for m in {1, 3, 7, 33, 64} activation rows and odd n, against the
// fp64 product with the exactly dequantized weights. The quantization of the weights is therefore
// not part of the error (both sides see the same blocks); what is:
// - Q types and Int8: the CPU kernel rounds x to int8 per 32-element block (step max|x| / 127), an
// error
//   of about step^2 / 12 per element, which for Gaussian x gives an NMSE near 2.5e-5 in x and
//   hence in y (its sum over k averages independent errors); measured 2.0e-5 to 4.6e-5
//   on every kernel set. Bound 1e-4.
// - F16 / BF16: exact weights and f32 accumulation only (the activations are not rounded): measured
//   5e-15 to 8e-14 with the earlier row-buffer kernel; bound 1e-10. The `rows_` cases walk the
//   register tiles' edges and the switch to widened buffers at 32 rows.
// With weights of 1e-6 the Q6_K scale underflows f16 to 0: both sides are then exactly zero.
#include <cstring>
#include <iterator>

#include "case_helpers.h"
#include "tessel/kernels/quant/quantize.h"

namespace tessel::testing {

namespace {

using kernels::quant::QuantType;

double quant_matmul_max_nmse(QuantType type) {
  return type == QuantType::F16 || type == QuantType::BF16 ? 1e-10 : 1e-4;
}

OpCase quant_matmul_case(QuantType type, int64_t m, int64_t n, int64_t k,
                         const std::string& variant, double weight_scale) {
  OpCase c;
  // "<m>x<n>/f32" last: the emulated-CPU test (tests/kernels/emulated_cpus.py) runs *_7x13_f32.
  c.name = "quant_matmul/" + variant + std::string(kernels::quant::quant_type_name(type)) + "/k" +
           std::to_string(k) + "/" + shape_tag({m, n}) + "/f32";
  c.op = kernels::Op::QuantMatmul;
  c.dtype = DType::F32;
  const int64_t rb = kernels::quant::row_bytes(type, k);
  c.make_inputs = [=](Generator& gen) {
    Tensor x = random_tensor(gen, {m, k}, DType::F32);
    Tensor wf = random_tensor(gen, {n, k}, DType::F32, weight_scale);
    const std::vector<uint8_t> bytes = kernels::quant::quantize_rows(type, wf.data<float>(), n, k);
    Tensor w = empty({n, rb}, DType::I8);
    std::memcpy(w.data_ptr(), bytes.data(), bytes.size());
    return Tensors{x, w};
  };
  c.make_outputs = [m, n](const Tensors& in) { return Tensors{full({m, n}, 7.0, in[0].dtype())}; };
  c.run = [type](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.quant_matmul(type, in[0], in[1], out[0]);
  };
  c.max_nmse = quant_matmul_max_nmse(type);
  c.flops = 2.0 * double(m) * double(n) * double(k);
  c.bytes = double(n * rb) + 4.0 * double(m * k + m * n);
  return c;
}

}  // namespace

void add_quant_matmul_cases(std::vector<OpCase>& v) {
  const QuantType kTypes[] = {QuantType::Q8_0, QuantType::Q4_0, QuantType::Q4_K, QuantType::Q5_K,
                              QuantType::Q6_K, QuantType::F16,  QuantType::BF16, QuantType::Int8};
  const int64_t kRows[] = {1, 3, 7, 33, 64};
  for (QuantType t : kTypes) {
    // An odd number of blocks per row: 7 blocks of 32 (k = 224), 3 super-blocks (k = 768).
    const int64_t k = kernels::quant::block_elements(t) == 256 ? 768 : 224;
    if (t == QuantType::Int8) {
      // Any k: 7 activation blocks and a tail of 5 that the kernel multiplies in f32, and a row
      // shorter than one block.
      for (int64_t m : kRows) v.push_back(quant_matmul_case(t, m, m % 2 ? 13 : 33, 229, "", 1.0));
      v.push_back(quant_matmul_case(t, 3, 33, 13, "short_row_", 1.0));
    }
    for (int64_t m : kRows) v.push_back(quant_matmul_case(t, m, m % 2 ? 13 : 33, k, "", 1.0));
    v.push_back(quant_matmul_case(t, 3, 33, k == 768 ? 256 : 32, "one_block_", 1.0));
    // Tiny and huge weights: the f16 scales go subnormal / near their top, the kernel's f32
    // scaling must keep up (the reference sees the same stored blocks).
    v.push_back(quant_matmul_case(t, 7, 13, k, "small_weights_", 1e-6));
    v.push_back(quant_matmul_case(t, 7, 13, k, "large_weights_", 500.0));
  }
  // F16 / BF16 weights are read in place by register tiles of up to 4 x 8 (avx512), 3 x 8 (avx2)
  // or 3 x 6 (baseline) outputs, widened in registers below 32 rows and into buffers from there:
  // every row count around those edges, each n = 7, 13, 33 and odd k (shorter than one vector, a
  // partial last vector, several vectors).
  const int64_t kHalfRows[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 17, 31, 32, 33, 47, 63, 64};
  const int64_t kHalfCols[] = {7, 13, 33};
  const int64_t kHalfK[] = {13, 229, 1031};
  for (QuantType t : {QuantType::F16, QuantType::BF16})
    for (size_t i = 0; i < std::size(kHalfRows); ++i)
      v.push_back(
          quant_matmul_case(t, kHalfRows[i], kHalfCols[i % 3], kHalfK[(i / 3) % 3], "rows_", 1.0));
}

}  // namespace tessel::testing
