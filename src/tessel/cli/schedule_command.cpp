// SPDX-License-Identifier: Apache-2.0
// `tessel schedule`: generate a pipeline schedule (GPipe, 1F1B, interleaved), validate it, and
// print its simulated timeline, bubble fraction and peak activations per rank; optionally each
// rank's action list and a Chrome trace to open in ui.perfetto.dev.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "tessel/cli/commands.h"
#include "tessel/core/error.h"
#include "tessel/parallel/pipeline/generators.h"
#include "tessel/parallel/pipeline/printer.h"
#include "tessel/parallel/pipeline/simulator.h"

namespace tessel::cli {

namespace {

namespace pp = tessel::parallel::pipeline;

struct ScheduleArgs {
  std::string kind = "1f1b";
  int ranks = 4;
  int microbatches = 8;
  int virtual_stages = 2;
  pp::Costs costs;
  double unit = 1.0;
  bool actions = false;
  std::string trace;
};

void run_schedule(const ScheduleArgs& args) {
  const pp::Schedule schedule =
      pp::make_schedule(args.kind, args.ranks, args.microbatches, args.virtual_stages);
  const pp::Simulation sim = pp::simulate(schedule, args.costs);
  if (args.actions) {
    for (size_t r = 0; r < schedule.actions.size(); ++r) {
      std::cout << "rank " << r << ":";
      for (const pp::Action& a : schedule.actions[r]) {
        std::cout << "  " << pp::to_string(a);
      }
      std::cout << "\n";
    }
  }
  TESSEL_CHECK(sim.ok(), "schedule: the generated schedule is invalid:\n", sim.error_text());
  std::cout << pp::text_timeline(schedule, sim, args.unit);
  std::cout << "makespan " << sim.makespan << ", bubble fraction " << sim.bubble_fraction
            << ", peak activations per rank:";
  for (int peak : sim.peak_in_flight) {
    std::cout << " " << peak;
  }
  std::cout << std::endl;
  if (!args.trace.empty()) {
    std::ofstream out(args.trace);
    TESSEL_CHECK(out.good(), "schedule: cannot write ", args.trace);
    out << pp::chrome_trace(schedule, sim);
    TESSEL_CHECK(out.good(), "schedule: failed writing ", args.trace);
  }
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto args = std::make_shared<ScheduleArgs>();
  CLI::App* cmd = app.add_subcommand(
      "schedule", "Validate a pipeline schedule and print its simulated timeline");
  cmd->add_option("kind", args->kind, "gpipe, 1f1b or interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}))
      ->capture_default_str();
  cmd->add_option("-p,--ranks", args->ranks, "Pipeline ranks")->capture_default_str();
  cmd->add_option("-m,--microbatches", args->microbatches, "Micro-batches per step")
      ->capture_default_str();
  cmd->add_option("-v,--virtual-stages", args->virtual_stages,
                  "Model chunks per rank (interleaved only)")
      ->capture_default_str();
  cmd->add_option("--forward", args->costs.forward, "Time of one forward of one stage")
      ->capture_default_str();
  cmd->add_option("--backward", args->costs.backward, "Time of one backward of one stage")
      ->capture_default_str();
  cmd->add_option("--comm", args->costs.comm, "Time of one send")->capture_default_str();
  cmd->add_option("--unit", args->unit, "Time per character cell of the timeline")
      ->capture_default_str();
  cmd->add_flag("--actions", args->actions, "Also print each rank's action list");
  cmd->add_option("--trace", args->trace, "Write a Chrome trace (JSON) to this file");
  cmd->callback([args] { run_schedule(*args); });
}

}  // namespace tessel::cli
