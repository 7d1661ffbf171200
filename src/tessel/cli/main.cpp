// SPDX-License-Identifier: Apache-2.0
// The `tessel` program: parses the command line and dispatches to one subcommand per file.
// Every tessel::Error ends here as one line on stderr and exit code 1.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "tessel/cli/commands.h"
#include "tessel/core/error.h"
#include "tessel/dist/launch.h"
#include "tessel/dist/world.h"

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
  CLI::App app{"tessel: trains and serves transformer models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tessel ") + TESSEL_VERSION);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("tessel: error: ") + e.what() + " (see --help)\n";
  });
  tessel::cli::add_bench_command(app);
  tessel::cli::add_data_command(app);
  tessel::cli::add_init_command(app);
  tessel::cli::add_tokenize_command(app);
  tessel::cli::add_generate_command(app);
  tessel::cli::add_eval_command(app);
  tessel::cli::add_train_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}
