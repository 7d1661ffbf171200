// SPDX-License-Identifier: Apache-2.0
// Test helpers shared by the optimizer tests that compare with PyTorch: a per-process scratch
// directory, raw little-endian f32/f64 files (the format torch_optim_reference.py reads and
// writes), running that script, and the relative error used for the comparisons.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "tessel/tensor/tensor.h"

#ifndef TESSEL_TORCH_PYTHON
#error "TESSEL_TORCH_PYTHON (an interpreter with PyTorch) must be defined by the build"
#endif
#ifndef TESSEL_SOURCE_DIR
#error "TESSEL_SOURCE_DIR must be defined by the build"
#endif

namespace tessel::train::testing {

namespace fs = std::filesystem;

// A fresh directory named after the test and the process (ctest runs tests in parallel processes).
inline fs::path scratch_dir(const std::string& tag) {
  return tessel::test::scratch_path("tessel_" + tag);
}

inline void write_f32(const fs::path& path, const Tensor& t) {
  std::vector<float> v = t.to_vector<float>();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

template <typename T>
std::vector<T> read_raw(const fs::path& path, size_t count) {
  std::vector<T> v(count);
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(count * sizeof(T)));
  EXPECT_EQ(size_t(in.gcount()), count * sizeof(T)) << "short file " << path;
  return v;
}

inline std::string json_shape(const Shape& s) {
  std::string out = "[";
  for (int i = 0; i < s.ndim(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Runs torch_optim_reference.py on `dir` (whose index.json the caller wrote). Any failure,
// including a missing torch, is a test failure with the script's output: the comparison with
// PyTorch is the point of these tests, so it never silently skips.
inline void run_torch_reference(const fs::path& dir) {
  const std::string python = TESSEL_TORCH_PYTHON;
  const fs::path log = dir / "python.log";
  std::string probe = python + " -c 'import torch' > '" + log.string() + "' 2>&1";
  ASSERT_EQ(std::system(probe.c_str()), 0)
      << python << " cannot import torch; the optimizer tests compare with PyTorch and need it "
      << "(Debian package python3-torch, installed by scripts/setup).";
  std::string cmd = python + " '" + TESSEL_SOURCE_DIR + "/tests/train/torch_optim_reference.py' '" +
                    dir.string() + "' > '" + log.string() + "' 2>&1";
  int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    FAIL() << "torch_optim_reference.py failed (status " << rc << "):\n" << text.str();
  }
}

// max |a - b| / max |b|: the error of a relative to the reference b, scaled by b's magnitude.
template <typename A, typename B>
double max_rel_err(const std::vector<A>& a, const std::vector<B>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double d = std::abs(double(a[i]) - double(b[i]));
    if (std::isnan(d)) return d;  // std::max would drop a NaN
    diff = std::max(diff, d);
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / std::max(scale, 1e-300);  // 1e-300: only a guard against dividing by zero
}

}  // namespace tessel::train::testing
