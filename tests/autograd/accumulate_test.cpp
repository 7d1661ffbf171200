// SPDX-License-Identifier: Apache-2.0
// Gradient accumulation fast paths of the engine: a tied weight (an embedding that is also the
// output projection, as in GPT-2) gets the same gradient as two untied copies whose gradients are
// added, in either order of use; buffers that others can see are never added into in place.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessel/autograd/autograd.h"
#include "tessel/ops/ops.h"

namespace tessel::autograd {
namespace {

Tensor weight(int64_t rows, int64_t cols, uint64_t seed) {
  Generator g(seed);
  Tensor w = randn({rows, cols}, DType::F64, &g);
  w.set_requires_grad(true);
  return w;
}

// loss = sum(c * linear(embedding(w_in, ids), w_out)) with fixed coefficients c, so every
// gradient entry is distinct; `embedding_first` swaps the order in which the two uses are made.
Tensor tied_loss(const Tensor& w_in, const Tensor& w_out, const Tensor& ids, const Tensor& c,
                 bool embedding_first) {
  if (embedding_first) return ops::sum(ops::mul(ops::linear(ops::embedding(w_in, ids), w_out), c));
  // The projection of a fixed input is made first, then the embedding of its result's ids.
  Tensor x = from_data(std::vector<double>(size_t(ids.numel() * w_out.size(1)), 0.25),
                       {ids.numel(), w_out.size(1)});
  Tensor head = ops::linear(x, w_out);  // [N, V]
  Tensor emb = ops::embedding(w_in, ids);
  return ops::add(ops::sum(ops::mul(head, c)), ops::sum(ops::mul(emb, emb)));
}

void expect_tied_equals_untied(bool embedding_first) {
  const int64_t vocab = 13, dim = 7;
  // Repeated ids: the scatter adds several rows into the same gradient row.
  Tensor ids = from_data(std::vector<int64_t>{3, 11, 3, 0, 12, 3, 5}, {7});
  Generator gc(7);
  Tensor c = randn({7, vocab}, DType::F64, &gc);

  Tensor tied = weight(vocab, dim, 1);
  backward(tied_loss(tied, tied, ids, c, embedding_first));

  Tensor a = weight(vocab, dim, 1), b = weight(vocab, dim, 1);
  backward(tied_loss(a, b, ids, c, embedding_first));
  std::vector<double> got = tied.grad().to_vector<double>();
  std::vector<double> ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  ASSERT_EQ(got.size(), ga.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ga[i] + gb[i], 1e-12) << i;
}

TEST(Accumulate, TiedEmbeddingUsedLast) {
  expect_tied_equals_untied(/*embedding_first=*/true);
}

TEST(Accumulate, TiedEmbeddingUsedFirst) {
  expect_tied_equals_untied(/*embedding_first=*/false);
}

TEST(Accumulate, GivenOutputGradientIsNotWrittenInPlace) {
  // y = x + x: add's backward hands the same gradient to both edges; summing them must not write
  // into the caller's gradient tensor.
  Tensor x = from_data(std::vector<double>{1, 2, 3}, {3});
  x.set_requires_grad(true);
  Tensor y = ops::add(ops::mul(x, 1.0), ops::mul(x, 1.0));
  Tensor g = from_data(std::vector<double>{1, 10, 100}, {3});
  backward(std::vector<Tensor>{y}, std::vector<Tensor>{g});
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{1, 10, 100}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 20, 200}));
}

}  // namespace
}  // namespace tessel::autograd
