// SPDX-License-Identifier: Apache-2.0
// Embedding cases: gather with i32 and i64 ids, multi-dim id tensors, a 1 x 1 table, and the
// scatter-add backward with many repeated ids accumulating onto a non-zero dweight. f32, f64, bf16,
// f16.
#include "case_helpers.h"

namespace tessel::testing {

namespace {

using case_helpers::dtype_str;

struct EmbeddingSpec {
  std::string variant;
  int64_t vocab, cols;
  Shape ids;
  DType id_dtype = DType::I64;
};

std::string name(const char* family, const EmbeddingSpec& s, DType dtype) {
  return std::string(family) + "/" + s.variant + "_" + std::string(dtype_name(s.id_dtype)) + "/" +
         case_helpers::shape_str(s.ids) + "x" + std::to_string(s.cols) + "_v" +
         std::to_string(s.vocab) + "/" + dtype_str(dtype);
}

Shape rows_shape(const EmbeddingSpec& s) {
  Shape out = s.ids;
  out.push_back(s.cols);
  return out;
}

OpCase embedding_case(const EmbeddingSpec& s, DType dtype) {
  OpCase c;
  c.name = name("embedding", s, dtype);
  c.op = kernels::Op::Embedding;
  c.dtype = dtype;
  c.make_inputs = [s, dtype](Generator& gen) {
    return Tensors{random_tensor(gen, {s.vocab, s.cols}, dtype),
                   random_ids(gen, s.ids, s.vocab, s.id_dtype)};
  };
  Shape out_shape = rows_shape(s);
  c.make_outputs = [out_shape](const Tensors& in) {
    return Tensors{zeros(out_shape, in[0].dtype())};
  };
  c.run = [](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.embedding(in[0], in[1], out[0]);
  };
  c.max_nmse = 0;  // a copy
  double n = double(out_shape.numel());
  c.bytes = case_helpers::element_bytes(dtype, 2 * n) +
            double(s.ids.numel()) * double(dtype_size(s.id_dtype));
  return c;
}

OpCase embedding_backward_case(const EmbeddingSpec& s, DType dtype) {
  OpCase c;
  c.name = name("embedding_backward", s, dtype);
  c.op = kernels::Op::EmbeddingBackward;
  c.dtype = dtype;
  Shape out_shape = rows_shape(s);
  c.make_inputs = [s, out_shape, dtype](Generator& gen) {
    // The initial dweight is an input too, so that accumulation (not overwrite) is checked.
    return Tensors{random_tensor(gen, out_shape, dtype),
                   random_ids(gen, s.ids, s.vocab, s.id_dtype),
                   random_tensor(gen, {s.vocab, s.cols}, dtype)};
  };
  c.make_outputs = [](const Tensors& in) { return Tensors{in[2].clone()}; };
  c.run = [](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.embedding_backward(in[0], in[1], out[0]);
  };
  // f32 adds in f32, in the same id order as the reference.
  c.max_nmse = case_helpers::tolerance(dtype, 1e-13, 0);
  double n = double(out_shape.numel());
  c.flops = n;
  c.bytes = case_helpers::element_bytes(dtype, 3 * n) +
            double(s.ids.numel()) * double(dtype_size(s.id_dtype));
  return c;
}

}  // namespace

void add_embedding_cases(std::vector<OpCase>& v) {
  const EmbeddingSpec kSpecs[] = {
      {"basic", 33, 13, {7}},
      {"basic", 33, 13, {7}, DType::I32},
      {"multi_dim", 13, 7, {2, 5}, DType::I32},
      {"one", 1, 1, {1}},
      {"repeats", 13, 33, {257}},  // 257 ids over 13 rows: every row repeats
      {"repeats", 7, 1, {33}, DType::I32},
      {"gpt2", 1024, 768, {4, 257}},
  };
  for (DType dt : case_helpers::kCaseDTypes)
    for (const EmbeddingSpec& s : kSpecs) {
      v.push_back(embedding_case(s, dt));
      v.push_back(embedding_backward_case(s, dt));
    }
}

}  // namespace tessel::testing
