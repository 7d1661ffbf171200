// SPDX-License-Identifier: Apache-2.0
// Megatron's four region functions on thread worlds of 2, 3 and 4 ranks: forward values and the
// gradients of loss = sum over ranks of sum(w_r * out_r) (random w_r; one w where the output is
// replicated and the loss is counted once) against the same function computed in one process in
// double precision.
#include "tessel/sharding/regions.h"

#include <gtest/gtest.h>

#include "common/tolerance.h"
#include "sharding_test_util.h"
#include "tessel/autograd/engine.h"
#include "tessel/ops/elementwise.h"
#include "tessel/ops/reduce.h"
#include "tessel/sharding/placement.h"

namespace tessel::sharding {
namespace {

using test::Checks;

struct Case {
  Shape shape;
  int dim;
};

const Case kCases[] = {{{7, 13}, 0}, {{7, 13}, 1}, {{13, 33}, 1}, {{33}, 0}};
// For results that are copies of their inputs (an identity backward, an all_gather): exact on
// every vector width (no arithmetic but * 1); 1e-6 is only a margin, an O(1) miss for a wrong
// piece.
constexpr double kTol = 1e-6;

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

// Sum over r of random(shape, seed + r), in double.
std::vector<double> sum_of(const Shape& s, uint64_t seed, int k) {
  std::vector<double> sum(size_t(s.numel()), 0.0);
  for (int r = 0; r < k; ++r) {
    std::vector<double> v = values(test::random(s, seed + uint64_t(r)));
    for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
  }
  return sum;
}

// The bound for the f32 sum over k ranks of random(s, seed + r) against sum_of's f64 sum, element
// by element: reference_tolerance (tests/common/tolerance.h) for k terms times the largest
// Σ_r |x_r|, at most 5.7e-6 for k = 4 (was 1e-6, which the worst case (k - 1)·u·Σ|x_r| of 2e-6 can
// exceed). A rank's addend missing or counted twice is off by |x_r|, O(1).
double sum_tol(const Shape& s, uint64_t seed, int k) {
  std::vector<double> mag(size_t(s.numel()), 0.0);
  for (int r = 0; r < k; ++r) {
    std::vector<double> v = values(test::random(s, seed + uint64_t(r)));
    for (size_t i = 0; i < v.size(); ++i) mag[i] += std::abs(v[i]);
  }
  return tessel::test::reference_tolerance(DType::F32, k) * tessel::test::max_abs_of(mag);
}

// Piece r of a row-major tensor of shape s along dim d, as values.
Tensor piece(const Tensor& full, int d, int k, int r) {
  const int64_t n = full.size(d);
  return full.slice(d, shard_offset(n, k, r), shard_offset(n, k, r) + shard_size(n, k, r));
}

Tensor leaf(Tensor t) {
  t.set_requires_grad(true);
  return t;
}

void backward_of(const Tensor& out, const Tensor& w) {
  autograd::backward(ops::sum(ops::mul(out, w)));
}

std::string label(int k, int rank, const Case& c, const char* fn) {
  std::ostringstream s;
  s << fn << " k=" << k << " rank " << rank << " " << c.shape << " dim " << c.dim;
  return s.str();
}

class Regions : public ::testing::TestWithParam<int> {};

TEST_P(Regions, CopyToRegionBackwardAllReduces) {
  const int k = GetParam();
  Checks checks;
  test::run_world(k, [&](dist::CommPtr world) {
    const int me = world->rank();
    for (const Case& c : kCases) {
      const std::string what = label(k, me, c, "copy_to_region");
      Tensor x = leaf(test::random(c.shape, 1));  // replicated: the same on every rank
      Tensor y = copy_to_region(x, *world);
      checks.expect_close(y, values(x), c.shape, 0.0, what + " forward");
      backward_of(y, test::random(c.shape, 10 + uint64_t(me)));  // rank-specific downstream
      // d/dx of sum_r sum(w_r * x) = sum_r w_r.
      checks.expect_close(x.grad(), sum_of(c.shape, 10, k), c.shape, sum_tol(c.shape, 10, k),
                          what + " grad");
    }
  });
  checks.verify();
}

TEST_P(Regions, ReduceFromRegionBackwardIsIdentity) {
  const int k = GetParam();
  Checks checks;
  test::run_world(k, [&](dist::CommPtr world) {
    const int me = world->rank();
    for (const Case& c : kCases) {
      const std::string what = label(k, me, c, "reduce_from_region");
      Tensor x = leaf(test::random(c.shape, 20 + uint64_t(me)));  // partial addends
      Tensor y = reduce_from_region(x, *world);
      checks.expect_close(y, sum_of(c.shape, 20, k), c.shape, sum_tol(c.shape, 20, k),
                          what + " forward");
      Tensor w = test::random(c.shape, 30);  // replicated output: one loss, the same w
      backward_of(y, w);
      // d/dx_r of sum(w * sum_r x_r) = w.
      checks.expect_close(x.grad(), values(w), c.shape, kTol, what + " grad");
    }
  });
  checks.verify();
}

TEST_P(Regions, GatherFromRegionBackwardReduceScatters) {
  const int k = GetParam();
  Checks checks;
  test::run_world(k, [&](dist::CommPtr world) {
    const int me = world->rank();
    for (const Case& c : kCases) {
      const std::string what = label(k, me, c, "gather_from_region");
      Tensor global = test::random(c.shape, 40);
      Tensor x = leaf(piece(global, c.dim, k, me));
      Tensor y = gather_from_region(x, *world, c.dim, c.shape[c.dim]);
      checks.expect_close(y, global, 0.0, what + " forward");
      backward_of(y, test::random(c.shape, 50 + uint64_t(me)));
      // d/dx_r of sum_r' sum(w_r' * gather(x)) = (sum_r' w_r') restricted to piece r.
      Tensor want = piece(from_data(sum_of(c.shape, 50, k), c.shape), c.dim, k, me);  // f64
      checks.expect_close(x.grad(), values(want), want.shape(), sum_tol(c.shape, 50, k),
                          what + " grad");
    }
  });
  checks.verify();
}

TEST_P(Regions, ReduceScatterToRegionBackwardGathers) {
  const int k = GetParam();
  Checks checks;
  test::run_world(k, [&](dist::CommPtr world) {
    const int me = world->rank();
    for (const Case& c : kCases) {
      const std::string what = label(k, me, c, "reduce_scatter_to_region");
      Tensor x = leaf(test::random(c.shape, 60 + uint64_t(me)));  // partial addends
      Tensor y = reduce_scatter_to_region(x, *world, c.dim);
      Tensor want_y = piece(from_data(sum_of(c.shape, 60, k), c.shape), c.dim, k, me);  // f64
      checks.expect_close(y, values(want_y), want_y.shape(), sum_tol(c.shape, 60, k),
                          what + " forward");
      // Rank r's downstream weights its own piece: w_r of piece r's shape.
      std::vector<Tensor> ws;
      for (int r = 0; r < k; ++r)
        ws.push_back(
            test::random(c.shape.with(c.dim, shard_size(c.shape[c.dim], k, r)), 70 + uint64_t(r)));
      backward_of(y, ws[size_t(me)]);
      // d/dx_r of sum_r' sum(w_r' * (sum x)[piece r']) = concat_r' w_r'.
      Tensor want = concat(std::span<const Tensor>(ws), c.dim);
      checks.expect_close(x.grad(), want, kTol, what + " grad");
    }
  });
  checks.verify();
}

INSTANTIATE_TEST_SUITE_P(Ranks, Regions, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace tessel::sharding
