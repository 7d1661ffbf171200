// SPDX-License-Identifier: Apache-2.0
// Helpers of the memory tests: a scratch directory for the NVMe tier, removed afterwards, and
// byte-exact snapshots of tensors.
#pragma once

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tessel/tensor/tensor.h"

namespace tessel::test {

class ScratchDir {
 public:
  ScratchDir() {
    auto base = std::filesystem::temp_directory_path();
    static int counter = 0;
    path_ = base /
            ("tessel-memory-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline std::vector<unsigned char> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.data_ptr());
  return std::vector<unsigned char>(p, p + t.nbytes());
}

}  // namespace tessel::test
