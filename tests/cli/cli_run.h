// SPDX-License-Identifier: Apache-2.0
// Runs the built `tessel` program (TESSEL_BINARY) the way a user does, capturing its exit code,
// stdout and stderr, in a per-process scratch folder so parallel CTest jobs never share files.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/scratch_dir.h"

namespace tessel::cli_test {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A fresh folder "<prefix><name>_<pid>" under the test temp directory.
inline fs::path scratch(const std::string& prefix, const std::string& name) {
  return tessel::test::scratch_path(prefix + name);
}

// `tessel ARGS`, with stdout and stderr captured through files in `dir`.
inline Outcome run_tessel(const std::string& args, const fs::path& dir) {
  const std::string cmd = std::string(TESSEL_BINARY) + " " + args + " >" +
                          (dir / "stdout").string() + " 2>" + (dir / "stderr").string();
  const int status = std::system(cmd.c_str());
  Outcome r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(dir / "stdout");
  r.err = slurp(dir / "stderr");
  return r;
}

}  // namespace tessel::cli_test
