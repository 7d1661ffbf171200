// SPDX-License-Identifier: Apache-2.0
// Rotary position embedding cases: odd shapes (B 3, T 13, H 7, D 2 / 6 / 34), the q and k of
// grouped-query attention (H 6 and Hkv 2 on the same tables), a Llama-sized block (H 32, D 128),
// decode steps whose positions sit deep in a long table, i32 and i64 positions, the inverse
// rotation (the backward), and in place (out is x). The tables are real cos / sin tables
// (inv_freq = theta^(-2i/D)); positions are drawn at random, repeats included. f32, f64, bf16,
// f16.
#include <cmath>

#include "case_helpers.h"

namespace tessel::testing {

namespace {

struct RopeSpec {
  std::string variant;
  int64_t batch, tokens, heads, dim, table_rows;
  DType pos_dtype = DType::I64;
  bool inverse = false, in_place = false;
};

std::string name(const RopeSpec& s, DType dt) {
  return "rope/" + s.variant + (s.inverse ? "_inverse" : "") + (s.in_place ? "_inplace" : "") +
         "_" + std::string(dtype_name(s.pos_dtype)) + "/" +
         shape_tag({s.batch, s.tokens, s.heads, s.dim}) + "_p" + std::to_string(s.table_rows) +
         "/" + std::string(dtype_name(dt));
}

// cos / sin [P, D/2] of p * 10000^(-2i/D), in the table dtype.
Tensors tables(int64_t rows, int64_t dim, DType dtype) {
  const int64_t half = dim / 2;
  Tensor c = empty({rows, half}, DType::F64), s = empty({rows, half}, DType::F64);
  for (int64_t p = 0; p < rows; ++p)
    for (int64_t i = 0; i < half; ++i) {
      double angle = double(p) * std::pow(10000.0, -2.0 * double(i) / double(dim));
      c.data<double>()[p * half + i] = std::cos(angle);
      s.data<double>()[p * half + i] = std::sin(angle);
    }
  return {c.to(dtype), s.to(dtype)};
}

OpCase rope_case(const RopeSpec& s, DType dt) {
  OpCase c;
  c.name = name(s, dt);
  c.op = kernels::Op::Rope;
  c.dtype = dt;
  c.make_inputs = [s, dt](Generator& gen) {
    Tensors t = tables(s.table_rows, s.dim, kernels::stat_dtype(dt));
    return Tensors{random_tensor(gen, {s.batch, s.tokens, s.heads, s.dim}, dt), t[0], t[1],
                   random_ids(gen, {s.batch, s.tokens}, s.table_rows, s.pos_dtype)};
  };
  c.make_outputs = [s](const Tensors& in) {
    return Tensors{s.in_place ? in[0].clone() : zeros(in[0].shape(), in[0].dtype())};
  };
  c.run = [s](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.rope(s.in_place ? out[0] : in[0], in[1], in[2], in[3], s.inverse, out[0]);
  };
  // Each output is two products and a sum of O(1) values: a few f32 roundings (1e-14 in nmse).
  c.max_nmse = case_helpers::tolerance(dt, 1e-12, 1e-28);
  double n = double(s.batch * s.tokens * s.heads * s.dim);
  c.flops = 3 * n;
  c.bytes = case_helpers::element_bytes(dt, 2 * n);
  return c;
}

}  // namespace

void add_rope_cases(std::vector<OpCase>& v) {
  const RopeSpec kSpecs[] = {
      {"odd", 3, 13, 7, 6, 13},
      {"odd", 3, 13, 7, 34, 40, DType::I32},
      {"pairs", 3, 13, 7, 2, 17},
      {"odd", 3, 13, 7, 34, 40, DType::I32, true},
      {"odd", 3, 13, 7, 6, 13, DType::I64, false, true},
      {"odd", 3, 13, 7, 34, 40, DType::I64, true, true},
      {"gqa_q", 2, 13, 6, 16, 64},
      {"gqa_k", 2, 13, 2, 16, 64},
      {"decode", 3, 1, 8, 64, 4096},
      {"decode", 2, 1, 8, 64, 4096, DType::I32, true},
      {"llama", 2, 64, 32, 128, 512},
      {"llama", 2, 64, 32, 128, 512, DType::I64, true},
  };
  for (DType dt : case_helpers::kCaseDTypes)
    for (const RopeSpec& s : kSpecs) v.push_back(rope_case(s, dt));
}

}  // namespace tessel::testing
