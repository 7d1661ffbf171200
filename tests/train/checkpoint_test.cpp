// SPDX-License-Identifier: Apache-2.0
// Checkpoint directories: a save appears whole or not at all, a damaged checkpoint is refused with
// a message naming the damage, resume falls back past it, and retention and stale temp cleanup
// delete only what they should. A file's CRC-32C is streamed in blocks (the checksum itself:
// tests/io/crc32c_test.cpp).
#include "tessel/train/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/error_text.h"
#include "tessel/core/error.h"
#include "tessel/io/crc32c.h"

namespace tessel::train {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() /
             ("tessel_ckpt_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string run_of(const TempDir& t) {
  return (t.path / "run").string();
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << p;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = char(rng() & 0xFF);
  return s;
}

// A committed checkpoint with a 13-byte model and a 7-byte optimizer state, both depending on step.
std::string save(const std::string& run, int64_t step, int64_t keep = 0) {
  CheckpointWriter w(run, step);
  write_bytes(fs::path(w.dir()) / "model.safetensors", random_bytes(13, uint32_t(step)));
  write_bytes(fs::path(w.dir()) / "optimizer.safetensors", random_bytes(7, uint32_t(step) + 99));
  return w.commit(keep);
}

std::vector<int64_t> steps(const std::string& run) {
  std::vector<int64_t> out;
  for (const auto& c : list_checkpoints(run)) out.push_back(c.step);
  return out;
}

std::vector<std::string> dot_entries(const std::string& run) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(run)) {
    if (e.path().filename().string().rfind(".step_", 0) == 0) out.push_back(e.path().string());
  }
  return out;
}

using tessel::test::error_of;

TEST(Crc32c, FileIsStreamedAcrossBlockBoundaries) {
  TempDir t("crcfile");
  fs::create_directories(t.path);
  std::string bytes = random_bytes((size_t(4) << 20) * 2 + 13, 33);  // two 4 MiB blocks + 13
  write_bytes(t.path / "f.bin", bytes);
  EXPECT_EQ(file_crc32c((t.path / "f.bin").string()), io::crc32c(bytes.data(), bytes.size()));
  write_bytes(t.path / "empty.bin", "");
  EXPECT_EQ(file_crc32c((t.path / "empty.bin").string()), 0u);
  std::string err = error_of([&] { file_crc32c((t.path / "nope.bin").string()); });
  EXPECT_NE(err.find("nope.bin"), std::string::npos) << err;
  EXPECT_NE(err.find(std::strerror(ENOENT)), std::string::npos) << err;
}

TEST(Checkpoint, DirName) {
  EXPECT_EQ(checkpoint_dir_name(15), "step_000015");
  EXPECT_EQ(checkpoint_dir_name(1234567), "step_1234567");
  EXPECT_THROW(checkpoint_dir_name(-1), Error);
}

TEST(Checkpoint, CommitWritesFilesManifestAndLatest) {
  TempDir t("commit");
  std::string run = run_of(t);
  std::string model = random_bytes(13, 15);
  std::string path;
  {
    CheckpointWriter w(run, 15);
    EXPECT_EQ(fs::path(w.dir()).filename().string(),
              ".step_000015.tmp-" + std::to_string(::getpid()));
    write_bytes(fs::path(w.dir()) / "model.safetensors", model);
    write_bytes(fs::path(w.dir()) / "state.json", "{\"a\":1}");
    path = w.commit(0);
  }
  EXPECT_EQ(path, run + "/step_000015");
  EXPECT_EQ(read_text(fs::path(path) / "model.safetensors"), model);
  EXPECT_EQ(read_text(fs::path(run) / kLatestPointer), "step_000015\n");
  auto m = nlohmann::json::parse(read_text(fs::path(path) / kCommitMarker));
  EXPECT_EQ(m["format"], "tessel-checkpoint");
  EXPECT_EQ(m["version"], 1);
  EXPECT_EQ(m["step"], 15);
  ASSERT_EQ(m["files"].size(), 2u);
  EXPECT_EQ(m["files"]["model.safetensors"]["bytes"], 13);
  char want[9];
  std::snprintf(want, sizeof(want), "%08x", io::crc32c(model.data(), model.size()));
  EXPECT_EQ(m["files"]["model.safetensors"]["crc32c"], want);
  EXPECT_EQ(m["files"]["state.json"]["bytes"], 7);
  EXPECT_TRUE(dot_entries(run).empty());
  EXPECT_NO_THROW(verify_checkpoint(path));
  EXPECT_EQ(resolve_resume(run).step, 15);

  save(run, 33);
  EXPECT_EQ(read_text(fs::path(run) / kLatestPointer), "step_000033\n");
  EXPECT_EQ(steps(run), (std::vector<int64_t>{15, 33}));
}

