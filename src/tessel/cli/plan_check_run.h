// SPDX-License-Identifier: Apache-2.0
// One layout of `tessel plan --check` (plan_check.h) run for real: `tessel train` (through mpirun
// when the layout has several ranks) as a child process with its stdout and stderr in files of
// its run directory, followed step by step through the train.jsonl it writes, and measured from
// that file once it exits: the median step time after the warmup steps, and the fullest rank's
// peak memory as the memory model counts it (in use between steps plus the step's own peak) and
// as the operating system does (VmHWM).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tessel::cli {

struct CheckMeasurement {
  bool ok = false;
  std::string error;         // why not: the exit status and the run's last stderr line
  double step_ms = 0;        // median step_ms of the steps after the warmup
  int steps_measured = 0;    // how many
  int64_t peak_bytes = 0;    // max over ranks of the last step's mem_bytes + step_peak_bytes
  int64_t vm_hwm_bytes = 0;  // max over ranks of the last step's VmHWM
  std::vector<int64_t> rank_peak_bytes, rank_vm_hwm_bytes;  // the same per world rank
  double seconds = 0;  // the run's wall time, start-up and final checkpoint included
};

// Reads a finished run's train.jsonl: an Error when it is missing or has no step after `warmup`.
CheckMeasurement measure_train_log(const std::string& jsonl_path, int warmup);

// What a failed run's stderr says last: its last "tessel: error:" line (a rank's own error, which
// the launcher's report follows), else its last line with a letter or digit ("" when none).
std::string last_line_of(const std::string& path);

// The full path of `name` on PATH (as execvp would find it), or "" when there is none.
std::string find_on_path(const std::string& name);

// Runs `argv` (argv[0] a path or a name on PATH) with stdout and stderr in DIR/stdout.log and
// DIR/stderr.log, DIR being the run's checkpoint directory (created), printing a line on
// `progress` as each step reaches DIR/train.jsonl (`prefix` "  step 2/4: 12.3 ms"), and measures
// it. A non-zero exit or a missing log gives ok = false with the reason, not an Error.
CheckMeasurement run_and_measure(const std::vector<std::string>& argv, const std::string& dir,
                                 int warmup, int steps, const std::string& prefix,
                                 std::ostream& progress);

}  // namespace tessel::cli
