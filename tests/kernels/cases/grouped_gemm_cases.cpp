// SPDX-License-Identifier: Apache-2.0
// Grouped GEMM cases (the expert products of a mixture-of-experts layer): the rows form with each
// group's weight stored [K, N] and [N, K] (nn.Linear's layout), and the weight-gradient form, over
// uneven groups with empty ones (first, middle and last), a single group, and every row in one
// group of many. f32, f64, bf16, f16.
#include <numeric>

#include "case_helpers.h"

namespace tessel::testing {

namespace {

struct GroupedSpec {
  std::string variant;
  std::vector<int64_t> group_rows;
  int64_t k, n;  // rows form: a [M, k] times [k, n]; weight form: a [M, k], b [M, n]
};

Tensor offsets_of(const std::vector<int64_t>& rows) {
  std::vector<int64_t> off(rows.size() + 1, 0);
  std::partial_sum(rows.begin(), rows.end(), off.begin() + 1);
  return from_data(off, {int64_t(off.size())});
}

OpCase grouped_case(const GroupedSpec& s, kernels::GroupedGemmDesc desc, DType dtype) {
  const int64_t groups = int64_t(s.group_rows.size());
  const int64_t m = std::accumulate(s.group_rows.begin(), s.group_rows.end(), int64_t(0));
  std::string form = desc.weight_grad ? "weight" : (desc.trans_b ? "rows_nt" : "rows_nn");
  OpCase c;
  c.name = "grouped_gemm/" + form + "_" + s.variant + "/" + shape_tag({groups, m, s.n, s.k}) + "/" +
           std::string(dtype_name(dtype));
  c.op = kernels::Op::GroupedGemm;
  c.dtype = dtype;
  Shape b_shape = desc.weight_grad ? Shape{m, s.n}
                  : desc.trans_b   ? Shape{groups, s.n, s.k}
                                   : Shape{groups, s.k, s.n};
  Shape c_shape = desc.weight_grad ? Shape{groups, s.k, s.n} : Shape{m, s.n};
  std::vector<int64_t> rows = s.group_rows;
  c.make_inputs = [=](Generator& gen) {
    return Tensors{random_tensor(gen, {m, s.k}, dtype), random_tensor(gen, b_shape, dtype),
                   offsets_of(rows)};
  };
  c.make_outputs = [c_shape](const Tensors& in) {
    // Garbage in C: every element must be written (an empty group's weight gradient included).
    Tensor out = empty(c_shape, in[0].dtype());
    out.fill(7.0);
    return Tensors{out};
  };
  c.run = [desc](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.grouped_gemm(desc, in[0], in[1], in[2], out[0]);
  };
  c.max_nmse = case_helpers::tolerance(dtype, 1e-10, 1e-24);
  c.flops = 2.0 * double(m) * double(s.k) * double(s.n);
  c.bytes = double(m * s.k + b_shape.numel() + c_shape.numel()) * dtype_size(dtype);
  return c;
}

}  // namespace

void add_grouped_gemm_cases(std::vector<OpCase>& v) {
  const GroupedSpec kSpecs[] = {
      {"uneven", {7, 0, 13, 1, 33}, 13, 7}, {"empty_ends", {0, 33, 7, 0}, 7, 33},
      {"one_group", {13}, 33, 13},          {"all_in_one", {0, 0, 33, 0, 0, 0, 0}, 13, 13},
      {"moe", {97, 31, 64, 65}, 64, 96},
  };
  for (DType dt : case_helpers::kCaseDTypes)
    for (const GroupedSpec& s : kSpecs) {
      v.push_back(grouped_case(s, {false, false}, dt));
      v.push_back(grouped_case(s, {true, false}, dt));
      v.push_back(grouped_case(s, {false, true}, dt));
    }
}

}  // namespace tessel::testing
