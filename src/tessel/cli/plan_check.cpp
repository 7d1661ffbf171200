// SPDX-License-Identifier: Apache-2.0
// `tessel plan --check` (plan_check.h): runs the search's top layouts with `tessel train` and
// prints predicted against measured step time and peak memory per rank.
#include "tessel/cli/plan_check.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessel/cli/plan_check_run.h"
#include "tessel/cli/plan_search.h"
#include "tessel/core/error.h"
#include "tessel/dist/launch.h"
#include "tessel/train/config.h"

namespace tessel::cli {

namespace fs = std::filesystem;

namespace {

struct CheckRow {
  const plan::PlanResult* plan = nullptr;
  int predicted_rank = 0;  // 1: the fastest predicted
  std::vector<std::string> command;
  CheckMeasurement measured;
  int measured_rank = 0;  // 1: the fastest measured (0: the run failed)
};

double mib(double bytes) {
  return bytes / 1048576.0;
}

// (predicted − measured) / measured: how far the prediction is from what the run did; positive
// when the model predicted more.
double error_of(double predicted, double measured) {
  return measured > 0 ? (predicted - measured) / measured : 0.0;
}

double median_abs(std::vector<double> v) {
  if (v.empty()) return 0;
  for (double& x : v) x = std::abs(x);
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string tessel_binary() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  TESSEL_CHECK(!ec, "plan --check: cannot find the tessel binary (/proc/self/exe: ", ec.message(),
               ")");
  return self.string();
}

// The launcher for layouts of `ranks` processes: none for one, else --mpirun or mpirun/mpiexec
// on PATH.
std::vector<std::string> launcher(const PlanCheckOptions& o, int ranks) {
  if (ranks == 1) return {};
  std::string mpirun = o.mpirun;
  if (mpirun.empty()) {
    mpirun = find_on_path("mpirun");
    if (mpirun.empty()) mpirun = find_on_path("mpiexec");
    TESSEL_CHECK(!mpirun.empty(), "plan --check: the layouts have ", ranks,
                 " ranks and neither mpirun nor mpiexec is on PATH; give --mpirun PATH");
  } else {
    TESSEL_CHECK(!find_on_path(mpirun).empty(), "plan --check: --mpirun ", mpirun,
                 ": not an executable file");
  }
  // Several ranks on the cores of one machine: allowed past the slot count, not pinned (pinning
  // ranks that share cores with other work makes them wait for each other's core).
  return {mpirun, "--oversubscribe", "--bind-to", "none", "-np", std::to_string(ranks)};
}

// The `tessel train` settings every checked run shares, then the layout's, then the user's.
std::vector<std::string> train_command(const std::vector<std::string>& launch,
                                       const PlanCheckOptions& o, const CheckedSearch& s,
                                       const plan::SearchResult& res, const plan::Cluster& cluster,
                                       const plan::Layout& layout, const std::string& dir,
                                       const std::string& data) {
  std::vector<std::string> cmd = launch;
  cmd.push_back(tessel_binary());
  cmd.push_back("train");
  for (const std::string& a : layout.train_args()) cmd.push_back(a);
  char peak[64];
  // The description's f32 peak for MFU, so no run spends a second measuring one.
  std::snprintf(peak, sizeof peak, "machine.peak_gflops=%.6g", cluster.device.peak_flops[0] / 1e9);
  const std::vector<std::string> sets = {"model.config=" + s.model,
                                         "data.dir=" + data,
                                         "train.steps=" + std::to_string(o.warmup + o.steps),
                                         "train.seq_len=" + std::to_string(res.seq),
                                         "train.precision=" + s.precision,
                                         "parallel.bucket_mb=" + std::to_string(s.bucket_mb),
                                         "optim.warmup_steps=0",
                                         "checkpoint.dir=" + dir,
                                         "checkpoint.interval=0",
                                         "checkpoint.keep=1",
                                         "eval.interval=0",
                                         "eval.batches=1",
                                         "sample.tokens=0",
                                         "log.interval=1",
                                         peak};
  for (const std::string& x : sets) {
    cmd.push_back("--set");
    cmd.push_back(x);
  }
  for (const std::string& x : o.sets) {
    cmd.push_back("--set");
    cmd.push_back(x);
  }
  return cmd;
}

nlohmann::json row_json(const CheckRow& r) {
  const plan::PlanResult& p = *r.plan;
  const CheckMeasurement& m = r.measured;
  nlohmann::json j = {{"predicted_rank", r.predicted_rank},
                      {"layout", p.layout.str()},
                      {"dp", p.layout.dp},
                      {"tp", p.layout.tp},
                      {"pp", p.layout.pp},
                      {"train_args", p.layout.train_args()},
                      {"predicted_step_ms", 1e3 * p.step_seconds},
                      {"predicted_peak_bytes", int64_t(p.memory.peak())},
                      {"predicted_terms_ms",
                       {{"compute", 1e3 * p.time.compute_seconds},
                        {"optimizer", 1e3 * p.time.optimizer_seconds},
                        {"dp_exposed", 1e3 * p.time.dp_exposed_seconds},
                        {"tp_comm", 1e3 * p.time.tp_comm_seconds},
                        {"pp_comm", 1e3 * p.time.pp_comm_seconds},
                        {"bubble", 1e3 * p.time.bubble_seconds},
                        {"load", 1e3 * p.time.load_seconds}}},
                      {"status", m.ok ? "ok" : "failed"},
                      {"run_seconds", m.seconds}};
  if (p.layout.pp > 1) j["schedule"] = p.layout.schedule;
  if (!m.ok) {
    j["error"] = m.error;
    return j;
  }
  j["measured_step_ms"] = m.step_ms;
  j["measured_steps"] = m.steps_measured;
  j["step_ms_error"] = error_of(1e3 * p.step_seconds, m.step_ms);
  j["measured_peak_bytes"] = m.peak_bytes;
  j["peak_error"] = error_of(double(p.memory.peak()), double(m.peak_bytes));
  j["measured_vm_hwm_bytes"] = m.vm_hwm_bytes;
  j["measured_rank_peak_bytes"] = m.rank_peak_bytes;
  j["measured_rank_vm_hwm_bytes"] = m.rank_vm_hwm_bytes;
  j["measured_rank"] = r.measured_rank;
  return j;
}

void print_table(const nlohmann::json& summary, const std::vector<CheckRow>& rows) {
  std::printf("%4s  %-68s %9s %9s %8s %10s %10s %8s %10s %5s\n", "rank", "layout", "pred ms",
              "meas ms", "error", "pred MiB", "meas MiB", "error", "VmHWM MiB", "meas");
  for (const CheckRow& r : rows) {
    const plan::PlanResult& p = *r.plan;
    if (!r.measured.ok) {
      std::printf("%4d  %-68s %9.3f %9s %8s %10.3f %10s %8s %10s %5s  (run failed)\n",
                  r.predicted_rank, p.layout.str().c_str(), 1e3 * p.step_seconds, "-", "-",
                  mib(double(p.memory.peak())), "-", "-", "-", "-");
      continue;
    }
    const CheckMeasurement& m = r.measured;
    std::printf("%4d  %-68s %9.3f %9.3f %+7.1f%% %10.3f %10.3f %+7.2f%% %10.1f %5d\n",
                r.predicted_rank, p.layout.str().c_str(), 1e3 * p.step_seconds, m.step_ms,
                100 * error_of(1e3 * p.step_seconds, m.step_ms), mib(double(p.memory.peak())),
                mib(double(m.peak_bytes)),
                100 * error_of(double(p.memory.peak()), double(m.peak_bytes)),
                mib(double(m.vm_hwm_bytes)), r.measured_rank);
  }
  std::printf("# predicted ranking %s (measured order:",
              summary.at("ranking_held").get<bool>() ? "held" : "did not hold");
  for (int k : summary.at("measured_order")) std::printf(" %d", k);
  std::printf(")\n# median |error|: step time %.1f%%, peak memory %.2f%%\n",
              100 * summary.at("median_abs_step_ms_error").get<double>(),
              100 * summary.at("median_abs_peak_error").get<double>());
}

void write_out(const std::string& path, const nlohmann::json& summary, const nlohmann::json& rows) {
  std::ofstream f(path);
  TESSEL_CHECK(bool(f), "plan --check: cannot write --out ", path);
  if (fs::path(path).extension() == ".jsonl") {
    for (const nlohmann::json& r : rows) f << r.dump() << "\n";
    f << nlohmann::json{{"summary", summary}}.dump() << "\n";
  } else {
    nlohmann::json all = summary;
    all["rows"] = rows;
    f << all.dump(2) << "\n";
  }
  TESSEL_CHECK(bool(f), "plan --check: writing --out ", path, " failed");
}

}  // namespace

void add_plan_check_options(CLI::App& plan, const std::shared_ptr<PlanCheckOptions>& o) {
  plan.add_flag("--check", o->enabled,
                "Run the top layouts (--top, default 3) with `tessel train` here and print "
                "predicted against measured step time and peak memory");
  plan.add_option("--steps", o->steps, "--check: measured steps per run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  plan.add_option("--warmup", o->warmup, "--check: steps before the measured ones")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  plan.add_option("--mpirun", o->mpirun,
                  "--check: the MPI launcher for multi-rank layouts (default: mpirun on PATH)");
  plan.add_option("--data", o->data,
                  "--check: dataset directory (`tessel data prepare`; default the trainer's)");
  plan.add_option("--workdir", o->workdir,
                  "--check: keep the runs' directories here (default: a temporary one, removed)");
  plan.add_option("--out", o->out, "--check: write the table as JSON (.jsonl: a line per row)");
  plan.add_option("--set", o->sets, "--check: more `tessel train` overrides, SECTION.KEY=VALUE");
}

void run_plan_check(const PlanCheckOptions& o, const CheckedSearch& s,
                    const plan::SearchResult& res, const plan::Cluster& cluster) {
  TESSEL_CHECK(dist::detect_launch().size <= 1,
               "plan --check starts its own runs (through mpirun for several ranks): run it as "
               "one process, not under a launcher of ",
               dist::detect_launch().size, " ranks");
  plan::best_plan(res);  // nothing ranked: the search's one error
  const std::string data = o.data.empty() ? train::TrainConfig{}.data.dir : o.data;
  TESSEL_CHECK(fs::is_directory(data), "plan --check: no dataset directory ", data,
               " (write one with `tessel data prepare`, or give --data DIR)");
  // Every layout has the search's ranks: the launcher is found (or refused) before any run.
  const std::vector<std::string> launch = launcher(o, res.devices);
  const bool temporary = o.workdir.empty();
  const fs::path work =
      temporary ? fs::temp_directory_path() / ("tessel-plan-check-" + std::to_string(getpid()))
                : fs::path(o.workdir);
  fs::create_directories(work);

  std::vector<CheckRow> rows;
  const size_t n = std::min(res.ranked.size(), size_t(std::max(s.top, 1)));
  for (size_t i = 0; i < n; ++i) {
    CheckRow r;
    r.plan = &res.ranked[i];
    r.predicted_rank = int(i) + 1;
    const std::string dir = (work / ("rank" + std::to_string(i + 1))).string();
    fs::remove_all(dir);
    TESSEL_CHECK(r.plan->layout.dp * r.plan->layout.tp * r.plan->layout.pp == res.devices,
                 "plan --check: ", r.plan->layout.str(), " is not a layout of ", res.devices,
                 " ranks");
    r.command =
        train_command(launch, o, s, res, cluster, r.plan->layout, dir, fs::absolute(data).string());
    std::cerr << "# check " << i + 1 << "/" << n << ": " << r.plan->layout.str() << ", predicted "
              << 1e3 * r.plan->step_seconds << " ms, " << mib(double(r.plan->memory.peak()))
              << " MiB per rank\n#   " << join_args(r.command) << std::endl;
    const std::string prefix = "  [" + std::to_string(i + 1) + "/" + std::to_string(n) + "] ";
    r.measured = run_and_measure(r.command, dir, o.warmup, o.steps, prefix, std::cerr);
    if (r.measured.ok)
      std::cerr << prefix << "measured " << r.measured.step_ms << " ms (median of "
                << r.measured.steps_measured << " steps), " << mib(double(r.measured.peak_bytes))
                << " MiB per rank, in " << r.measured.seconds << " s" << std::endl;
    else
      std::cerr << prefix << "FAILED: " << r.measured.error << " (logs in " << dir << ")"
                << std::endl;
    rows.push_back(std::move(r));
  }

  // The measured order of the runs that finished, against the predicted (rank 1 fastest).
  std::vector<CheckRow*> done;
  for (CheckRow& r : rows)
    if (r.measured.ok) done.push_back(&r);
  std::stable_sort(done.begin(), done.end(), [](const CheckRow* a, const CheckRow* b) {
    return a->measured.step_ms < b->measured.step_ms;
  });
  nlohmann::json order = nlohmann::json::array();
  bool held = true;
  for (size_t k = 0; k < done.size(); ++k) {
    done[k]->measured_rank = int(k) + 1;
    order.push_back(done[k]->predicted_rank);
    held = held && (k == 0 || done[k - 1]->predicted_rank < done[k]->predicted_rank);
  }
  std::vector<double> step_errors, peak_errors;
  nlohmann::json row_list = nlohmann::json::array();
  std::string failures;
  for (const CheckRow& r : rows) {
    row_list.push_back(row_json(r));
    if (r.measured.ok) {
      step_errors.push_back(error_of(1e3 * r.plan->step_seconds, r.measured.step_ms));
      peak_errors.push_back(error_of(double(r.plan->memory.peak()), double(r.measured.peak_bytes)));
    } else {
      failures += "\n  " + r.plan->layout.str() + ": " + r.measured.error;
    }
  }
  nlohmann::json summary = {{"model", res.model},
                            {"cluster", cluster.name},
                            {"cpu_share", cluster.device.cpu_share},
                            {"devices", res.devices},
                            {"global_batch", res.global_batch},
                            {"seq", res.seq},
                            {"steps", o.steps},
                            {"warmup", o.warmup},
                            {"runs", int(rows.size())},
                            {"failed", int(rows.size() - done.size())},
                            {"measured_order", order},
                            {"ranking_held", held},
                            {"median_abs_step_ms_error", median_abs(step_errors)},
                            {"median_abs_peak_error", median_abs(peak_errors)}};
  if (!o.out.empty()) write_out(o.out, summary, row_list);
  if (s.json) {
    nlohmann::json all = summary;
    all["rows"] = row_list;
    std::cout << all.dump() << std::endl;
  } else {
    std::printf(
        "# plan --check: %s on %d ranks (%s), global batch %lld x %lld tokens; median of "
        "%d steps after %d warmup\n",
        res.model.c_str(), res.devices, cluster.name.c_str(), (long long)res.global_batch,
        (long long)res.seq, o.steps, o.warmup);
    print_table(summary, rows);
    std::fflush(stdout);
  }
  TESSEL_CHECK(failures.empty(), "plan --check: ", rows.size() - done.size(), " of ", rows.size(),
               " runs failed (logs in ", work.string(), "):", failures);
  if (temporary) fs::remove_all(work);
}

}  // namespace tessel::cli
