// SPDX-License-Identifier: Apache-2.0
// Runs every registered kernel case on the CPU backend of every kernel set against the fp64
// reference: each set that was built and that this CPU can execute is tested here, whichever one
// the process would choose (kernels/kernel_set.h); the others are reported as skipped.
#include "op_harness.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <tuple>

#include "tessel/core/cpu_features.h"
#include "tessel/kernels/kernel_set.h"

namespace tessel::testing {
namespace {

using kernels::KernelSet;
using Param = std::tuple<KernelSet, size_t>;

class OpHarness : public ::testing::TestWithParam<Param> {};

bool built(KernelSet set) {
  for (KernelSet s : kernels::built_kernel_sets())
    if (s == set) return true;
  return false;
}

TEST_P(OpHarness, MatchesReference) {
  const auto [set, index] = GetParam();
  const OpCase& c = all_op_cases()[index];
  if (!built(set)) GTEST_SKIP() << kernels::kernel_set_name(set) << " kernel set not built";
  if (!kernels::cpu_runs_kernel_set(set))
    GTEST_SKIP() << "this CPU cannot run the " << kernels::kernel_set_name(set)
                 << " kernel set (it has: " << cpu_features().names() << ")";
  kernels::Backend& backend = kernels::cpu_backend_for(set);
  if (!backend.supports(c.op, c.dtype))
    GTEST_SKIP() << backend.name() << " does not support " << c.name;
  std::string failures = check_op_case(c, backend);
  EXPECT_TRUE(failures.empty()) << kernels::kernel_set_name(set) << " " << c.name << ": "
                                << failures;
}

std::string case_name(const ::testing::TestParamInfo<Param>& info) {
  std::string s = std::string(kernels::kernel_set_name(std::get<0>(info.param))) + "_" +
                  all_op_cases()[std::get<1>(info.param)].name;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

std::vector<size_t> case_indices() {
  std::vector<size_t> v(all_op_cases().size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cpu, OpHarness,
                         ::testing::Combine(::testing::Values(KernelSet::Baseline, KernelSet::Avx2,
                                                              KernelSet::Avx512),
                                            ::testing::ValuesIn(case_indices())),
                         case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OpHarness);

// Which sets run here follows from the CPU's features, the best of them is chosen, and a bad
// name is refused with the names that are accepted.
TEST(KernelSets, ChoiceFollowsTheCpuAndTheVariable) {
  const auto runnable = kernels::runnable_kernel_sets();
  ASSERT_FALSE(runnable.empty());
  EXPECT_EQ(runnable.front(), KernelSet::Baseline);
  EXPECT_TRUE(kernels::cpu_runs_kernel_set(KernelSet::Baseline));
  // The process chose the best runnable set unless the environment forced one.
  if (std::getenv("TESSEL_KERNELS") == nullptr) {
    EXPECT_EQ(kernels::active_kernel_set(), runnable.back());
  }
  EXPECT_EQ(kernels::parse_kernel_set("avx2"), KernelSet::Avx2);
  try {
    kernels::parse_kernel_set("avx9");
    FAIL() << "an unknown set name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("avx9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("baseline, avx2, avx512"), std::string::npos) << e.what();
  }
  // What a set requires matches the x86-64 levels the CPU reports.
  EXPECT_EQ(kernels::cpu_runs_kernel_set(KernelSet::Avx2), cpu_features().x86_64_v3());
  EXPECT_EQ(kernels::cpu_runs_kernel_set(KernelSet::Avx512), cpu_features().x86_64_v4());
}

// The vendor CPUID reports, read in the order the string is stored (EBX, EDX, ECX): one of the
// known vendors, or else the one the kernel reports (/proc/cpuinfo's vendor_id, on Linux; under
// a user-mode emulator that file is the host's while CPUID is the emulated CPU's, hence the list
// first), and `--version`'s description names it.
TEST(KernelSets, VendorIsReadInOrder) {
  const std::string& vendor = cpu_features().vendor;
  ASSERT_EQ(vendor.size(), 12u) << vendor;
  const std::set<std::string> known = {"GenuineIntel", "AuthenticAMD", "HygonGenuine",
                                       "CentaurHauls", "  Shanghai  ", "TCGTCGTCGTCG"};
  if (known.count(vendor) == 0) {
    std::ifstream in("/proc/cpuinfo");
    std::string line, reported;
    while (reported.empty() && std::getline(in, line)) {
      if (line.rfind("vendor_id", 0) != 0) continue;
      const size_t colon = line.find(':');
      if (colon != std::string::npos)
        reported = line.substr(line.find_first_not_of(" \t", colon + 1));
    }
    EXPECT_EQ(vendor, reported) << "an unknown vendor, and not the one the system reports";
  }
  EXPECT_NE(kernels::kernel_set_summary().find("cpu: " + vendor + " "), std::string::npos)
      << kernels::kernel_set_summary();
}

// The display family and model, as the kernel derives them from the same CPUID leaf for
// /proc/cpuinfo ("cpu family", "model"); compared only where that file describes this CPU (its
// vendor is CPUID's: not the host's under a user-mode emulator).
TEST(KernelSets, FamilyAndModelAreTheSystems) {
  const CpuFeatures& f = cpu_features();
  std::ifstream in("/proc/cpuinfo");
  std::string line, vendor;
  int family = -1, model = -1;
  const auto value = [&] { return line.substr(line.find_first_not_of(" \t", line.find(':') + 1)); };
  while (std::getline(in, line) && !line.empty()) {
    if (line.rfind("vendor_id", 0) == 0) vendor = value();
    if (line.rfind("cpu family", 0) == 0) family = std::stoi(value());
    if (line.rfind("model", 0) == 0 && line.rfind("model name", 0) != 0) model = std::stoi(value());
  }
  if (vendor != f.vendor || family < 0 || model < 0)
    GTEST_SKIP() << "/proc/cpuinfo does not describe CPUID's CPU (" << vendor << ")";
  EXPECT_EQ(f.family, family);
  EXPECT_EQ(f.model, model);
  EXPECT_NE(kernels::kernel_set_summary().find(" family " + std::to_string(family) + " model " +
                                               std::to_string(model) + " "),
            std::string::npos)
      << kernels::kernel_set_summary();
}

}  // namespace
}  // namespace tessel::testing
