// SPDX-License-Identifier: Apache-2.0
// The sharding ILP (shard_ilp.h) written out as a MipProblem and solved by CBC.
#include "tessel/plan/shard_ilp.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "tessel/core/error.h"
#include "tessel/plan/cbc_solver.h"

namespace tessel::plan {
namespace {

void check_problem(const ShardProblem& p) {
  for (size_t v = 0; v < p.nodes.size(); ++v)
    TESSEL_CHECK(!p.nodes[v].strategies.empty(), "shard ILP: node ", v, " ('", p.nodes[v].label,
                 "') has no strategy");
  for (const ShardEdge& e : p.edges) {
    TESSEL_CHECK(e.from >= 0 && e.to >= 0 && size_t(e.from) < p.nodes.size() &&
                     size_t(e.to) < p.nodes.size() && e.from != e.to,
                 "shard ILP: edge ", e.from, " -> ", e.to, " over ", p.nodes.size(), " nodes");
    const size_t a = p.nodes[size_t(e.from)].strategies.size();
    const size_t b = p.nodes[size_t(e.to)].strategies.size();
    TESSEL_CHECK(e.cost.size() == a, "shard ILP: edge ", e.from, " -> ", e.to, " has ",
                 e.cost.size(), " cost rows for ", a, " strategies");
    for (const auto& row : e.cost)
      TESSEL_CHECK(row.size() == b, "shard ILP: edge ", e.from, " -> ", e.to, " has a row of ",
                   row.size(), " costs for ", b, " strategies");
  }
}

struct Formulation {
  MipProblem mip;
  std::vector<std::vector<int>> s;  // node -> strategy -> column
  double bytes_scale = 1;           // memory coefficients per byte
};

// CBC's tolerances are absolute (feasibility 1e-7, gaps 1e-10, ...): times are written in
// microseconds and memory as a fraction of the budget (or of the most any choice could need), so
// that a byte over a budget of kilobytes or of terabytes is told apart alike.
constexpr double kSecondsScale = 1e6;

double memory_reference(const ShardProblem& p, double budget) {
  if (std::isfinite(budget) && budget > 0) return budget;
  double most = 0;
  for (const ShardNode& n : p.nodes) {
    double m = 0;
    for (const ShardStrategy& s : n.strategies) m = std::max(m, s.memory_bytes);
    most += m;
  }
  return most > 0 ? most : 1;
}

// minimise compute + communication (or memory, when `memory_objective`), under `budget`.
Formulation formulate(const ShardProblem& p, bool memory_objective, double budget) {
  Formulation f;
  f.bytes_scale = 1.0 / memory_reference(p, budget);
  const double kBytesScale = f.bytes_scale;
  for (const ShardNode& node : p.nodes) {
    std::vector<int> cols, ones;
    for (const ShardStrategy& st : node.strategies)
      cols.push_back(f.mip.add_variable(
          0, 1,
          memory_objective ? st.memory_bytes * kBytesScale : st.compute_seconds * kSecondsScale,
          true));
    f.mip.add_row(cols, std::vector<double>(cols.size(), 1.0), MipProblem::Sense::Equal, 1);
    f.s.push_back(std::move(cols));
  }
  for (const ShardEdge& e : p.edges) {
    const auto& su = f.s[size_t(e.from)];
    const auto& sv = f.s[size_t(e.to)];
    std::vector<std::vector<int>> col(su.size(), std::vector<int>(sv.size()));
    for (size_t i = 0; i < su.size(); ++i)
      for (size_t j = 0; j < sv.size(); ++j) {
        const double c = e.cost[i][j];
        const bool allowed = std::isfinite(c);
        col[i][j] = f.mip.add_variable(0, allowed ? 1 : 0,
                                       allowed && !memory_objective ? c * kSecondsScale : 0, false);
      }
    for (size_t i = 0; i < su.size(); ++i) {
      std::vector<int> cols(col[i].begin(), col[i].end());
      std::vector<double> coefs(cols.size(), 1.0);
      cols.push_back(su[i]);
      coefs.push_back(-1.0);
      f.mip.add_row(cols, coefs, MipProblem::Sense::Equal, 0);
    }
    for (size_t j = 0; j < sv.size(); ++j) {
      std::vector<int> cols;
      for (size_t i = 0; i < su.size(); ++i) cols.push_back(col[i][j]);
      std::vector<double> coefs(cols.size(), 1.0);
      cols.push_back(sv[j]);
      coefs.push_back(-1.0);
      f.mip.add_row(cols, coefs, MipProblem::Sense::Equal, 0);
    }
  }
  if (std::isfinite(budget)) {
    std::vector<int> cols;
    std::vector<double> coefs;
    for (size_t v = 0; v < p.nodes.size(); ++v)
      for (size_t i = 0; i < p.nodes[v].strategies.size(); ++i) {
        cols.push_back(f.s[v][i]);
        coefs.push_back(p.nodes[v].strategies[i].memory_bytes * kBytesScale);
      }
    f.mip.add_row(cols, coefs, MipProblem::Sense::LessEqual, budget * kBytesScale);
  }
  return f;
}

std::vector<int> read_choice(const Formulation& f, const MipResult& r) {
  std::vector<int> choice;
  for (const auto& cols : f.s) {
    int best = 0;
    for (size_t i = 1; i < cols.size(); ++i)
      if (r.values[size_t(cols[i])] > r.values[size_t(cols[size_t(best)])]) best = int(i);
    choice.push_back(best);
  }
  return choice;
}

// "1.5 GiB", "312.3 KiB", "1000 B".
std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes >= 1024) bytes /= 1024, ++u;
  std::ostringstream o;
  o.precision(u == 0 ? 0 : 4);
  if (u == 0) o << std::fixed;
  o << bytes << " " << units[u];
  return o.str();
}

}  // namespace

