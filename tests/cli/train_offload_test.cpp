// SPDX-License-Identifier: Apache-2.0
// `tessel train` with the model's state offloaded to chunks on NVMe, run as a program: a kill -9
// midway through a step of a run that writes to NVMe every step resumes from the last committed
// checkpoint bit for bit (losses, norms and the final model equal an uninterrupted offloaded run's,
// and that model equals the in-memory run's), leaving nothing in the NVMe directory; a file-size
// limit (ulimit -f: a full disk, unprivileged) below the NVMe tier's reservation is one error
// before the first step, and one above it stops the run cleanly with a checkpoint it resumes from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <regex>

#include "train_workspace.h"

namespace tessel::cli_test {
namespace {

// Chunks small enough that the 4-block model spans many, each still holding the largest tensor
// (the byte-level vocabulary's embedding, ~25 KiB).
constexpr size_t kChunk = 32 << 10;

// The memory.* flags: a host tier of 4 chunks, NVMe in `nvme`, and the device tier the smallest
// that works, read from the refusal of a one-chunk device tier (which names it).
std::string offload_flags(const Workspace& s, const fs::path& nvme) {
  fs::create_directories(nvme);
  const std::string base = " --set memory.chunk_size=" + std::to_string(kChunk) +
                           " --set memory.host_budget=" + std::to_string(4 * kChunk) +
                           " --set memory.nvme_dir=" + nvme.string() + " --set memory.prefetch=4";
  const Outcome probe = run_tessel(
      s.common + " --set train.steps=3 --set checkpoint.dir=" + (s.dir / "probe").string() + base +
          " --set memory.device_budget=" + std::to_string(kChunk),
      s.dir);
  const std::string key = "the smallest device budget that works is ";
  const size_t at = probe.err.find(key);
  EXPECT_NE(at, std::string::npos) << probe.err;
  if (at == std::string::npos) return base;
  return base + " --set memory.device_budget=" +
         std::to_string(std::stoull(probe.err.substr(at + key.size())));
}

TEST(TrainOffload, KillDashNineAmidNvmeWritesResumesBitIdentical) {
  const Workspace s = make_workspace("offload_kill", 24, 4);
  const std::string run_a = (s.dir / "a").string(), run_b = (s.dir / "b").string();
  const std::string run_c = (s.dir / "c").string();
  const std::string steps =
      " --set train.steps=30 --set checkpoint.interval=5 --set sample.tokens=0";
  const std::string off_a = offload_flags(s, s.dir / "nvme_a");
  const std::string off_b = offload_flags(s, s.dir / "nvme_b");
  const Outcome a = run_tessel(s.common + steps + off_a + " --set checkpoint.dir=" + run_a, s.dir);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.out.find("memory offload: "), std::string::npos) << a.out;
  EXPECT_TRUE(std::regex_search(
      a.out, std::regex(R"(; evictions \d+ \(clean \d+\); waited \d+\.\d s on NVMe)")))
      << a.out;
  const Outcome killed = run_tessel(
      s.common + steps + off_b + " --set checkpoint.dir=" + run_b + " --set fault.kill_at_step=16",
      s.dir);
  EXPECT_TRUE(killed.exit_code == 137 || killed.exit_code == -1) << killed.exit_code << killed.err;
  EXPECT_EQ(slurp(fs::path(run_b) / "latest"), "step_000015\n");
  // Every step before the kill wrote chunks to NVMe: the kill comes amid that traffic (midway
  // through step 16, after its backward evicted chunks).
  const auto before = steps_of(fs::path(run_b) / "train.jsonl");
  ASSERT_EQ(before.size(), 15u);
  for (const auto& r : before) {
    const auto& o = r["offload"];
    EXPECT_GT(o["nvme_write_bytes"].get<int64_t>(), 0) << r.dump();
    // Every chunk sent to NVMe was written, or dropped because its NVMe copy was current.
    const int64_t evictions = o.at("evictions").get<int64_t>();
    const int64_t clean = o.at("clean_evictions").get<int64_t>();
    EXPECT_LE(clean, evictions) << r.dump();
    // The gradient chunks are freed after every update: nothing held between steps.
    EXPECT_EQ(r.at("grad_bytes").get<int64_t>(), 0) << r.dump();
    // The time the step waited for NVMe is a part of it.
    const double waited = o.at("io_wait_ms").get<double>();
    EXPECT_TRUE(waited >= 0 && waited <= r["step_ms"].get<double>()) << r.dump();
    EXPECT_EQ((evictions - clean) * int64_t(kChunk), o["nvme_write_bytes"].get<int64_t>())
        << r.dump();
  }
  // The forward's and backward's evictions of parameter chunks only read since their last
  // write are clean in some step.
  EXPECT_TRUE(std::any_of(before.begin(), before.end(), [](const auto& r) {
    return r["offload"]["clean_evictions"].template get<int64_t>() > 0;
  }));
  // The tier's swap file is unlinked when it is created: the kill leaves nothing behind.
  EXPECT_TRUE(fs::is_empty(s.dir / "nvme_b"));

