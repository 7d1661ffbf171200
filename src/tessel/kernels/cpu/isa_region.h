// SPDX-License-Identifier: Apache-2.0
// The instruction-set region of a kernel translation unit. Every file of cpu/ that holds kernel
// code is compiled once per kernel set (kernel_set.h) with TESSEL_KERNEL_ISA naming the set's
// namespace and TESSEL_KERNEL_ISA_LEVEL its level; the rest of tessel is built for the x86-64-v2
// baseline. Code between TESSEL_ISA_BEGIN and TESSEL_ISA_END is compiled for the set's
// instructions (GCC's target pragma, clang's attribute push); everything included before it keeps
// the baseline. That is why this header includes the standard and tessel headers the kernels use
// first: an inline function of a shared header compiled inside the region would be a second,
// AVX-512 definition of a symbol the linker may pick for baseline callers. The rule is checked
// on the built objects (tests/kernels/isa_isolation.py). The same pattern as PyTorch's per-CPU-
// capability ATen kernels, with the region kept to tessel's own code.
#pragma once

#if !defined(TESSEL_KERNEL_ISA) || !defined(TESSEL_KERNEL_ISA_LEVEL)
#error "kernels/cpu kernel files are compiled per kernel set: TESSEL_KERNEL_ISA must be defined"
#endif

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <numeric>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessel/core/dtype.h"
#include "tessel/core/error.h"
#include "tessel/core/threads.h"
#include "tessel/kernels/backend.h"
#include "tessel/kernels/kernel_set.h"
#include "tessel/tensor/tensor.h"

// Level 1 adds x86-64-v3's instructions (AVX2, FMA, F16C, BMI), level 2 x86-64-v4's (AVX-512 F,
// CD, BW, DQ, VL). The strings are spelled out: _Pragma does not expand macros inside its operand.
// _Pragma takes one string literal, which the formatter would split.
// clang-format off
#if TESSEL_KERNEL_ISA_LEVEL == 0
#define TESSEL_ISA_BEGIN
#define TESSEL_ISA_END
#elif defined(__clang__)
#if TESSEL_KERNEL_ISA_LEVEL == 1
#define TESSEL_ISA_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,popcnt\"))), apply_to = function)")
#else
#define TESSEL_ISA_BEGIN _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,popcnt,avx512f,avx512cd,avx512bw,avx512dq,avx512vl\"))), apply_to = function)")
#endif
#define TESSEL_ISA_END _Pragma("clang attribute pop")
#else
#if TESSEL_KERNEL_ISA_LEVEL == 1
#define TESSEL_ISA_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,popcnt\")")
#else
#define TESSEL_ISA_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,popcnt,avx512f,avx512cd,avx512bw,avx512dq,avx512vl\")")
#endif
#define TESSEL_ISA_END _Pragma("GCC pop_options")
#endif
// clang-format on

#if TESSEL_KERNEL_ISA_LEVEL < 0 || TESSEL_KERNEL_ISA_LEVEL > 2
#error "TESSEL_KERNEL_ISA_LEVEL must be 0 (baseline), 1 (avx2) or 2 (avx512)"
#endif