TEST(Checkpoint, KeepPrunesOldestButNeverTheNewCommit) {
  TempDir t("keep");
  std::string run = run_of(t);
  for (int64_t s : {7, 13, 33}) save(run, s, 2);
  EXPECT_EQ(steps(run), (std::vector<int64_t>{13, 33}));
  save(run, 9, 2);  // older than the newest two, but just written: it stays
  EXPECT_EQ(steps(run), (std::vector<int64_t>{9, 13, 33}));
  EXPECT_EQ(read_text(fs::path(run) / kLatestPointer), "step_000009\n");
  EXPECT_TRUE(dot_entries(run).empty());
  prune_checkpoints(run, 1);  // the newest, and what `latest` names
  EXPECT_EQ(steps(run), (std::vector<int64_t>{9, 33}));
  save(run, 40, 1);
  EXPECT_EQ(steps(run), (std::vector<int64_t>{40}));
}

TEST(Checkpoint, RecommitReplacesTheSameStep) {
  TempDir t("recommit");
  std::string run = run_of(t);
  save(run, 13);
  {
    CheckpointWriter w(run, 13);
    write_bytes(fs::path(w.dir()) / "other.bin", "seven!!");
    w.commit(0);
  }
  std::string dir = run + "/step_000013";
  EXPECT_FALSE(fs::exists(fs::path(dir) / "model.safetensors"));
  EXPECT_EQ(read_text(fs::path(dir) / "other.bin"), "seven!!");
  EXPECT_NO_THROW(verify_checkpoint(dir));
  EXPECT_EQ(steps(run), (std::vector<int64_t>{13}));
  EXPECT_TRUE(dot_entries(run).empty());
}

