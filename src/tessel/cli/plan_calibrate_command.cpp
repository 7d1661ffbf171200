// SPDX-License-Identifier: Apache-2.0
// `tessel plan calibrate [-o FILE] [--quick] [--disk DIR]`: measures this machine (GEMM rates,
// memory bandwidth, under mpirun the links and all-reduce, with --disk the swap disk) into a
// cluster description the planner reads (docs/PLANNER.md, "Calibration"). Progress goes to stderr,
// the TOML to the file or stdout.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "tessel/cli/commands.h"
#include "tessel/core/error.h"
#include "tessel/dist/world.h"
#include "tessel/plan/calibrate.h"
#include "tessel/train/config.h"

namespace tessel::cli {

namespace {

struct CalibrateArgs {
  std::string output;
  bool quick = false;
  std::string disk;
  std::string disk_size;
};

// Written to a temporary name beside the target, then renamed: a reader never sees half a file.
void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    TESSEL_CHECK(out.good(), "plan calibrate: cannot write ", tmp);
    out << text;
    out.flush();
    TESSEL_CHECK(out.good(), "plan calibrate: failed writing ", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  TESSEL_CHECK(!ec, "plan calibrate: cannot rename ", tmp, " to ", path, ": ", ec.message());
}

void run_calibrate(const CalibrateArgs& args) {
  dist::CommPtr world = dist::init_world();
  plan::CalibrateOptions options;
  options.quick = args.quick;
  options.disk_dir = args.disk;
  if (!args.disk_size.empty())
    options.disk_bytes = int64_t(train::parse_byte_size("--disk-size", args.disk_size));
  options.progress = [](const std::string& line) { std::cerr << line << std::endl; };
  const plan::Cluster cluster = plan::calibrate(*world, options);
  if (world->rank() != 0) return;
  const std::string text = cluster.to_toml();
  plan::Cluster::parse(text, "the calibrated description");  // what is written must read back
  if (args.output.empty()) {
    std::cout << text << std::flush;
    return;
  }
  write_file(args.output, text);
  std::cerr << "tessel plan calibrate: wrote " << args.output << std::endl;
}

}  // namespace

void add_plan_calibrate_command(CLI::App& plan) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = plan.add_subcommand(
      "calibrate",
      "Measure this machine into a cluster description (TOML); under mpirun, the "
      "links and all-reduce too");
  cmd->add_option("-o,--output", args->output, "File to write (default: standard output)");
  cmd->add_flag("--quick", args->quick, "Fewer shapes and sizes, shorter timings");
  cmd->add_option("--disk", args->disk,
                  "Also measure this directory's disk (memory.nvme_dir) into [storage]");
  cmd->add_option("--disk-size", args->disk_size,
                  "The disk test file's size (default 1GiB, 256MiB with --quick)");
  cmd->callback([args] { run_calibrate(*args); });
}

}  // namespace tessel::cli
