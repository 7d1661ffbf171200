// SPDX-License-Identifier: Apache-2.0
// Gradients of redistribute for every pair of R, P, S(0), S(1) on 2, 3 and 4 ranks. With the
// replicated-loss convention the global function is the identity Y = X and the loss is sum(W * Y)
// for a random W: each rank weights its local output by W (R and P outputs) or by its piece of W
// (S outputs), and the gradient of the input must be W, or its piece of W for a sharded input.
#include <gtest/gtest.h>

#include "sharding_test_util.h"
#include "tessel/autograd/engine.h"
#include "tessel/ops/elementwise.h"
#include "tessel/ops/reduce.h"
#include "tessel/sharding/redistribute.h"

namespace tessel::sharding {
namespace {

using test::Checks;

Tensor piece_of(const Tensor& full, Placement p, const dist::Communicator& c) {
  if (!p.is_shard()) return full;
  const int64_t n = full.size(p.dim);
  const int64_t off = shard_offset(n, c.size(), c.rank());
  return full.slice(p.dim, off, off + shard_size(n, c.size(), c.rank()));
}

class RedistributeGrad : public ::testing::TestWithParam<int> {};

TEST_P(RedistributeGrad, EveryPairIsTheIdentityOfTheGlobalTensor) {
  const int k = GetParam();
  Checks checks;
  test::run_world(k, [&](dist::CommPtr world) {
    const int me = world->rank();
    for (const Shape& shape : {Shape{7, 13}, Shape{13, 33}}) {
      const std::vector<Placement> all{Placement::replicate(), Placement::partial(),
                                       Placement::shard(0), Placement::shard(1)};
      for (Placement from : all) {
        for (Placement to : all) {
          std::ostringstream name;
          name << "k=" << k << " rank " << me << " " << shape << " " << from.str() << " -> "
               << to.str();
          Tensor x = from.is_partial() ? test::random(shape, 100 + uint64_t(me))
                                       : piece_of(test::random(shape, 7), from, *world);
          x.set_requires_grad(true);
          Tensor y = redistribute_local(x, *world, from, to, shape);
          const Tensor w = test::random(shape, 11);
          autograd::backward(ops::sum(ops::mul(y, piece_of(w, to, *world))));
          Tensor want = piece_of(w, from, *world);
          checks.expect(x.grad().defined(), name.str() + ": no gradient");
          // Gradients are only moved (R and S placements: copies, slices, gathers, all_to_all) and
          // d sum(y * w) / dy = w * 1: exact on every vector width; 1e-6 is only a margin, far
          // below a wrong piece (O(1)).
          if (x.grad().defined()) checks.expect_close(x.grad(), want, 1e-6, name.str());
        }
      }
    }
  });
  checks.verify();
}

INSTANTIATE_TEST_SUITE_P(Ranks, RedistributeGrad, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace tessel::sharding
