// SPDX-License-Identifier: Apache-2.0
// redistribute along one axis, every pair of R, P, S(0), S(1), on thread worlds of 2, 3 and 4
// ranks and odd shapes: the result's pieces against slices of the expected global tensor, its
// gather back, and the predicted cost against what the flight recorder saw issued.
#include "tessel/sharding/redistribute.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <numeric>

#include "common/tolerance.h"
#include "sharding_test_util.h"
#include "tessel/core/error.h"

namespace tessel::sharding {
namespace {

using test::Checks;

std::vector<Placement> placements_for(const Shape& s) {
  std::vector<Placement> p{Placement::replicate(), Placement::partial()};
  for (int d = 0; d < s.ndim(); ++d) p.push_back(Placement::shard(d));
  return p;
}

// This rank's piece of `global` under `p` (P: any addends; checked through their sum instead).
Tensor expected_piece(const Tensor& global, Placement p, const dist::Communicator& c) {
  if (!p.is_shard()) return global;
  const int64_t n = global.size(p.dim);
  const int64_t off = shard_offset(n, c.size(), c.rank());
  return global.slice(p.dim, off, off + shard_size(n, c.size(), c.rank()));
}

// A Partial input whose addends differ on every rank: rank r holds random values (seed 100 + r);
// the global tensor is their sum, rounded to f32 once.
Tensor partial_global(const Shape& s, int k) {
  std::vector<double> sum(size_t(s.numel()), 0.0);
  for (int r = 0; r < k; ++r) {
    std::vector<double> v = test::random(s, 100 + uint64_t(r)).to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i) sum[i] += float(v[i]);
  }
  std::vector<float> f(sum.begin(), sum.end());
  return from_data(f, s);
}

// Partial -> anything sums the k addends in f32 against partial_global's f64 sum rounded once:
// reference_tolerance (tests/common/tolerance.h) for k terms times the largest Σ_r |x_r|, at most
// 5.7e-6 for k = 4 (was 1e-5). Every other pair only moves data: exact, 0.
double partial_tol(const Shape& s, int k) {
  std::vector<double> mag(size_t(s.numel()), 0.0);
  for (int r = 0; r < k; ++r) {
    std::vector<double> v = test::random(s, 100 + uint64_t(r)).to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i) mag[i] += std::abs(v[i]);
  }
  return tessel::test::reference_tolerance(DType::F32, k) * tessel::test::max_abs_of(mag);
}

// Bytes the busiest rank sends for the call every rank recorded (ring algorithms), from the
// recorded input sizes of all ranks; all_to_all also needs the block each rank keeps.
int64_t recorded_bytes(const std::string& kind, const std::vector<int64_t>& in_bytes,
                       const std::vector<int64_t>& kept_bytes, int64_t elt) {
  const int k = int(in_bytes.size());
  const int64_t total = std::accumulate(in_bytes.begin(), in_bytes.end(), int64_t(0));
  if (kind == "all_gather" || kind == "all_gather_v")
    return total - *std::min_element(in_bytes.begin(), in_bytes.end());
  if (kind == "reduce_scatter") return in_bytes[0] / k * (k - 1);
  if (kind == "all_reduce") return 2 * (in_bytes[0] - in_bytes[0] / elt / k * elt);
  int64_t worst = 0;  // all_to_all(_v)
  for (int r = 0; r < k; ++r) worst = std::max(worst, in_bytes[size_t(r)] - kept_bytes[size_t(r)]);
  return worst;
}

class RedistributeOneAxis : public ::testing::TestWithParam<int> {};

