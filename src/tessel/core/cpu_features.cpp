// SPDX-License-Identifier: Apache-2.0
// CPUID leaves 0 (the vendor), 1, 7 (sub-leaves 0 and 1) and 0x80000001; XCR0 through XGETBV.
// Bit positions from Intel's SDM volume 2A (CPUID) and AMD's APM volume 3.
#include "tessel/core/cpu_features.h"

#include <cpuid.h>

#include <cstdint>
#include <cstring>
#include <utility>

namespace tessel {

namespace {

bool bit(uint32_t reg, int n) {
  return (reg >> n) & 1u;
}

uint64_t xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

CpuFeatures probe() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 1) return f;
  __cpuid_count(0, 0, a, b, c, d);
  // The vendor string is EBX, EDX, ECX in that order.
  char vendor[12];
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  f.vendor.assign(vendor, 12);
  __cpuid_count(1, 0, a, b, c, d);
  const int base_family = int((a >> 8) & 0xf), base_model = int((a >> 4) & 0xf);
  f.family = base_family == 0xf ? base_family + int((a >> 20) & 0xff) : base_family;
  f.model = base_family == 0x6 || base_family == 0xf ? (int((a >> 16) & 0xf) << 4) + base_model
                                                     : base_model;
  f.sse42 = bit(c, 20);
  f.popcnt = bit(c, 23);
  f.movbe = bit(c, 22);
  const bool osxsave = bit(c, 27);
  // The OS must save the YMM state (XCR0 bits 1, 2) for AVX and the opmask and ZMM state
  // (bits 5, 6, 7) for AVX-512; a CPU that has them but an OS that does not cannot use them.
  const uint64_t xcr = osxsave ? xcr0() : 0;
  const bool os_avx = (xcr & 0x6) == 0x6;
  const bool os_avx512 = os_avx && (xcr & 0xe0) == 0xe0;
  const bool os_amx = (xcr & 0x60000) == 0x60000;
  f.avx = os_avx && bit(c, 28);
  f.fma = f.avx && bit(c, 12);
  f.f16c = f.avx && bit(c, 29);
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned sub_leaves = a;
    f.bmi1 = bit(b, 3);
    f.bmi2 = bit(b, 8);
    f.avx2 = f.avx && bit(b, 5);
    f.avx512f = os_avx512 && bit(b, 16);
    f.avx512dq = f.avx512f && bit(b, 17);
    f.avx512cd = f.avx512f && bit(b, 28);
    f.avx512bw = f.avx512f && bit(b, 30);
    f.avx512vl = f.avx512f && bit(b, 31);
    f.avx512_vnni = f.avx512f && bit(c, 11);
    f.gfni = bit(c, 8);
    f.avx512_fp16 = f.avx512f && bit(d, 23);
    f.amx_bf16 = os_amx && bit(d, 22);
    f.amx_tile = os_amx && bit(d, 24);
    f.amx_int8 = os_amx && bit(d, 25);
    if (sub_leaves >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      f.avx_vnni = f.avx && bit(a, 4);
      f.avx512_bf16 = f.avx512f && bit(a, 5);
    }
  }
  if (__get_cpuid_max(0x80000000u, nullptr) >= 0x80000001u) {
    __cpuid_count(0x80000001u, 0, a, b, c, d);
    f.lzcnt = bit(c, 5);
  }
  return f;
}

}  // namespace

bool CpuFeatures::x86_64_v3() const {
  return sse42 && popcnt && avx2 && fma && f16c && bmi1 && bmi2 && lzcnt && movbe;
}

bool CpuFeatures::x86_64_v4() const {
  return x86_64_v3() && avx512f && avx512cd && avx512bw && avx512dq && avx512vl;
}

std::string CpuFeatures::names() const {
  const std::pair<bool, const char*> all[] = {{sse42, "sse4.2"},
                                              {popcnt, "popcnt"},
                                              {avx, "avx"},
                                              {avx2, "avx2"},
                                              {fma, "fma"},
                                              {f16c, "f16c"},
                                              {bmi1, "bmi1"},
                                              {bmi2, "bmi2"},
                                              {lzcnt, "lzcnt"},
                                              {movbe, "movbe"},
                                              {avx512f, "avx512f"},
                                              {avx512cd, "avx512cd"},
                                              {avx512bw, "avx512bw"},
                                              {avx512dq, "avx512dq"},
                                              {avx512vl, "avx512vl"},
                                              {avx512_bf16, "avx512_bf16"},
                                              {avx512_vnni, "avx512_vnni"},
                                              {avx512_fp16, "avx512_fp16"},
                                              {avx_vnni, "avx_vnni"},
                                              {amx_tile, "amx_tile"},
                                              {amx_bf16, "amx_bf16"},
                                              {amx_int8, "amx_int8"},
                                              {gfni, "gfni"}};
  std::string out;
  for (const auto& [has, name] : all) {
    if (!has) continue;
    if (!out.empty()) out += ' ';
    out += name;
  }
  return out.empty() ? "none beyond x86-64" : out;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = probe();
  return features;
}

}  // namespace tessel
