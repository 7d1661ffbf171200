// SPDX-License-Identifier: Apache-2.0
// Dropout cases: p in {0, 0.1, 0.5, 1}, offsets that are not multiples of the Philox block (4),
// and sizes that split over threads at arbitrary positions. The mask must equal the one
// tessel::uniform_at defines (the reference draws it element by element). f32, f64, bf16, f16.
#include "case_helpers.h"

namespace tessel::testing {

namespace {

using case_helpers::dtype_str;

struct DropoutSpec {
  std::string variant;
  Shape shape;
  double p;
  uint64_t seed, offset;
};

OpCase dropout_case(const DropoutSpec& s, DType dtype) {
  OpCase c;
  c.name = "dropout/" + s.variant + "/" + case_helpers::shape_str(s.shape) + "/" + dtype_str(dtype);
  c.op = kernels::Op::Dropout;
  c.dtype = dtype;
  c.make_inputs = [s, dtype](Generator& gen) {
    return Tensors{random_tensor(gen, s.shape, dtype)};
  };
  c.make_outputs = [](const Tensors& in) {
    return Tensors{full(in[0].shape(), 7.0, in[0].dtype())};
  };
  c.run = [s](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.dropout(in[0], out[0], s.p, s.seed, s.offset);
  };
  // One rounding of x / (1 - p); a different mask would cost ~p.
  c.max_nmse = case_helpers::tolerance(dtype, 1e-13, 1e-30);
  double n = double(s.shape.numel());
  c.flops = n;
  c.bytes = case_helpers::element_bytes(dtype, 2 * n);
  return c;
}

}  // namespace

void add_dropout_cases(std::vector<OpCase>& v) {
  const DropoutSpec kSpecs[] = {
      {"p0", {7, 13}, 0.0, 1, 0},
      {"p0.1", {7, 13}, 0.1, 2, 0},
      {"p0.5", {257}, 0.5, 3, 5},
      {"p0.5_offset", {13, 33}, 0.5, 0xDEADBEEFCAFEull, 1ull << 40 | 3},
      {"p1", {7, 13}, 1.0, 4, 0},
      {"p0.1_one", {1}, 0.1, 5, 7},
      {"p0.1_threads", {33, 1025}, 0.1, 6, 2},
      {"p0.5_threads", {1024, 769}, 0.5, 7, 11},
  };
  for (DType dt : case_helpers::kCaseDTypes)
    for (const DropoutSpec& s : kSpecs) v.push_back(dropout_case(s, dt));
}

}  // namespace tessel::testing
