// SPDX-License-Identifier: Apache-2.0
// What the `tessel train` program tests share: a workspace (a byte-level tokenizer, a dataset
// prepared from a license text, a tiny model config and the flags every run uses), the step
// records of a JSONL log, and a run started in the background whose pid is tessel's own.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli_run.h"
#include "common/token_dataset_test_util.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/gpt2/gpt2_config.h"

extern char** environ;

namespace tessel::cli_test {

struct Workspace {
  fs::path dir;
  std::string common;
};

// `n_embd` x `n_layer`: the model's size, for tests that need its files small.
inline Workspace make_workspace(const std::string& name, int64_t n_embd = 24, int64_t n_layer = 2) {
  Workspace s;
  s.dir = scratch("tessel_train_cli_", name);
  const std::string tok = io::write_small_tokenizer(s.dir / "tok");
  const Outcome prep = run_tessel(
      "data prepare --tokenizer " + tok + " --input /usr/share/common-licenses/GPL-3 --out " +
          (s.dir / "data").string() + " --val-fraction 0.1 --split blank",
      s.dir);
  EXPECT_EQ(prep.exit_code, 0) << prep.err;
  models::GPT2Config mc;
  mc.vocab_size = io::Tokenizer::load(tok).vocab_size();
  mc.n_positions = 32;
  mc.n_embd = n_embd;
  mc.n_layer = n_layer;
  mc.n_head = 2;
  mc.resid_pdrop = mc.embd_pdrop = 0.1;  // dropout on: its generator must resume exactly
  mc.attn_pdrop = 0.0;
  std::ofstream(s.dir / "config.json") << mc.to_json();
  s.common = "train --set model.config=" + (s.dir / "config.json").string() +
             " --set data.dir=" + (s.dir / "data").string() +
             " --set train.micro_batch=4 --set train.seq_len=16 --set train.threads=2"
             " --set optim.warmup_steps=3 --set optim.lr=3e-3 --set log.interval=5"
             " --set eval.interval=10 --set eval.batches=2 --set sample.tokens=8"
             " --set machine.peak_gflops=100";
  return s;
}

// The step records of a JSONL log (every line must parse: a torn record fails the test).
inline std::vector<nlohmann::json> steps_of(const fs::path& jsonl) {
  std::vector<nlohmann::json> out;
  std::ifstream in(jsonl);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("step")) out.push_back(j);
  }
  return out;
}

// `command` (a shell command line) started in the background through `exec`, so the pid is the
// command's own; its output goes to `out`.
inline pid_t spawn_shell(const std::string& command, const fs::path& out) {
  const std::string exec_cmd = "exec " + command + " >" + out.string() + " 2>&1";
  const char* argv[] = {"/bin/sh", "-c", exec_cmd.c_str(), nullptr};
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  return pid;
}

// Polls `ready` every 20 ms for up to a minute (a generous bound on a busy machine; nothing is
// timed). Returns whether it became true.
inline bool wait_for(const std::function<bool()>& ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// The JSONL at `jsonl` holds at least `n` step records (a torn last line counts as not yet).
inline bool has_steps(const fs::path& jsonl, size_t n) {
  try {
    return fs::exists(jsonl) && steps_of(jsonl).size() >= n;
  } catch (const std::exception&) {
    return false;
  }
}

// waitpid: the exit status, or 128 + the signal that ended it.
inline int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace tessel::cli_test
