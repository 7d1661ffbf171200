// SPDX-License-Identifier: Apache-2.0
// A small mixed-integer linear program and its solution by COIN-OR CBC (branch and cut over the
// CLP simplex; Forrest & Lougee-Heimer), the solver Alpa's intra-operator pass uses. The planner
// builds its programs in this form (plan/shard_ilp.h) so that the rest of it never sees CBC's
// interface, and CBC's own output stays off the terminal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::plan {

// minimise  sum_j objective[j] * x[j]
// such that lower[j] <= x[j] <= upper[j], x[j] integral where integer[j],
//           for each row: sum_k coefs[k] * x[cols[k]]  (<=, >=, =)  rhs.
class MipProblem {
 public:
  // Adds a column; returns its index.
  int add_variable(double lower, double upper, double objective, bool integer);
  enum class Sense { LessEqual, GreaterEqual, Equal };
  void add_row(const std::vector<int>& cols, const std::vector<double>& coefs, Sense sense,
               double rhs);

  int variables() const { return int(lower_.size()); }
  int rows() const { return int(row_sense_.size()); }
  int integer_variables() const;

 private:
  friend struct MipSolver;
  std::vector<double> lower_, upper_, objective_;
  std::vector<char> integer_;
  std::vector<int> row_start_{0}, row_cols_;
  std::vector<double> row_coefs_, row_rhs_;
  std::vector<Sense> row_sense_;
};

enum class MipStatus { Optimal, Infeasible, Unsolved };

struct MipResult {
  MipStatus status = MipStatus::Unsolved;
  double objective = 0;
  std::vector<double> values;  // one per column (empty unless Optimal)
  double seconds = 0;          // wall time of the solve
  int64_t nodes = 0;           // branch-and-bound nodes CBC explored
};

struct MipOptions {
  double time_limit_seconds = 60;
  double relative_gap = 0;  // 0: prove optimality
};

// Solves `problem` with CBC (quietly). Unsolved when the time limit ran out before optimality
// was proven or infeasibility shown.
MipResult solve_mip(const MipProblem& problem, const MipOptions& options = {});

}  // namespace tessel::plan
