// SPDX-License-Identifier: Apache-2.0
// The `tessel` program: parses the command line and dispatches to one subcommand per file.
// Every tessel::Error ends here as one line on stderr and exit code 1.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "tessel/cli/commands.h"
#include "tessel/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"tessel: trains and serves transformer models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tessel ") + TESSEL_VERSION);
  tessel::cli::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tessel::Error& e) {
    std::fprintf(stderr, "tessel: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessel: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
