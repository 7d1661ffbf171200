// SPDX-License-Identifier: Apache-2.0
// Known compiler code-generation defects, compiled by cmake/CodegenCheck.cmake with exactly the
// flags and the instruction-set region (kernels/cpu/isa_region.h) of one kernel set. Each trigger
// stores a constant whose elements are not all equal; Debian 12's GCC 12.2 compiles such 64-bit
// constants into a broadcast of the first element once AVX-512 is enabled ({1, 1, 1, 0} is stored
// as {1, 1, 1, 1}). Exit status: 0 right, 1 wrong (the wrong triggers are printed), 77 this CPU
// cannot run the set's instructions (the check then inspects the assembly instead).
// TESSEL_PLANT_DEFECT adds a trigger written as the miscompiled instruction sequence itself, for
// the check's self-test.
#include <cstdio>

#include "tessel/kernels/cpu/isa_region.h"

TESSEL_ISA_BEGIN

typedef int64_t V4i64 __attribute__((vector_size(32)));
typedef double V4f64 __attribute__((vector_size(32)));

extern "C" {
__attribute__((noinline)) void tessel_trigger_i64_1110(int64_t* p) {
  int64_t a[] = {1, 1, 1, 0};
  std::memcpy(p, a, sizeof a);
}
__attribute__((noinline)) void tessel_trigger_i64_3330(int64_t* p) {
  int64_t a[] = {3, 3, 3, 0};
  std::memcpy(p, a, sizeof a);
}
__attribute__((noinline)) void tessel_trigger_i64_1100(int64_t* p) {
  int64_t a[] = {1, 1, 0, 0};
  std::memcpy(p, a, sizeof a);
}
__attribute__((noinline)) void tessel_trigger_i64_77777770(int64_t* p) {
  int64_t a[] = {7, 7, 7, 7, 7, 7, 7, 0};
  std::memcpy(p, a, sizeof a);
}
__attribute__((noinline)) void tessel_trigger_f64_1110(double* p) {
  double a[] = {1, 1, 1, 0};
  std::memcpy(p, a, sizeof a);
}
__attribute__((noinline)) void tessel_trigger_vec_i64_1110(int64_t* p) {
  V4i64 v = {1, 1, 1, 0};
  std::memcpy(p, &v, sizeof v);
}
__attribute__((noinline)) void tessel_trigger_vec_f64_2220(double* p) {
  V4f64 v = {2.5, 2.5, 2.5, 0};
  std::memcpy(p, &v, sizeof v);
}
#ifdef TESSEL_PLANT_DEFECT
// The defective sequence GCC 12.2 emits for {1, 1, 1, 0}, written by hand (AVX2 suffices to run
// it): broadcast the first element, store four.
__attribute__((noinline)) void tessel_trigger_planted(int64_t* p) {
  static const int64_t one = 1;
  __asm__ volatile(
      "vpbroadcastq %1, %%ymm0\n\t"
      "vmovdqu %%ymm0, %0\n\t"
      "vzeroupper"
      : "=m"(*reinterpret_cast<int64_t(*)[4]>(p))
      : "m"(one)
      : "xmm0");
}
#endif
}

TESSEL_ISA_END

namespace {

bool cpu_runs_level() {
  __builtin_cpu_init();
  if (TESSEL_KERNEL_ISA_LEVEL >= 1 &&
      !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("bmi2")))
    return false;
  if (TESSEL_KERNEL_ISA_LEVEL >= 2 &&
      !(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")))
    return false;
  return true;
}

template <typename T, size_t N>
bool same(const char* name, void (*fn)(T*), const T (&want)[N]) {
  T got[N];
  std::memset(got, 0x5a, sizeof got);
  fn(got);
  if (std::memcmp(got, want, sizeof got) == 0) return true;
  std::printf("wrong: %s stored", name);
  for (T v : got) std::printf(" %g", double(v));
  std::printf("\n");
  return false;
}

}  // namespace

int main() {
  if (!cpu_runs_level()) return 77;
  bool ok = true;
  ok &= same<int64_t, 4>("i64 {1,1,1,0}", tessel_trigger_i64_1110, {1, 1, 1, 0});
  ok &= same<int64_t, 4>("i64 {3,3,3,0}", tessel_trigger_i64_3330, {3, 3, 3, 0});
  ok &= same<int64_t, 4>("i64 {1,1,0,0}", tessel_trigger_i64_1100, {1, 1, 0, 0});
  ok &= same<int64_t, 8>("i64 {7 x7,0}", tessel_trigger_i64_77777770, {7, 7, 7, 7, 7, 7, 7, 0});
  ok &= same<double, 4>("f64 {1,1,1,0}", tessel_trigger_f64_1110, {1, 1, 1, 0});
  ok &= same<int64_t, 4>("vector i64 {1,1,1,0}", tessel_trigger_vec_i64_1110, {1, 1, 1, 0});
  ok &= same<double, 4>("vector f64 {2.5,2.5,2.5,0}", tessel_trigger_vec_f64_2220,
                        {2.5, 2.5, 2.5, 0});
#ifdef TESSEL_PLANT_DEFECT
  ok &= same<int64_t, 4>("planted {1,1,1,0}", tessel_trigger_planted, {1, 1, 1, 0});
#endif
  return ok ? 0 : 1;
}
