// SPDX-License-Identifier: Apache-2.0
// `tessel report RUN_DIR [--out FILE]`: one self-contained HTML page about a training run — its
// curves as inline SVG, a table of the run and, for a pipelined run, the last step's timeline
// (train/metrics/run_report.h). Default output: RUN_DIR/report.html.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>

#include "tessel/cli/commands.h"
#include "tessel/train/metrics/run_report.h"

namespace tessel::cli {

namespace {

struct ReportArgs {
  std::string run_dir, out;
};

}  // namespace

void add_report_command(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Write one self-contained HTML page of a training run's curves and layout");
  cmd->add_option("run_dir", args->run_dir, "The run directory (checkpoint.dir of `tessel train`)")
      ->required();
  cmd->add_option("-o,--out", args->out, "The HTML file to write (default: RUN_DIR/report.html)");
  cmd->callback([args] {
    const std::string path = train::write_run_report(args->run_dir, args->out);
    std::cout << "report: wrote " << path << std::endl;
  });
}

}  // namespace tessel::cli