TEST(Checkpoint, ExceptionBeforeCommitLeavesNothing) {
  TempDir t("abort");
  std::string run = run_of(t);
  save(run, 7);
  try {
    CheckpointWriter w(run, 13);
    write_bytes(fs::path(w.dir()) / "model.safetensors", random_bytes(13, 1));
    throw std::runtime_error("out of memory while saving");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(fs::exists(run + "/step_000013"));
  EXPECT_TRUE(dot_entries(run).empty());
  EXPECT_EQ(read_text(fs::path(run) / kLatestPointer), "step_000007\n");
}

TEST(Checkpoint, SubdirectoryIsRefusedAtCommit) {
  TempDir t("subdir");
  std::string run = run_of(t);
  CheckpointWriter w(run, 7);
  fs::create_directories(fs::path(w.dir()) / "shards");
  std::string err = error_of([&] { w.commit(0); });
  EXPECT_NE(err.find("shards' is a directory"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(run + "/step_000007"));
}

TEST(Checkpoint, DirectoriesWithoutMarkerAreNotListed) {
  TempDir t("list");
  std::string run = run_of(t);
  save(run, 13);
  fs::create_directories(fs::path(run) / ".step_000033.tmp-12345");
  fs::create_directories(fs::path(run) / "step_000021");  // no marker
  fs::create_directories(fs::path(run) / "step_7x");
  write_bytes(fs::path(run) / "step_000007", "a file, not a directory");
  EXPECT_EQ(steps(run), (std::vector<int64_t>{13}));
  EXPECT_TRUE(list_checkpoints((t.path / "absent").string()).empty());
}

class DamagedCheckpoint : public ::testing::Test {
 protected:
  TempDir t{"damaged"};
  std::string run = run_of(t);
  std::string good = save(run, 7);
  std::string bad = save(run, 13);
  std::string where = "checkpoint " + bad + ": ";

  void expect_refused(const std::string& reason) {
    std::string err = error_of([&] { verify_checkpoint(bad); });
    EXPECT_NE(err.find(where + reason), std::string::npos) << err;
    // Resume from the run falls back to the older checkpoint and says why.
    std::vector<std::string> refused;
    CheckpointInfo got = resolve_resume(run, &refused);
    EXPECT_EQ(got.path, good);
    EXPECT_EQ(got.step, 7);
    ASSERT_EQ(refused.size(), 1u);
    EXPECT_EQ(refused[0], bad + ": " + reason);
    // Named explicitly, it is an error: no silent fallback.
    err = error_of([&] { resolve_resume(bad); });
    EXPECT_NE(err.find(where + reason), std::string::npos) << err;
  }
};

TEST_F(DamagedCheckpoint, Truncated) {
  fs::resize_file(fs::path(bad) / "model.safetensors", 5);
  expect_refused("model.safetensors has 5 bytes, the manifest says 13 (truncated or replaced)");
}

TEST_F(DamagedCheckpoint, FlippedByte) {
  fs::path f = fs::path(bad) / "optimizer.safetensors";
  std::string bytes = read_text(f);
  bytes[3] = char(bytes[3] ^ 0x10);
  write_bytes(f, bytes);
  char got[9];
  std::snprintf(got, sizeof(got), "%08x", io::crc32c(bytes.data(), bytes.size()));
  auto m = nlohmann::json::parse(read_text(fs::path(bad) / kCommitMarker));
  std::string want = m["files"]["optimizer.safetensors"]["crc32c"];
  expect_refused(std::string("optimizer.safetensors has CRC-32C ") + got + ", the manifest says " +
                 want + " (corrupted)");
}

TEST_F(DamagedCheckpoint, MissingFile) {
  fs::remove(fs::path(bad) / "optimizer.safetensors");
  expect_refused("manifest lists optimizer.safetensors, which is missing");
}

TEST_F(DamagedCheckpoint, DeletedMarker) {
  fs::remove(fs::path(bad) / kCommitMarker);
  expect_refused("no COMMITTED marker (incomplete: the save did not finish)");
}

TEST_F(DamagedCheckpoint, MalformedManifest) {
  write_bytes(fs::path(bad) / kCommitMarker, "{\"format\": \"tessel-checkpoint\", \"ver");
  expect_refused("COMMITTED is not a valid manifest: malformed JSON");
}

TEST(Checkpoint, ResumeTriesLatestFirst) {
  TempDir t("latest");
  std::string run = run_of(t);
  save(run, 33);
  std::string older = save(run, 13);  // committed last, so `latest` names it over the newer 33
  EXPECT_EQ(resolve_resume(run).path, older);
  EXPECT_EQ(resolve_resume(older + "/").step, 13);
  EXPECT_EQ(resolve_resume(run + "/").step, 13);
  fs::remove(fs::path(run) / kLatestPointer);
  EXPECT_EQ(resolve_resume(run).step, 33);
}

TEST(Checkpoint, ResumeErrorsWhenNothingVerifies) {
  TempDir t("none");
  std::string run = run_of(t);
  std::string err = error_of([&] { resolve_resume(run); });
  EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
  fs::create_directories(run);
  err = error_of([&] { resolve_resume(run); });
  EXPECT_NE(err.find("holds no checkpoints"), std::string::npos) << err;
  std::string only = save(run, 7);
  fs::resize_file(fs::path(only) / "model.safetensors", 0);
  std::vector<std::string> refused;
  err = error_of([&] { resolve_resume(run, &refused); });
  EXPECT_NE(err.find("no checkpoint in"), std::string::npos) << err;
  EXPECT_NE(err.find(only + ": model.safetensors has 0 bytes"), std::string::npos) << err;
  EXPECT_EQ(refused.size(), 1u);
}

// Runs `body` in a child process and returns its exit status (0 = every check in it held).
int in_child(const std::function<int()>& body) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

TEST(Checkpoint, FailedWriteKeepsPreviousCheckpoint) {
  TempDir t("diskfull");
  std::string run = run_of(t);
  std::string prev = save(run, 7);
  // A file-size limit below the manifest's size makes writing COMMITTED fail as a full disk would.
  int rc = in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{64, 64};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 1;
    try {
      CheckpointWriter w(run, 13);
      write_bytes(fs::path(w.dir()) / "model.safetensors", random_bytes(33, 3));
      w.commit(1);
      return 2;
    } catch (const Error& e) {
      std::string what = e.what();
      bool named = what.find(std::string(kCommitMarker)) != std::string::npos &&
                   what.find(std::strerror(EFBIG)) != std::string::npos;
      return named ? 0 : 3;
    }
  });
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(steps(run), (std::vector<int64_t>{7}));
  EXPECT_FALSE(fs::exists(run + "/step_000013"));
  EXPECT_TRUE(dot_entries(run).empty());
  EXPECT_EQ(read_text(fs::path(run) / kLatestPointer), "step_000007\n");
  EXPECT_NO_THROW(verify_checkpoint(prev));
}

TEST(Checkpoint, PruneRemovesTempDirsOfDeadProcessesOnly) {
  TempDir t("stale");
  std::string run = run_of(t);
  save(run, 7);
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);  // reaped: the pid names no process now
  fs::path stale = fs::path(run) / (".step_000013.tmp-" + std::to_string(dead));
  fs::path live = fs::path(run) / (".step_000013.tmp-" + std::to_string(::getppid()));
  fs::create_directories(stale);
  write_bytes(stale / "model.safetensors", "half a model");
  fs::create_directories(live);
  prune_checkpoints(run, 0);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_EQ(steps(run), (std::vector<int64_t>{7}));
}

}  // namespace
}  // namespace tessel::train
