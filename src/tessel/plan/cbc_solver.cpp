// SPDX-License-Identifier: Apache-2.0
// MipProblem handed to CBC's C interface (Cbc_C_Interface.h), solved with its logging off.
#include "tessel/plan/cbc_solver.h"

#include <coin/Cbc_C_Interface.h>

#include <chrono>
#include <memory>
#include <string>

#include "tessel/core/error.h"

namespace tessel::plan {

int MipProblem::add_variable(double lower, double upper, double objective, bool integer) {
  TESSEL_CHECK(lower <= upper, "MipProblem: variable bounds [", lower, ", ", upper, "] are empty");
  lower_.push_back(lower);
  upper_.push_back(upper);
  objective_.push_back(objective);
  integer_.push_back(integer ? 1 : 0);
  return int(lower_.size()) - 1;
}

void MipProblem::add_row(const std::vector<int>& cols, const std::vector<double>& coefs,
                         Sense sense, double rhs) {
  TESSEL_CHECK(cols.size() == coefs.size(), "MipProblem: a row with ", cols.size(), " columns and ",
               coefs.size(), " coefficients");
  for (int c : cols)
    TESSEL_CHECK(c >= 0 && c < variables(), "MipProblem: row names column ", c, " of ",
                 variables());
  row_cols_.insert(row_cols_.end(), cols.begin(), cols.end());
  row_coefs_.insert(row_coefs_.end(), coefs.begin(), coefs.end());
  row_start_.push_back(int(row_cols_.size()));
  row_sense_.push_back(sense);
  row_rhs_.push_back(rhs);
}

int MipProblem::integer_variables() const {
  int n = 0;
  for (char i : integer_) n += i;
  return n;
}

struct MipSolver {
  static MipResult solve(const MipProblem& p, const MipOptions& o) {
    std::unique_ptr<Cbc_Model, void (*)(Cbc_Model*)> model(Cbc_newModel(), Cbc_deleteModel);
    TESSEL_CHECK(model != nullptr, "CBC: could not create a model");
    Cbc_setLogLevel(model.get(), 0);
    for (int j = 0; j < p.variables(); ++j)
      Cbc_addCol(model.get(), "", p.lower_[size_t(j)], p.upper_[size_t(j)], p.objective_[size_t(j)],
                 p.integer_[size_t(j)], 0, nullptr, nullptr);
    for (int r = 0; r < p.rows(); ++r) {
      const int begin = p.row_start_[size_t(r)], end = p.row_start_[size_t(r) + 1];
      const char sense = p.row_sense_[size_t(r)] == MipProblem::Sense::LessEqual      ? 'L'
                         : p.row_sense_[size_t(r)] == MipProblem::Sense::GreaterEqual ? 'G'
                                                                                      : 'E';
      Cbc_addRow(model.get(), "", end - begin, p.row_cols_.data() + begin,
                 p.row_coefs_.data() + begin, sense, p.row_rhs_[size_t(r)]);
    }
    Cbc_setObjSense(model.get(), 1);  // minimise
    Cbc_setParameter(model.get(), "seconds", std::to_string(o.time_limit_seconds).c_str());
    Cbc_setParameter(model.get(), "ratioGap", std::to_string(o.relative_gap).c_str());
    const auto start = std::chrono::steady_clock::now();
    Cbc_solve(model.get());
    MipResult result;
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result.nodes = Cbc_getNodeCount(model.get());
    if (Cbc_isProvenInfeasible(model.get())) {
      result.status = MipStatus::Infeasible;
    } else if (Cbc_isProvenOptimal(model.get())) {
      result.status = MipStatus::Optimal;
      result.objective = Cbc_getObjValue(model.get());
      const double* x = Cbc_getColSolution(model.get());
      result.values.assign(x, x + p.variables());
    }
    return result;
  }
};

MipResult solve_mip(const MipProblem& problem, const MipOptions& options) {
  if (problem.variables() == 0) return {MipStatus::Optimal, 0, {}, 0, 0};
  return MipSolver::solve(problem, options);
}

}  // namespace tessel::plan
