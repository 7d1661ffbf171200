// SPDX-License-Identifier: Apache-2.0
// The `tessel` program: parses the command line and dispatches to one subcommand per file.
// Every tessel::Error ends here as one line on stderr and exit code 1.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "tessel/cli/commands.h"
#include "tessel/core/error.h"
#include "tessel/core/threads.h"
#include "tessel/dist/launch.h"
#include "tessel/dist/world.h"
#include "tessel/kernels/kernel_set.h"

namespace {

// One line on stderr and a non-zero exit. In a job of several ranks an error seen by one rank ends
// them all at once (MPI_Abort) instead of leaving the others to wait for their deadline.
int fail(const char* what) {
  bool multi_rank = false;
  try {
    multi_rank = tessel::dist::detect_launch().size > 1;
  } catch (const std::exception&) {
  }
  if (multi_rank) tessel::dist::abort_job(1, std::string("tessel: error: ") + what);
  std::fprintf(stderr, "tessel: error: %s\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  tessel::wait_passively_by_default(argv);
  CLI::App app{"tessel: trains and serves transformer models"};
  app.require_subcommand(1);
  app.footer(
      "Models: -m takes a Hugging Face directory (config.json + model.safetensors + tokenizer) or "
      "a .gguf file;\n`tessel quantize -m DIR -o model.gguf --type f16` writes one "
      "(docs/MODELS.md, \"GGUF files\").");
  // The version line and the kernel set this CPU runs (and why), with the CPU's features.
  app.set_version_flag("--version", [] {
    return std::string("tessel ") + TESSEL_VERSION + "\n" + tessel::kernels::kernel_set_summary();
  });
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("tessel: error: ") + e.what() + " (see --help)\n";
  });
  tessel::cli::add_bench_command(app);
  tessel::cli::add_data_command(app);
  tessel::cli::add_init_command(app);
  tessel::cli::add_tokenize_command(app);
  tessel::cli::add_generate_command(app);
  tessel::cli::add_eval_command(app);
  tessel::cli::add_quantize_command(app);
  tessel::cli::add_train_command(app);
  tessel::cli::add_schedule_command(app);
  tessel::cli::add_report_command(app);
  tessel::cli::add_serve_command(app);
  tessel::cli::add_plan_command(app);
  try {
    tessel::kernels::active_kernel_set();  // a bad TESSEL_KERNELS fails here, before any work
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}
