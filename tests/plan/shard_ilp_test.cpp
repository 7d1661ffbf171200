// SPDX-License-Identifier: Apache-2.0
// The sharding ILP against exhaustive enumeration on a small hand-built graph with odd tensor
// sizes (costs from sharding::redistribute_cost on 3 ranks), with and without a memory budget
// that excludes the unconstrained optimum, and the one error for a budget nothing fits.
#include "tessel/plan/shard_ilp.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tessel/core/error.h"
#include "tessel/sharding/redistribute.h"

namespace tessel::plan {
namespace {

using sharding::Placement;

constexpr int kRanks = 3;
const std::vector<Placement> kPlacements = {Placement::replicate(), Placement::shard(0),
                                            Placement::shard(1)};

// Node v holds a tensor of `shapes[v]`; its strategies place it R, S(0) or S(1) over 3 ranks.
// Compute: odd FLOP counts, divided over the ranks when sharded; memory: the piece's bytes;
// edges: the busiest rank's bytes of the redistribution at 1 GB/s, both directions.
ShardProblem hand_built() {
  const std::vector<Shape> shapes = {{7, 13}, {13, 33}, {7, 13}, {13, 33},
                                     {33, 7}, {7, 13},  {13, 7}};
  const std::vector<double> flops = {7e3, 33e3, 13e3, 99e3, 5e3, 21e3, 3e3};
  ShardProblem p;
  for (size_t v = 0; v < shapes.size(); ++v) {
    ShardNode node{"n" + std::to_string(v), {}};
    for (const Placement& pl : kPlacements) {
      const double frac = pl.is_shard()
                              ? double(sharding::shard_size(shapes[v][size_t(pl.dim)], kRanks, 0)) /
                                    double(shapes[v][size_t(pl.dim)])
                              : 1.0;
      node.strategies.push_back({pl.str(), flops[v] * 1e-9 / (pl.is_shard() ? kRanks : 1),
                                 4.0 * double(shapes[v].numel()) * frac});
    }
    p.nodes.push_back(node);
  }
  const std::vector<std::pair<int, int>> edges = {{0, 1}, {0, 2}, {1, 3}, {2, 3},
                                                  {3, 4}, {4, 5}, {2, 5}, {5, 6}};
  for (auto [u, v] : edges) {
    ShardEdge e{u, v, {}};
    for (const Placement& a : kPlacements) {
      std::vector<double> row;
      for (const Placement& b : kPlacements) {
        // The consumer reads the producer's tensor: cost on the producer's shape.
        const Shape& s = shapes[size_t(u)];
        const double bytes = double(sharding::redistribute_cost(a, b, s, DType::F32, kRanks).bytes +
                                    sharding::redistribute_cost(b, a, s, DType::F32, kRanks).bytes);
        row.push_back(bytes * 1e-9 + 1e-6 * (a == b ? 0 : 1));
      }
      e.cost.push_back(row);
    }
    p.edges.push_back(e);
  }
  // A pair no style implements.
  p.edges[3].cost[2][1] = kForbidden;
  return p;
}

struct Best {
  double objective = kForbidden;
  std::vector<int> choice;
};

Best enumerate(const ShardProblem& p) {
  Best best;
  std::vector<int> c(p.nodes.size(), 0);
  while (true) {
    ShardSolution parts;
    const double obj = evaluate_choice(p, c, &parts);
    if (std::isfinite(obj) && parts.memory_bytes <= p.memory_budget && obj < best.objective)
      best = {obj, c};
    size_t i = 0;
    while (i < c.size() && ++c[i] == int(p.nodes[i].strategies.size())) c[i++] = 0;
    if (i == c.size()) break;
  }
  return best;
}

double least_memory(const ShardProblem& p) {
  double least = 0;
  for (const ShardNode& n : p.nodes) {
    double m = kForbidden;
    for (const ShardStrategy& s : n.strategies) m = std::min(m, s.memory_bytes);
    least += m;
  }
  return least;
}

TEST(ShardIlp, SolvesHandBuiltGraphToTheEnumeratedOptimum) {
  const ShardProblem p = hand_built();
  const Best best = enumerate(p);
  ASSERT_TRUE(std::isfinite(best.objective));
  const ShardSolution s = solve_shard_ilp(p);
  EXPECT_NEAR(s.objective, best.objective, 1e-9 * best.objective);
  EXPECT_NEAR(evaluate_choice(p, s.choice), best.objective, 1e-9 * best.objective);
  EXPECT_EQ(s.integer_variables, 7 * 3);
  EXPECT_EQ(s.variables, 7 * 3 + 8 * 9);
  EXPECT_EQ(s.constraints, 7 + 8 * 6);  // one-hot rows, edge marginals; no finite budget
}

TEST(ShardIlp, MemoryBudgetExcludingTheOptimumGivesTheConstrainedOptimum) {
  ShardProblem p = hand_built();
  const ShardSolution free = solve_shard_ilp(p);
  ASSERT_GT(free.memory_bytes, least_memory(p)) << "the budget below would exclude nothing";
  p.memory_budget = free.memory_bytes - 1;
  const Best best = enumerate(p);
  ASSERT_TRUE(std::isfinite(best.objective));
  const ShardSolution s = solve_shard_ilp(p);
  EXPECT_NEAR(s.objective, best.objective, 1e-9 * best.objective);
  EXPECT_LE(s.memory_bytes, p.memory_budget);
  EXPECT_GT(s.objective, free.objective);
}

TEST(ShardIlp, InfeasibleMemoryIsOneClearError) {
  ShardProblem p = hand_built();
  p.memory_budget = least_memory(p) * 0.5;
  try {
    solve_shard_ilp(p);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no choice of placements fits the memory budget of"), std::string::npos)
        << what;
    EXPECT_NE(what.find("the least any choice needs is"), std::string::npos) << what;
  }
}

TEST(ShardIlp, EveryChoiceForbiddenIsNamed) {
  ShardProblem p = hand_built();
  for (auto& row : p.edges[0].cost)
    for (double& c : row) c = kForbidden;
  EXPECT_THROW(
      {
        try {
          solve_shard_ilp(p);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("no choice of strategies is allowed"),
                    std::string::npos);
          throw;
        }
      },
      Error);
}

}  // namespace
}  // namespace tessel::plan