TEST_P(RedistributeOneAxis, EveryPairOnOddShapes) {
  const int k = GetParam();
  Checks checks;
  std::mutex mutex;
  std::vector<int64_t> in_bytes(static_cast<size_t>(k)), kept_bytes(static_cast<size_t>(k));
  std::vector<std::string> kinds(static_cast<size_t>(k));
  test::run_world(k, [&](dist::CommPtr world) {
    const int me = world->rank();
    for (const Shape& shape : {Shape{7, 13}, Shape{13, 33}, Shape{33}}) {
      for (Placement from : placements_for(shape)) {
        for (Placement to : placements_for(shape)) {
          std::ostringstream name;
          name << "k=" << k << " rank " << me << " " << shape << " " << from.str() << " -> "
               << to.str();
          const std::string what = name.str();
          Tensor global = from.is_partial() ? partial_global(shape, k) : test::random(shape, 7);
          DistTensor x = from.is_partial() ? DistTensor(test::random(shape, 100 + uint64_t(me)),
                                                        {world}, {from}, shape)
                                           : DistTensor::from_global(global, world, from);
          const uint64_t before = world->context().issued_count();
          const Tensor x_local = x.local();
          RedistributeCost cost;
          Tensor y_local = redistribute_local(x_local, *world, from, to, shape, &cost);
          const uint64_t issued = world->context().issued_count() - before;
          const double tol = from.is_partial() ? partial_tol(shape, k) : 0.0;
          // The predicted cost equals what was issued.
          checks.expect(
              issued == (cost.collective == "none" ? 0u : 1u),
              what + ": " + std::to_string(issued) + " calls issued for " + cost.collective);
          checks.expect(cost == redistribute_cost(from, to, shape, DType::F32, k),
                        what + ": cost differs from redistribute_cost()");
          {
            std::lock_guard lock(mutex);
            kinds[size_t(me)] = "none";
            if (issued == 1) {
              dist::Record r = world->context().recent(1).back();
              kinds[size_t(me)] = std::string(dist::op_kind_name(r.kind));
              in_bytes[size_t(me)] = r.shape.numel() * 4;
              // all_to_all keeps the block for this rank: its piece along `to` of its own piece.
              if (to.is_shard())
                kept_bytes[size_t(me)] = x_local.numel() / std::max<int64_t>(1, shape[to.dim]) *
                                         shard_size(shape[to.dim], k, me) * 4;
            }
          }
          world->barrier();
          checks.expect(
              kinds[size_t(me)] == cost.collective,
              what + ": recorded " + kinds[size_t(me)] + ", predicted " + cost.collective);
          if (cost.collective != "none") {
            int64_t seen = recorded_bytes(cost.collective, in_bytes, kept_bytes, 4);
            checks.expect(seen == cost.bytes, what + ": recorded calls move " +
                                                  std::to_string(seen) + " bytes, predicted " +
                                                  std::to_string(cost.bytes));
          } else {
            checks.expect(cost.bytes == 0, what + ": no call but " + std::to_string(cost.bytes));
          }
          world->barrier();
          // The values: this rank's piece, and the whole tensor gathered back.
          DistTensor y(y_local, {world}, {to}, shape);
          if (!to.is_partial())
            checks.expect_close(y_local, expected_piece(global, to, *world), tol, what + " piece");
          checks.expect_close(y.to_global(), global, tol, what + " gathered");
          checks.expect_close(x.to_global(), global, tol, what + " input unchanged");
        }
      }
    }
  });
  checks.verify();
}

INSTANTIATE_TEST_SUITE_P(Ranks, RedistributeOneAxis, ::testing::Values(2, 3, 4));

TEST(RedistributeCost, FormulasOnOddShapes) {
  const Shape s{7, 13};  // 91 f32 = 364 bytes
  const auto R = Placement::replicate(), P = Placement::partial();
  const auto S0 = Placement::shard(0), S1 = Placement::shard(1);
  // 7 rows over 3: 3, 2, 2; all but the smallest piece (2 rows of 13) leave the busiest rank.
  EXPECT_EQ(redistribute_cost(S0, R, s, DType::F32, 3).bytes, (7 - 2) * 13 * 4);
  EXPECT_EQ(redistribute_cost(S0, R, s, DType::F32, 3).collective, "all_gather_v");
  EXPECT_EQ(redistribute_cost(S0, R, Shape{6, 13}, DType::F32, 3).collective, "all_gather");
  EXPECT_EQ(redistribute_cost(P, R, s, DType::F32, 3).bytes, 2 * (91 - 30) * 4);
  // Padded to 3 rows per rank: 9 rows, 6 sent.
  EXPECT_EQ(redistribute_cost(P, S0, s, DType::F32, 3).bytes, 2 * 3 * 13 * 4);
  // 7 x 13 over 2, S(0) -> S(1): rank 0 holds 4 rows and keeps 7 of 13 columns.
  EXPECT_EQ(redistribute_cost(S0, S1, s, DType::F32, 2).bytes, 4 * 6 * 4);
  EXPECT_EQ(redistribute_cost(S0, S1, s, DType::BF16, 2).bytes, 4 * 6 * 2);
  for (auto [a, b] : {std::pair{R, S0}, {R, P}, {S1, P}, {S0, S0}, {P, P}})
    EXPECT_EQ(redistribute_cost(a, b, s, DType::F32, 3), (RedistributeCost{0, "none"}));
  EXPECT_EQ(redistribute_cost(P, R, s, DType::F32, 1), (RedistributeCost{0, "none"}));
  EXPECT_THROW(redistribute_cost(S0, Placement::shard(2), s, DType::F32, 2), Error);
}

