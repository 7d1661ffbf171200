// SPDX-License-Identifier: Apache-2.0
// Cross-entropy cases, forward and backward: i32 and i64 targets with ignore_index rows (the
// usual -100, and an in-vocabulary ignore_index), a vocabulary of one, a single row, logits of
// large magnitude (spread +-50 and beyond), and a GPT-2-sized vocabulary. f32, f64, bf16, f16.
#include "case_helpers.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::testing {

namespace {

using case_helpers::dtype_str;

struct CrossEntropySpec {
  std::string variant;
  int64_t rows, vocab;
  double scale = 1;
  int64_t ignore_index = -100;
  int ignore_every = 3;  // every n-th row's target is ignore_index (0: none)
  DType target_dtype = DType::I64;
};

std::string name(const char* family, const CrossEntropySpec& s, DType dtype) {
  return std::string(family) + "/" + s.variant + "_" + std::string(dtype_name(s.target_dtype)) +
         "/" + std::to_string(s.rows) + "x" + std::to_string(s.vocab) + "/" + dtype_str(dtype);
}

Tensor targets(Generator& gen, const CrossEntropySpec& s) {
  Tensor t = random_ids(gen, {s.rows}, s.vocab, DType::I64);
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; s.ignore_every > 0 && i < s.rows; i += s.ignore_every) p[i] = s.ignore_index;
  return t.to(s.target_dtype);
}

OpCase cross_entropy_case(const CrossEntropySpec& s, DType dtype) {
  OpCase c;
  c.name = name("cross_entropy", s, dtype);
  c.op = kernels::Op::CrossEntropy;
  c.dtype = dtype;
  c.make_inputs = [s, dtype](Generator& gen) {
    return Tensors{random_tensor(gen, {s.rows, s.vocab}, dtype, s.scale), targets(gen, s)};
  };
  c.make_outputs = [s](const Tensors& in) {
    DType st = kernels::stat_dtype(in[0].dtype());
    return Tensors{full({s.rows}, 7.0, st), full({s.rows}, 7.0, st)};
  };
  int64_t ignore = s.ignore_index;
  c.run = [ignore](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.cross_entropy(in[0], in[1], ignore, out[0], out[1]);
  };
  c.max_nmse = case_helpers::tolerance(dtype, 1e-13, 1e-30);
  double n = double(s.rows * s.vocab);
  c.flops = 4 * n;
  c.bytes = case_helpers::element_bytes(dtype, n + 2 * double(s.rows)) +
            double(s.rows) * double(dtype_size(s.target_dtype));
  return c;
}

OpCase cross_entropy_backward_case(const CrossEntropySpec& s, DType dtype) {
  OpCase c;
  c.name = name("cross_entropy_backward", s, dtype);
  c.op = kernels::Op::CrossEntropyBackward;
  c.dtype = dtype;
  c.make_inputs = [s, dtype](Generator& gen) {
    Tensor logits = random_tensor(gen, {s.rows, s.vocab}, dtype, s.scale);
    Tensor t = targets(gen, s);
    Tensor losses = empty({s.rows}, DType::F64), lse = empty({s.rows}, DType::F64);
    kernels::reference_backend().cross_entropy(logits.to(DType::F64), t, s.ignore_index, losses,
                                               lse);
    DType st = kernels::stat_dtype(dtype);
    return Tensors{logits, t, lse.to(st), random_tensor(gen, {s.rows}, st)};
  };
  c.make_outputs = [](const Tensors& in) {
    return Tensors{full(in[0].shape(), 7.0, in[0].dtype())};
  };
  int64_t ignore = s.ignore_index;
  c.run = [ignore](kernels::Backend& be, const Tensors& in, Tensors& out) {
    be.cross_entropy_backward(in[0], in[1], in[2], in[3], ignore, out[0]);
  };
  c.max_nmse = case_helpers::tolerance(dtype, 1e-13, 1e-30);
  double n = double(s.rows * s.vocab);
  c.flops = 3 * n;
  c.bytes = case_helpers::element_bytes(dtype, 2 * n + 2 * double(s.rows)) +
            double(s.rows) * double(dtype_size(s.target_dtype));
  return c;
}

}  // namespace

void add_cross_entropy_cases(std::vector<OpCase>& v) {
  const CrossEntropySpec kSpecs[] = {
      {"basic", 7, 13},
      {"basic", 7, 13, 1, -100, 3, DType::I32},
      {"no_ignore", 13, 33, 2, -100, 0},
      {"ignore_in_vocab", 13, 7, 1, 2, 0},  // ignore_index 2 is a real class: those rows drop
      {"vocab_1", 33, 1, 1, -100, 4},
      {"single_row", 1, 257, 1, -100, 0},
      {"large", 13, 257, 50},
      {"huge", 7, 33, 300, -1, 2, DType::I32},
      {"gpt2", 33, 50257, 3, -100, 5},
  };
  for (DType dt : case_helpers::kCaseDTypes)
    for (const CrossEntropySpec& s : kSpecs) {
      v.push_back(cross_entropy_case(s, dt));
      v.push_back(cross_entropy_backward_case(s, dt));
    }
}

}  // namespace tessel::testing
