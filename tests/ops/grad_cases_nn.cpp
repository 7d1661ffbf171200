// SPDX-License-Identifier: Apache-2.0
// Finite-difference cases for the network ops: linear, matmul, grouped linear, softmax, norms,
// embedding, attention (causal, GQA, padding mask, sliding window), rotary embeddings, losses and
// dropout.
#include <cmath>

#include "gradcheck.h"
#include "tessel/ops/ops.h"

namespace tessel::testing {

namespace {

using Inputs = std::vector<Tensor>;

Tensor rn(const Shape& s, Generator& g) {
  return randn(s, DType::F64, &g);
}

GradCase attention_case(std::string name, int64_t b, int64_t tq, int64_t tk, int64_t h, int64_t hkv,
                        int64_t d, bool causal, bool masked, int64_t window = 0) {
  return {name,
          [=](Generator& g) {
            Inputs in{param(rn({b, tq, h, d}, g)), param(rn({b, tk, hkv, d}, g)),
                      param(rn({b, tk, hkv, d}, g))};
            if (masked) {
              Tensor mask = ones({b, tk}, DType::I8);
              // Hide the first key of batch 0 and the last of every other batch.
              mask.data<int8_t>()[0] = 0;
              for (int64_t i = 1; i < b; ++i) mask.data<int8_t>()[i * tk + tk - 1] = 0;
              in.push_back(mask);
            }
            return in;
          },
          [=](const Inputs& in) {
            return ops::attention(in[0], in[1], in[2], causal, masked ? in[3] : Tensor(), 0.0,
                                  window);
          }};
}

// cos / sin [P, D/2] of p * 10000^(-2i/D) (f64), and positions [B, T] drawn from [0, P).
GradCase rope_case(std::string name, int64_t b, int64_t t, int64_t h, int64_t d, int64_t p) {
  return {name,
          [=](Generator& g) {
            Tensor c = empty({p, d / 2}, DType::F64), s = empty({p, d / 2}, DType::F64);
            for (int64_t r = 0; r < p; ++r)
              for (int64_t i = 0; i < d / 2; ++i) {
                double angle = double(r) * std::pow(10000.0, -2.0 * double(i) / double(d));
                c.data<double>()[r * (d / 2) + i] = std::cos(angle);
                s.data<double>()[r * (d / 2) + i] = std::sin(angle);
              }
            return Inputs{param(rn({b, t, h, d}, g)), c, s, ids({b, t}, p, g)};
          },
          [](const Inputs& in) { return ops::rope(in[0], in[1], in[2], in[3]); }};
}

}  // namespace

void add_nn_grad_cases(std::vector<GradCase>& v) {
  v.push_back({"linear_bias_2x7x13_to_5",
               [](Generator& g) {
                 return Inputs{param(rn({2, 7, 13}, g)), param(rn({5, 13}, g)), param(rn({5}, g))};
               },
               [](const Inputs& in) { return ops::linear(in[0], in[1], in[2]); }});
  v.push_back({"linear_nobias_1x33_to_7",
               [](Generator& g) {
                 return Inputs{param(rn({1, 33}, g)), param(rn({7, 33}, g))};
               },
               [](const Inputs& in) { return ops::linear(in[0], in[1]); }});
  v.push_back({"linear_weight_only_7x13_to_1",
               [](Generator& g) {
                 return Inputs{rn({7, 13}, g), param(rn({1, 13}, g))};
               },
               [](const Inputs& in) { return ops::linear(in[0], in[1]); }});
  v.push_back({"matmul_2d_7x13x5",
               [](Generator& g) {
                 return Inputs{param(rn({7, 13}, g)), param(rn({13, 5}, g))};
               },
               [](const Inputs& in) { return ops::matmul(in[0], in[1]); }});
  v.push_back({"matmul_batched_3x7x13x5",
               [](Generator& g) {
                 return Inputs{param(rn({3, 7, 13}, g)), param(rn({3, 13, 5}, g))};
               },
               [](const Inputs& in) { return ops::matmul(in[0], in[1]); }});
  v.push_back({"matmul_shared_rhs_2x3x7x13x5",
               [](Generator& g) {
                 return Inputs{param(rn({2, 3, 7, 13}, g)), param(rn({13, 5}, g))};
               },
               [](const Inputs& in) { return ops::matmul(in[0], in[1]); }});

  for (auto [name, shape] : {std::pair{"7x33", Shape{7, 33}}, std::pair{"1x13", Shape{1, 13}},
                             std::pair{"3x7x1", Shape{3, 7, 1}}}) {
    std::string n(name);
    Shape s = shape;
    v.push_back({"softmax_" + n, [s](Generator& g) { return Inputs{param(rn(s, g))}; },
                 [](const Inputs& in) { return ops::softmax(in[0]); }});
    v.push_back({"log_softmax_" + n, [s](Generator& g) { return Inputs{param(rn(s, g))}; },
                 [](const Inputs& in) { return ops::log_softmax(in[0]); }});
  }

  v.push_back({"layer_norm_affine_7x33",
               [](Generator& g) {
                 return Inputs{param(rn({7, 33}, g)), param(uniform({33}, 0.5, 1.5, g)),
                               param(rn({33}, g))};
               },
               [](const Inputs& in) { return ops::layer_norm(in[0], in[1], in[2]); }});
  v.push_back({"layer_norm_plain_3x7x13",
               [](Generator& g) {
                 return Inputs{param(rn({3, 7, 13}, g))};
               },
               [](const Inputs& in) { return ops::layer_norm(in[0], Tensor(), Tensor()); }});
  v.push_back({"layer_norm_weight_only_13x7",
               [](Generator& g) {
                 return Inputs{param(rn({13, 7}, g)), param(uniform({7}, 0.5, 1.5, g))};
               },
               [](const Inputs& in) { return ops::layer_norm(in[0], in[1], Tensor(), 1e-3); }});
  v.push_back({"rms_norm_7x33",
               [](Generator& g) {
                 return Inputs{param(rn({7, 33}, g)), param(uniform({33}, 0.5, 1.5, g))};
               },
               [](const Inputs& in) { return ops::rms_norm(in[0], in[1]); }});
  v.push_back({"rms_norm_2x1x13",
               [](Generator& g) {
                 return Inputs{param(rn({2, 1, 13}, g)), param(uniform({13}, 0.5, 1.5, g))};
               },
               [](const Inputs& in) { return ops::rms_norm(in[0], in[1], 1e-5); }});

  for (DType id_type : {DType::I32, DType::I64}) {
    v.push_back({std::string("embedding_repeats_") + (id_type == DType::I32 ? "i32" : "i64"),
                 [id_type](Generator& g) {
                   // 33 lookups into 7 rows: every row is hit several times.
                   return Inputs{param(rn({7, 13}, g)), ids({3, 11}, 7, g, id_type)};
                 },
                 [](const Inputs& in) { return ops::embedding(in[0], in[1]); }});
  }

  // Experts of 7 outputs over 13 inputs; the middle expert received no row (zero gradient).
  v.push_back({"grouped_linear_rows_7_0_13",
               [](Generator& g) {
                 return Inputs{param(rn({20, 13}, g)), param(rn({3, 7, 13}, g)),
                               from_data<int64_t>({0, 7, 7, 20}, {4})};
               },
               [](const Inputs& in) { return ops::grouped_linear(in[0], in[1], in[2]); }});
  v.push_back({"grouped_linear_one_group_of_33",
               [](Generator& g) {
                 return Inputs{param(rn({33, 7}, g)), param(rn({2, 13, 7}, g)),
                               from_data<int64_t>({0, 0, 33}, {3})};
               },
               [](const Inputs& in) { return ops::grouped_linear(in[0], in[1], in[2]); }});

  v.push_back(attention_case("attention_causal_b2_t7_h2_d5", 2, 7, 7, 2, 2, 5, true, false));
  v.push_back(attention_case("attention_full_b1_t13_h1_d7", 1, 13, 13, 1, 1, 7, false, false));
  v.push_back(attention_case("attention_gqa_b2_t7_h4_kv2_d3", 2, 7, 7, 4, 2, 3, true, false));
  v.push_back(
      attention_case("attention_mqa_decode_b1_q3_k7_h3_kv1", 1, 3, 7, 3, 1, 5, true, false));
  v.push_back(attention_case("attention_masked_b2_t7_h2_d5", 2, 7, 7, 2, 1, 5, false, true));
  // Sliding windows (Mistral): shorter than T over GQA, with padding, and in a decode step.
  v.push_back(
      attention_case("attention_window3_gqa_b2_t9_h4_kv2_d3", 2, 9, 9, 4, 2, 3, true, false, 3));
  v.push_back(
      attention_case("attention_window2_masked_b2_t7_h2_d5", 2, 7, 7, 2, 1, 5, true, true, 2));
  v.push_back(
      attention_case("attention_window4_decode_b1_q3_k9_h3_kv1", 1, 3, 9, 3, 1, 5, true, false, 4));

  v.push_back(rope_case("rope_b3_t5_h7_d6_p11", 3, 5, 7, 6, 11));
  v.push_back(rope_case("rope_b2_t3_h2_d2_p4", 2, 3, 2, 2, 4));
  v.push_back(rope_case("rope_b1_t4_h3_d34_p9", 1, 4, 3, 34, 9));

  for (auto [name, reduction] :
       {std::pair{"mean", ops::Reduction::Mean}, std::pair{"sum", ops::Reduction::Sum},
        std::pair{"none", ops::Reduction::None}}) {
    ops::Reduction red = reduction;
    v.push_back({std::string("cross_entropy_") + name + "_13x33",
                 [](Generator& g) {
                   Tensor t = ids({13}, 33, g);
                   t.data<int64_t>()[3] = -100;  // ignored rows
                   t.data<int64_t>()[7] = -100;
                   return Inputs{param(rn({13, 33}, g)), t};
                 },
                 [red](const Inputs& in) { return ops::cross_entropy(in[0], in[1], -100, red); }});
    v.push_back({std::string("mse_loss_") + name + "_7x13",
                 [](Generator& g) {
                   return Inputs{param(rn({7, 13}, g)), param(rn({7, 13}, g))};
                 },
                 [red](const Inputs& in) { return ops::mse_loss(in[0], in[1], red); }});
  }
  v.push_back({"cross_entropy_i32_ignore_7_1x7",
               [](Generator& g) {
                 return Inputs{param(rn({1, 7}, g)), ids({1}, 7, g, DType::I32)};
               },
               [](const Inputs& in) { return ops::cross_entropy(in[0], in[1], 6); }});

  // A fresh generator per call: every evaluation must draw the same mask.
  v.push_back({"dropout_p0_3_7x33",
               [](Generator& g) {
                 return Inputs{param(rn({7, 33}, g))};
               },
               [](const Inputs& in) {
                 Generator gen(1234);
                 return ops::dropout(in[0], 0.3, true, &gen);
               }});
}

}  // namespace tessel::testing
