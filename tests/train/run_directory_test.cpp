// SPDX-License-Identifier: Apache-2.0
// The run directory's lock and space checks: a second holder is refused with the first's pid and
// host, a released lock is free again, a lock left in the file by a process that no longer
// exists is taken over and named, and a checkpoint larger than the free space is refused with
// both numbers. The JSONL log never keeps a torn record (a file-size limit makes writes fail).
#include "tessel/train/checkpoint/run_directory.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/scratch_dir.h"
#include "tessel/core/error.h"
#include "tessel/train/metrics/metrics.h"

namespace tessel::train {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  return tessel::test::scratch_path("tessel_run_dir_" + name, /*create=*/false);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

TEST(RunLock, ASecondHolderIsRefusedNamingTheFirstAndAReleasedLockIsFree) {
  const fs::path dir = temp_dir("second");
  {
    RunLock first(dir.string());  // creates the directory
    EXPECT_TRUE(fs::is_directory(dir));
    EXPECT_EQ(first.reclaimed_from(), "");
    EXPECT_EQ(
        run_lock_holder(dir.string())
            .rfind("pid " + std::to_string(::getpid()) + " on host " + host_name() + " (started ",
                   0),
        0u)
        << run_lock_holder(dir.string());
    try {
      RunLock second(dir.string());
      FAIL() << "a second lock on one directory";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("the run directory '" + dir.string() + "' is in use by pid " +
                       std::to_string(::getpid()) + " on host " + host_name()),
                std::string::npos)
          << m;
    }
  }
  EXPECT_EQ(slurp(dir / kRunLockFile), "");  // released: emptied, not deleted
  RunLock again(dir.string());
  EXPECT_EQ(again.reclaimed_from(), "");
}

TEST(RunLock, ALockLeftByAProcessThatEndedIsTakenOverAndNamed) {
  const fs::path dir = temp_dir("stale");
  // A child takes the lock and dies without releasing it (as kill -9 would leave it).
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      RunLock held(dir.string());
      std::raise(SIGKILL);
    } catch (...) {
    }
    _exit(3);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  RunLock taken(dir.string());
  EXPECT_EQ(taken.reclaimed_from().rfind(
                "pid " + std::to_string(child) + " on host " + host_name() + " (started ", 0),
            0u)
      << taken.reclaimed_from();
}

TEST(RunLock, AnUncreatableDirectoryNamesTheReason) {
  const fs::path dir = temp_dir("file");
  fs::create_directories(dir);
  std::ofstream(dir / "file") << "x";
  try {
    RunLock lock((dir / "file" / "run").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create the run directory '" +
                                         (dir / "file" / "run").string() +
                                         "' (checkpoint.dir): Not a directory"),
              std::string::npos)
        << e.what();
  }
}

TEST(FreeSpace, ACheckpointLargerThanTheFreeSpaceIsRefusedWithBothNumbers) {
  const fs::path dir = temp_dir("space");
  fs::create_directories(dir);
  const uint64_t available = free_bytes(dir.string());
  EXPECT_GT(available, 0u);
  EXPECT_NO_THROW(check_free_space(dir.string(), 1, "one byte"));
  const uint64_t needed = available + (uint64_t(1) << 40);
  try {
    check_free_space(dir.string(), needed, "the next checkpoint (16 bytes per parameter)");
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the run directory '" + dir.string() + "' has "), std::string::npos) << m;
    EXPECT_NE(m.find("but the next checkpoint (16 bytes per parameter) needs about "),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("(" + std::to_string(needed) + " bytes)"), std::string::npos) << m;
  }
}

// Under a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored: write() fails with EFBIG), in a child so
// the limit does not reach the test runner.
TEST(JsonlLog, AFailedWriteThrowsNamingTheFileAndLeavesOnlyWholeRecords) {
  const fs::path dir = temp_dir("jsonl");
  fs::create_directories(dir);
  const fs::path path = dir / "train.jsonl";
  auto record = [](int step) {
    return "{\"step\": " + std::to_string(step) + ", \"pad\": \"" + std::string(90, 'x') + "\"}";
  };
  constexpr size_t kLimit = 1000;
  const size_t bytes = record(1).size() + 1;  // the same for steps 1..9
  const size_t whole = kLimit / bytes * bytes;
  ASSERT_LT(kLimit / bytes, 9u);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{kLimit, kLimit};
    setrlimit(RLIMIT_FSIZE, &limit);
    JsonlLog log(path.string(), -1);
    try {
      for (int step = 1; step <= 9; ++step) log.write(record(step));
    } catch (const Error& e) {
      const std::string m = e.what();
      _exit(m.find("cannot write the JSONL log " + path.string() +
                   " (log.jsonl): File too large after " + std::to_string(whole) + " bytes") !=
                    std::string::npos
                ? 0
                : 2);
    }
    _exit(1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no error; 2: the wrong message";
  // Whole records only: the one that did not fit was cut back off.
  const std::string text = slurp(path);
  EXPECT_EQ(text.size(), whole);
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
}  // namespace tessel::train
