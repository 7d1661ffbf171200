// SPDX-License-Identifier: Apache-2.0
// Intra-operator sharding as an integer linear program (Alpa, Zheng et al. 2022, section 4.2):
// every node of a graph chooses one of its strategies (a legal placement signature), each with a
// compute time and a memory per rank; every edge charges the resharding time of the pair of
// strategies its ends chose; the sum is minimised under a per-rank memory budget.
//
//   s_v(i) in {0, 1},  sum_i s_v(i) = 1                          one strategy per node
//   e_uv(i, j) >= 0,   sum_j e_uv(i, j) = s_u(i),  sum_i e_uv(i, j) = s_v(j)
//   min  sum_v sum_i compute_v(i) s_v(i) + sum_uv sum_ij reshard_uv(i, j) e_uv(i, j)
//   s.t. sum_v sum_i memory_v(i) s_v(i) <= budget
//
// The edge variables are Alpa's linearisation of the quadratic s_u(i) s_v(j): with the rows above
// they are integral whenever the s are, so only the s are integer variables, and the relaxation
// is tighter than the textbook e <= s_u, e <= s_v, e >= s_u + s_v - 1. A pair that may not occur
// (a transition no runtime style implements, two uses of one parameter placed differently) has
// an infinite cost: its e is fixed at 0. plan/shard_graph.h builds these problems from a trace.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tessel::plan {

inline constexpr double kForbidden = std::numeric_limits<double>::infinity();

struct ShardStrategy {
  std::string name;
  double compute_seconds = 0;  // the node's work under this strategy (forward and backward)
  double memory_bytes = 0;     // what the node keeps per rank
};

struct ShardNode {
  std::string label;
  std::vector<ShardStrategy> strategies;
};

struct ShardEdge {
  int from = 0, to = 0;
  // [strategy of `from`][strategy of `to`]: seconds, or kForbidden.
  std::vector<std::vector<double>> cost;
};

struct ShardProblem {
  std::vector<ShardNode> nodes;
  std::vector<ShardEdge> edges;
  double memory_budget = std::numeric_limits<double>::infinity();  // bytes per rank
};

struct ShardSolution {
  std::vector<int> choice;  // strategy index per node
  double objective = 0;     // seconds: compute + communication
  double compute_seconds = 0, communication_seconds = 0;
  double memory_bytes = 0;
  int variables = 0, integer_variables = 0, constraints = 0;
  double solve_seconds = 0;
  int64_t branch_nodes = 0;
};

// The objective of a complete choice, or kForbidden when it uses a forbidden pair; fills the
// solution's compute, communication and memory parts. Throws for a malformed choice.
double evaluate_choice(const ShardProblem& problem, const std::vector<int>& choice,
                       ShardSolution* parts = nullptr);

// Solves the ILP above with CBC. Throws one Error when no choice fits the memory budget (naming
// the budget and the least memory any choice needs) or when every choice uses a forbidden pair.
ShardSolution solve_shard_ilp(const ShardProblem& problem, double time_limit_seconds = 60);

}  // namespace tessel::plan
