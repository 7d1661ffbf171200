// SPDX-License-Identifier: Apache-2.0
// `tessel train` run as a program: a kill -9 in the middle of step 16 of 30 followed by --resume
// gives bit-identical losses and gradient norms to an uninterrupted run; SIGTERM saves and exits
// cleanly; a corrupted newest checkpoint is refused and the previous one is resumed; an injected
// NaN is skipped and counted; bad configurations fail with one line naming the key; the
// checkpoint directory is a model `tessel generate` loads.
#include <gtest/gtest.h>

#include <cstdlib>

#include "train_workspace.h"

namespace tessel::cli_test {
namespace {

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
  // The killed run never released its lock: the kernel did, and the resumed run names the
  // process that left it.
  EXPECT_NE(resumed.out.find("run.lock was left by pid "), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("ended without releasing it"), std::string::npos) << resumed.out;
  EXPECT_EQ(slurp(fs::path(run_b) / "run.lock"), "");  // released cleanly this time

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
  const pid_t pid = spawn_shell(std::string(TESSEL_BINARY) + " " + s.common +
                                    " --set train.steps=100000 --set checkpoint.dir=" + run,
                                s.dir / "out");
  const fs::path jsonl = fs::path(run) / "train.jsonl";
  EXPECT_TRUE(wait_for([&] { return has_steps(jsonl, 3); }));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string out = slurp(s.dir / "out");
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("stopped by signal 15 (SIGTERM) after step "), std::string::npos) << out;
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
  // Every step, skipped or not, did work: its CPU time is recorded beside its wall time.
  for (const auto& step : steps) {
    ASSERT_TRUE(step.contains("step_cpu_ms")) << step.dump();
    EXPECT_GT(step["step_cpu_ms"].get<double>(), 0.0) << step.dump();
  }
}

TEST(TrainCommand, BadConfigurationsFailWithOneLine) {
  const Workspace s = make_workspace("bad");
  const std::string run = " --set checkpoint.dir=" + (s.dir / "run").string();
  struct Case {
    std::string flags, expect;
  };
  for (const Case& c :
       {Case{" --set optim.lrr=1", "optim.lrr"}, Case{" --set optim.lr=-1", "optim.lr"},
        Case{" --set train.seq_len=64", "max_positions = 32"},
        Case{" --set train.micro_batch=100000", "train.micro_batch = 100000"},
        Case{" --set data.dir=/nonexistent", "/nonexistent"},
        Case{" --dp 2", "--dp 2 x --tp 1 x --pp 1 = 2 ranks, but the job has 1"},
        Case{" --dp 0", "parallel degrees must be >= 1, got --dp 0"},
        Case{" --set train.device=tpu", "train.device = 'tpu' expected cpu, cuda or cuda:N"}}) {
    const Outcome r = run_tessel(s.common + run + c.flags, s.dir);
    EXPECT_EQ(r.exit_code, 1) << c.flags;
    EXPECT_NE(r.err.find("tessel: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.flags << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// TESSEL_PROFILE=1: the whole run's kernel calls, largest first, on stderr at exit.
TEST(TrainCommand, ProfileVariablePrintsTheKernelTableAtExit) {
  const Workspace s = make_workspace("profile");
  ::setenv("TESSEL_PROFILE", "1", 1);
  const Outcome r = run_tessel(
      s.common + " --set train.steps=3 --set checkpoint.dir=" + (s.dir / "run").string(), s.dir);
  ::unsetenv("TESSEL_PROFILE");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t table = r.err.find("tessel: TESSEL_PROFILE: ");
  ASSERT_NE(table, std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" calls  gemm.", table), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" calls  layer_norm", table), std::string::npos) << r.err;
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