double evaluate_choice(const ShardProblem& p, const std::vector<int>& choice,
                       ShardSolution* parts) {
  TESSEL_CHECK(choice.size() == p.nodes.size(), "shard ILP: a choice of ", choice.size(),
               " strategies for ", p.nodes.size(), " nodes");
  ShardSolution s;
  for (size_t v = 0; v < p.nodes.size(); ++v) {
    TESSEL_CHECK(choice[v] >= 0 && size_t(choice[v]) < p.nodes[v].strategies.size(),
                 "shard ILP: node ", v, " has no strategy ", choice[v]);
    const ShardStrategy& st = p.nodes[v].strategies[size_t(choice[v])];
    s.compute_seconds += st.compute_seconds;
    s.memory_bytes += st.memory_bytes;
  }
  for (const ShardEdge& e : p.edges)
    s.communication_seconds += e.cost[size_t(choice[size_t(e.from)])][size_t(choice[size_t(e.to)])];
  s.objective = s.compute_seconds + s.communication_seconds;
  s.choice = choice;
  if (parts) *parts = s;
  return std::isfinite(s.objective) ? s.objective : kForbidden;
}

ShardSolution solve_shard_ilp(const ShardProblem& p, double time_limit_seconds) {
  check_problem(p);
  Formulation f = formulate(p, false, p.memory_budget);
  MipOptions options;
  options.time_limit_seconds = time_limit_seconds;
  const MipResult r = solve_mip(f.mip, options);
  if (r.status == MipStatus::Infeasible) {
    // Tell a budget too small from a graph with no allowed choice at all.
    Formulation least = formulate(p, true, kForbidden);
    const MipResult m = solve_mip(least.mip, options);
    TESSEL_CHECK(m.status == MipStatus::Optimal,
                 "shard ILP: no choice of strategies is allowed: every choice places some edge's "
                 "tensors in a way no style implements");
    TESSEL_FAIL("shard ILP: no choice of placements fits the memory budget of ",
                human_bytes(p.memory_budget), " per rank: the least any choice needs is ",
                human_bytes(m.objective / least.bytes_scale), " per rank (", p.nodes.size(),
                " nodes); use more tensor-parallel ranks or a smaller batch");
  }
  TESSEL_CHECK(r.status == MipStatus::Optimal,
               "shard ILP: CBC did not prove a solution optimal "
               "within ",
               time_limit_seconds, " s (", f.mip.variables(), " variables, ", f.mip.rows(),
               " constraints)");
  ShardSolution s;
  evaluate_choice(p, read_choice(f, r), &s);
  s.variables = f.mip.variables();
  s.integer_variables = f.mip.integer_variables();
  s.constraints = f.mip.rows();
  s.solve_seconds = r.seconds;
  s.branch_nodes = r.nodes;
  return s;
}

}  // namespace tessel::plan
