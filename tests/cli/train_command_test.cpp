// SPDX-License-Identifier: Apache-2.0
// `tessel train` run as a program: a kill -9 in the middle of step 16 of 30 followed by --resume
// gives bit-identical losses and gradient norms to an uninterrupted run; SIGTERM saves and exits
// cleanly; a corrupted newest checkpoint is refused and the previous one is resumed; an injected
// NaN is skipped and counted; bad configurations fail with one line naming the key; the
// checkpoint directory is a model `tessel generate` loads.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_run.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/gpt2_config.h"
#include "token_dataset_test_util.h"

extern char** environ;

namespace tessel::cli_test {
namespace {

// A byte-level tokenizer, a dataset prepared from a license text, a tiny model config, and the
// flags every run shares.
struct Workspace {
  fs::path dir;
  std::string common;
};

Workspace make_workspace(const std::string& name) {
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
  mc.n_embd = 24;
  mc.n_layer = 2;
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

std::vector<nlohmann::json> steps_of(const fs::path& jsonl) {
  std::vector<nlohmann::json> out;
  std::ifstream in(jsonl);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("step")) out.push_back(j);
  }
  return out;
}

TEST(TrainCommand, KillDashNineThenResumeIsBitIdentical) {
  const Workspace s = make_workspace("kill");
  const std::string run_a = (s.dir / "a").string(), run_b = (s.dir / "b").string();
  const std::string steps = " --set train.steps=30 --set checkpoint.interval=5";
  const Outcome a = run_tessel(s.common + steps + " --set checkpoint.dir=" + run_a, s.dir);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const Outcome killed = run_tessel(
      s.common + steps + " --set checkpoint.dir=" + run_b + " --set fault.kill_at_step=16", s.dir);
  EXPECT_TRUE(killed.exit_code == 137 || killed.exit_code == -1) << killed.exit_code;
  EXPECT_EQ(slurp(fs::path(run_b) / "latest"), "step_000015\n");
  EXPECT_EQ(steps_of(fs::path(run_b) / "train.jsonl").size(), 15u);
  const Outcome resumed = run_tessel("train --resume " + run_b, s.dir);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resumed at step 15 of 30"), std::string::npos) << resumed.out;

  const auto ja = steps_of(fs::path(run_a) / "train.jsonl");
  const auto jb = steps_of(fs::path(run_b) / "train.jsonl");
  ASSERT_EQ(ja.size(), 30u);
  ASSERT_EQ(jb.size(), 30u);
  for (size_t i = 0; i < 30; ++i) {
    ASSERT_EQ(jb[i]["step"], int(i + 1));
    // JSON doubles round-trip exactly: equal text means equal bits.
    EXPECT_EQ(ja[i]["loss"].get<double>(), jb[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(ja[i]["grad_norm"].get<double>(), jb[i]["grad_norm"].get<double>())
        << "step " << i + 1;
  }
  // The final models are the same bytes.
  EXPECT_EQ(slurp(fs::path(run_a) / "step_000030" / "model.safetensors"),
            slurp(fs::path(run_b) / "step_000030" / "model.safetensors"));
}

TEST(TrainCommand, SigtermSavesACheckpointAndExitsCleanly) {
  const Workspace s = make_workspace("sigterm");
  const std::string run = (s.dir / "run").string();
  const std::string cmd = std::string(TESSEL_BINARY) + " " + s.common +
                          " --set train.steps=100000 --set checkpoint.dir=" + run + " >" +
                          (s.dir / "out").string() + " 2>&1";
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  // exec replaces the shell, so the pid is tessel's own.
  const std::string exec_cmd = "exec " + cmd;
  argv[2] = exec_cmd.c_str();
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  const fs::path jsonl = fs::path(run) / "train.jsonl";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         (!fs::exists(jsonl) || steps_of(jsonl).size() < 3)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string out = slurp(s.dir / "out");
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("stopped by signal 15"), std::string::npos) << out;
  const int64_t done = int64_t(steps_of(jsonl).size());
  EXPECT_GE(done, 3);
  char name[32];
  std::snprintf(name, sizeof name, "step_%06lld\n", (long long)done);
  EXPECT_EQ(slurp(fs::path(run) / "latest"), name);
}

TEST(TrainCommand, CorruptedNewestCheckpointIsRefusedAndThePreviousResumes) {
  const Workspace s = make_workspace("corrupt");
  const fs::path run = s.dir / "run";
  const Outcome first = run_tessel(s.common +
                                       " --set train.steps=10 --set checkpoint.interval=5"
                                       " --set checkpoint.dir=" +
                                       run.string(),
                                   s.dir);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // Flip one byte in the middle of the newest model file.
  const fs::path model = run / "step_000010" / "model.safetensors";
  std::string bytes = slurp(model);
  bytes[bytes.size() / 2] ^= 0x40;
  std::ofstream(model, std::ios::binary | std::ios::trunc) << bytes;

  const Outcome direct = run_tessel("train --resume " + (run / "step_000010").string(), s.dir);
  EXPECT_EQ(direct.exit_code, 1);
  EXPECT_NE(direct.err.find("model.safetensors"), std::string::npos) << direct.err;
  EXPECT_NE(direct.err.find("corrupted"), std::string::npos) << direct.err;

  const Outcome resumed =
      run_tessel("train --resume " + run.string() + " --set train.steps=12", s.dir);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("step_000010"), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.out.find("resumed at step 5 of 12"), std::string::npos) << resumed.out;
}

TEST(TrainCommand, InjectedNanIsSkippedAndCounted) {
  const Workspace s = make_workspace("nan");
  const fs::path run = s.dir / "run";
  const Outcome r = run_tessel(s.common +
                                   " --set train.steps=10 --set fault.nan_at_step=4"
                                   " --set checkpoint.dir=" +
                                   run.string(),
                               s.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto steps = steps_of(run / "train.jsonl");
  ASSERT_EQ(steps.size(), 10u);
  EXPECT_TRUE(steps[3]["skipped"].get<bool>());
  EXPECT_TRUE(steps[3]["grad_norm"].is_null());
  EXPECT_EQ(steps[3]["skipped_total"], 1);
  EXPECT_FALSE(steps[4]["skipped"].get<bool>());
  EXPECT_NE(r.out.find("step 4 skipped"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("skipped 1"), std::string::npos) << r.out;
}

TEST(TrainCommand, BadConfigurationsFailWithOneLine) {
  const Workspace s = make_workspace("bad");
  const std::string run = " --set checkpoint.dir=" + (s.dir / "run").string();
  struct Case {
    std::string flags, expect;
  };
  for (const Case& c :
       {Case{" --set optim.lrr=1", "optim.lrr"}, Case{" --set optim.lr=-1", "optim.lr"},
        Case{" --set train.seq_len=64", "n_positions = 32"},
        Case{" --set train.micro_batch=100000", "train.micro_batch = 100000"},
        Case{" --set data.dir=/nonexistent", "/nonexistent"},
        Case{" --dp 2", "--dp 2 x --tp 1 x --pp 1 = 2 ranks, but the job has 1"},
        Case{" --dp 0", "parallel degrees must be >= 1, got --dp 0"}}) {
    const Outcome r = run_tessel(s.common + run + c.flags, s.dir);
    EXPECT_EQ(r.exit_code, 1) << c.flags;
    EXPECT_NE(r.err.find("tessel: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.flags << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST(TrainCommand, CheckpointIsAModelThatGenerateLoads) {
  const Workspace s = make_workspace("generate");
  const fs::path run = s.dir / "run";
  const Outcome t =
      run_tessel(s.common + " --set train.steps=3 --set checkpoint.dir=" + run.string(), s.dir);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("sample ("), std::string::npos) << t.out;
  const Outcome g =
      run_tessel("generate -m " + (run / "step_000003").string() + " -p \"The \" -n 5", s.dir);
  EXPECT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out.rfind("The ", 0), 0u) << g.out;
}

}  // namespace
}  // namespace tessel::cli_test
