// SPDX-License-Identifier: Apache-2.0
// `tessel plan --check`: the plan search's top layouts run for real on this machine, each for a
// few steps of `tessel train`, and their predicted step time and peak memory per rank set beside
// what the runs measured, with the error and whether the predicted ranking held. The planners
// this one follows (Alpa, Merak) rank by their cost model alone; the check is how a user (and the
// project's tests) see how far the model is from this machine. docs/PLANNER.md, "Checking plans".
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessel/plan/cluster.h"
#include "tessel/plan/search.h"

namespace tessel::cli {

struct PlanCheckOptions {
  bool enabled = false;  // --check given
  int steps = 3;         // measured steps per run
  int warmup = 1;        // steps run before them, not measured
  std::string mpirun;    // "": mpirun (or mpiexec) on PATH, needed when the layouts have > 1 rank
  std::string data;      // the runs' data.dir; "": the trainer's default
  std::string workdir;   // "": a fresh temporary directory, removed after a clean check
  std::string out;       // the table as JSON (.jsonl: a line per row, then the summary)
  std::vector<std::string> sets;  // more `tessel train --set` overrides, after the check's own
};

// --check, --steps, --warmup, --mpirun, --data, --workdir, --out and --set on bare `tessel plan`.
void add_plan_check_options(CLI::App& plan, const std::shared_ptr<PlanCheckOptions>& options);

// What the search was asked, as the runs need it.
struct CheckedSearch {
  std::string model;      // --model as given: the runs' model.config
  std::string precision;  // train.precision
  int64_t bucket_mb = 25;
  int top = 3;        // layouts run, from the fastest predicted
  bool json = false;  // print the JSON instead of the table
};

// Runs the top ranked layouts of `result` and prints the table (or JSON); progress goes to
// stderr. A run that fails is named with its exit status and its last stderr line, the others
// still run, and the check then fails with one error naming every failed run.
void run_plan_check(const PlanCheckOptions& options, const CheckedSearch& search,
                    const plan::SearchResult& result, const plan::Cluster& cluster);

}  // namespace tessel::cli
