// SPDX-License-Identifier: Apache-2.0
// A gtest fixture with a folder of its own per test: <temp>/<stem>_<pid>_<test name>, emptied
// before the test (created too unless the test makes it) and removed after it, so tests of one
// binary running side by side under ctest never share files and a run leaves nothing behind.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>

namespace tessel::test {

class PerTestDir : public ::testing::Test {
 protected:
  explicit PerTestDir(std::string stem, bool create = true)
      : stem_(std::move(stem)), create_(create) {}

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (stem_ + "_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    if (create_) std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A path inside the test's folder.
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;

 private:
  std::string stem_;
  bool create_;
};

}  // namespace tessel::test