  // Resumed with the checkpoint's own configuration: offloaded again, from step 15.
  const Outcome resumed = run_tessel("train --resume " + run_b, s.dir);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resumed at step 15 of 30"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("memory offload: "), std::string::npos) << resumed.out;

  const auto ja = steps_of(fs::path(run_a) / "train.jsonl");
  const auto jb = steps_of(fs::path(run_b) / "train.jsonl");
  ASSERT_EQ(ja.size(), 30u);
  ASSERT_EQ(jb.size(), 30u);
  for (size_t i = 0; i < 30; ++i) {
    ASSERT_EQ(jb[i]["step"], int(i + 1));
    EXPECT_EQ(ja[i]["loss"].get<double>(), jb[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(ja[i]["grad_norm"].get<double>(), jb[i]["grad_norm"].get<double>())
        << "step " << i + 1;
  }
  const fs::path last = fs::path("step_000030");
  for (const char* file : {"model.safetensors", "pieces_00000_of_00001.safetensors"})
    EXPECT_EQ(slurp(fs::path(run_a) / last / file), slurp(fs::path(run_b) / last / file)) << file;

  // The offloaded checkpoint is the in-memory run's, byte for byte.
  const Outcome c = run_tessel(s.common + steps + " --set checkpoint.dir=" + run_c, s.dir);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  for (const char* file : {"model.safetensors", "pieces_00000_of_00001.safetensors"})
    EXPECT_EQ(slurp(fs::path(run_a) / last / file), slurp(fs::path(run_c) / last / file)) << file;
}

// `tessel train ...` under `ulimit -f limit_kib` with SIGXFSZ ignored, so that a write past the
// limit fails with EFBIG as on a full disk.
Outcome run_limited(const Workspace& s, const std::string& args, size_t limit_kib) {
  const std::string cmd = "/bin/bash -c 'ulimit -f " + std::to_string(limit_kib) +
                          "; trap \"\" XFSZ; exec " + TESSEL_BINARY + " " + args + "' >" +
                          (s.dir / "stdout").string() + " 2>" + (s.dir / "stderr").string();
  const int status = std::system(cmd.c_str());
  Outcome r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(s.dir / "stdout");
  r.err = slurp(s.dir / "stderr");
  return r;
}

TEST(TrainOffload, AFullDiskIsOneErrorBeforeTrainingOrACleanStopWithTheCheckpoint) {
  const Workspace s = make_workspace("offload_full", 24, 4);
  const std::string off = offload_flags(s, s.dir / "nvme");
  const fs::path early = s.dir / "early", run = s.dir / "run";
  const std::string flags =
      s.common + off + " --set train.steps=100000 --set eval.interval=0 --set sample.tokens=0" +
      " --set log.interval=100000";

  // Below the NVMe tier's reservation: refused when the tier reserves its file, before step 1.
  const Outcome r = run_limited(s, flags + " --set checkpoint.dir=" + early.string(), 96);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(
      r.err.rfind(
          "tessel: error: memory.nvme_dir " + (s.dir / "nvme").string() + ": cannot reserve ", 0),
      0u)
      << r.err;
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(early / "train.jsonl"));
  EXPECT_TRUE(fs::is_empty(s.dir / "nvme"));

  // Above it (the chunks' file of N chunks of kChunk bytes, as printed at start): the tier's
  // space is reserved, so the first write to fail is the JSONL log's, and the run stops with a
  // checkpoint of its last step.
  const std::smatch m = [&] {
    std::smatch out;
    static const std::regex chunks("memory offload: ([0-9]+) chunks");
    const Outcome probe = run_tessel(
        flags + " --set train.steps=3 --set checkpoint.dir=" + (s.dir / "n").string(), s.dir);
    std::regex_search(probe.out, out, chunks);
    return out;
  }();
  ASSERT_EQ(m.size(), 2u);
  const size_t swap_kib = std::stoull(m[1].str()) * kChunk / 1024;
  const Outcome full =
      run_limited(s, flags + " --set checkpoint.dir=" + run.string(), swap_kib + 128);
  EXPECT_EQ(full.exit_code, 1) << full.out << full.err;
  EXPECT_EQ(full.err.rfind("tessel: error: train: cannot write the JSONL log " +
                               (run / "train.jsonl").string() + " (log.jsonl): File too large",
                           0),
            0u)
      << full.err;
  const auto steps = steps_of(run / "train.jsonl");
  ASSERT_GT(steps.size(), 5u);
  char name[32];
  std::snprintf(name, sizeof name, "step_%06zu", steps.size() + 1);
  EXPECT_NE(full.err.find("the run stopped after step " + std::to_string(steps.size() + 1) +
                          " with the checkpoint " + (run / name).string()),
            std::string::npos)
      << full.err;
  // Room again: the offloaded run continues from that checkpoint.
  const Outcome resumed = run_tessel(
      "train --resume " + run.string() + " --set train.steps=" + std::to_string(steps.size() + 3),
      s.dir);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resumed at step " + std::to_string(steps.size() + 1)),
            std::string::npos)
      << resumed.out;
}

}  // namespace
}  // namespace tessel::cli_test