TEST(Redistribute, RefusesWrongLocalShapeBeforeCommunicating) {
  Checks checks;
  test::run_world(2, [&](dist::CommPtr world) {
    const uint64_t before = world->context().issued_count();
    std::string message;
    try {
      // S(0) of [7, 13] gives rank 0 four rows and rank 1 three; every rank passes five.
      redistribute_local(test::random(Shape{5, 13}, 1), *world, Placement::shard(0),
                         Placement::replicate(), Shape{7, 13});
    } catch (const Error& e) {
      message = e.what();
    }
    checks.expect(message.find("holds [5, 13]") != std::string::npos,
                  "expected an Error naming the local shape, got '" + message + "'");
    checks.expect(world->context().issued_count() == before, "a call was issued before refusal");
  });
  checks.verify();
}

TEST(Redistribute, TwoAxesOneAtATime) {
  Checks checks;
  test::run_world(4, [&](dist::CommPtr world) {
    dist::DeviceMesh mesh(world, "tp=2,dp=2");
    std::vector<dist::CommPtr> axes = mesh_axes(mesh, {"dp", "tp"});
    const Shape shape{13, 33};
    Tensor global = test::random(shape, 3);
    DistTensor x =
        DistTensor::from_global(global, axes, {Placement::shard(0), Placement::shard(1)});
    // Rows split over dp (7, 6), columns over tp (17, 16).
    const int dp = mesh.coord("dp"), tp = mesh.coord("tp");
    const int64_t r0 = shard_offset(13, 2, dp), c0 = shard_offset(33, 2, tp);
    checks.expect_close(
        x.local(),
        global.slice(0, r0, r0 + (dp == 0 ? 7 : 6)).slice(1, c0, c0 + (tp == 0 ? 17 : 16)), 0.0,
        "local piece of [S(0), S(1)]");
    for (const Placements& to : {Placements{Placement::replicate(), Placement::shard(1)},
                                 Placements{Placement::shard(0), Placement::replicate()},
                                 Placements{Placement::replicate(), Placement::replicate()},
                                 Placements{Placement::shard(1), Placement::shard(0)}}) {
      std::string what = "[S(0), S(1)] -> " + str(to);
      if (to[0].is_shard(1)) {
        // Axis 1 (changed first) would cut dim 0 while axis 0 leaves it: refused, naming both.
        std::string message;
        try {
          redistribute(x, to);
        } catch (const Error& e) {
          message = e.what();
        }
        checks.expect(message.find("also shards dim") != std::string::npos,
                      what + ": expected a refusal, got '" + message + "'");
        continue;
      }
      DistTensor y = redistribute(x, to);
      checks.expect_close(y.to_global(), global, 0.0, what);
    }
    // Dim 0 split by both axes: by dp into 7 and 6 rows, then each piece by tp.
    const Placements nested{Placement::shard(0), Placement::shard(0)};
    DistTensor z = DistTensor::from_global(global, axes, nested);
    const int64_t rows = dp == 0 ? 7 : 6;
    const int64_t z0 = r0 + shard_offset(rows, 2, tp);
    checks.expect_close(z.local(), global.slice(0, z0, z0 + shard_size(rows, 2, tp)), 0.0,
                        "local piece of [S(0), S(0)]");
    checks.expect_close(z.to_global(), global, 0.0, "[S(0), S(0)] gathered");
    DistTensor half = redistribute(z, {Placement::shard(0), Placement::replicate()});
    checks.expect_close(half.local(), global.slice(0, r0, r0 + rows), 0.0,
                        "[S(0), S(0)] -> [S(0), R]");
    checks.expect_close(redistribute(half, nested).local(), z.local(), 0.0,
                        "[S(0), R] -> [S(0), S(0)]");
    // Dropping dp's cut while tp keeps cutting dp's pieces would need the rows re-cut: refused.
    std::string message;
    try {
      redistribute(z, {Placement::replicate(), Placement::shard(0)});
    } catch (const Error& e) {
      message = e.what();
    }
    checks.expect(message.find("later axis 1 also shards dim 0") != std::string::npos,
                  "[S(0), S(0)] -> [R, S(0)]: expected a refusal, got '" + message + "'");
  });
  checks.verify();
}

}  // namespace
}  // namespace tessel::sharding
