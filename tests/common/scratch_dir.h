// SPDX-License-Identifier: Apache-2.0
// Scratch directories for tests, removed when the test process exits. ctest runs each test in its
// own process (gtest_discover_tests), so "at exit" is "after this test". Without this, every run
// of the suite left thousands of folders (some gigabytes each) in the temp directory. Set
// TESSEL_KEEP_TEST_DIRS=1 to keep them for a post-mortem.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace tessel::test {

namespace detail {

class ScratchRegistry {
 public:
  void add(const std::filesystem::path& p) {
    std::lock_guard<std::mutex> lock(mutex_);
    paths_.push_back(p);
  }
  ~ScratchRegistry() {
    // Children of the test (fork without exec) share this object; only the owner removes.
    if (::getpid() != owner_ || std::getenv("TESSEL_KEEP_TEST_DIRS") != nullptr) return;
    for (const auto& p : paths_) {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);  // best effort: a test may have made it unreadable
    }
  }

 private:
  std::mutex mutex_;
  std::vector<std::filesystem::path> paths_;
  pid_t owner_ = ::getpid();
};

inline ScratchRegistry& scratch_registry() {
  static ScratchRegistry registry;
  return registry;
}

}  // namespace detail

// Removes `path` (file or folder) when the process exits.
inline void remove_at_exit(const std::filesystem::path& path) {
  detail::scratch_registry().add(path);
}

// The path "<temp>/<stem>_<pid>" (removed if it exists), registered for removal at exit; the
// folder itself is created when `create` is true.
inline std::filesystem::path scratch_path(const std::string& stem, bool create = true) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() / (stem + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  if (create) std::filesystem::create_directories(p);
  remove_at_exit(p);
  return p;
}

}  // namespace tessel::test
