// SPDX-License-Identifier: Apache-2.0
// What the CPU this process runs on can execute, read once with CPUID and XGETBV (an instruction
// set counts only when the operating system also saves its registers). The kernel sets
// (kernels/kernel_set.h) are chosen from it; `tessel --version` prints it.
#pragma once

#include <string>

namespace tessel {

struct CpuFeatures {
  bool sse42 = false, popcnt = false;
  bool avx = false, avx2 = false, fma = false, f16c = false, bmi1 = false, bmi2 = false,
       lzcnt = false, movbe = false;
  bool avx512f = false, avx512cd = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512_bf16 = false, avx512_vnni = false, avx512_fp16 = false, avx_vnni = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  // Galois-field byte transforms (GFNI): any bit matrix applied to every byte, one instruction
  // (the Q4_K decode rows take nibbles with it).
  bool gfni = false;
  // CPUID leaf 0's vendor ("GenuineIntel", "AuthenticAMD", ...; empty without CPUID). Kernels
  // read it only for tuning that measured differently on the two (a prefetch's cache level),
  // never for what may run.
  std::string vendor;
  // CPUID leaf 1's display family and model (the extended fields folded in as both vendors
  // document: family 0xF adds the extended family, families 6 and 0xF prefix the extended model):
  // Zen 4 is AMD family 0x19, Zen 5 0x1A. Tuning only, as the vendor.
  int family = 0, model = 0;

  // The x86-64 micro-architecture levels (psABI): v3 = AVX2 + FMA + F16C + BMI1/2 + LZCNT + MOVBE,
  // v4 = v3 + AVX-512 F/CD/BW/DQ/VL.
  bool x86_64_v3() const;
  bool x86_64_v4() const;
  // The features above that are present, space separated ("sse4.2 popcnt avx avx2 ...").
  std::string names() const;
};

const CpuFeatures& cpu_features();

}  // namespace tessel
