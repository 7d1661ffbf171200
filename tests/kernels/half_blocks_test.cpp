// SPDX-License-Identifier: Apache-2.0
// The 16-bit GEMM and cross-entropy kernels convert their large operands a block of rows at a
// time. The harness cases are small enough to fit one block, so here every 16-bit case of those
// kernels runs again with blocks of a few hundred bytes (a few rows, odd tails) against the fp64
// reference.
#include <gtest/gtest.h>

#include "op_harness.h"
#include "tessel/core/threads.h"
#include "tessel/kernels/cpu/half_block_size.h"

namespace tessel::testing {
namespace {

TEST(HalfKernels, BlockedConversionMatchesReference) {
  kernels::Backend& backend = kernels::cpu_backend();
  // Hundreds of tiny blocks: one thread, as a parallel region per block would cost more than it.
  const int threads = num_threads();
  set_num_threads(1);
  int checked = 0;
  for (int64_t bytes : {int64_t(300), int64_t(4000)}) {
    const int64_t previous = kernels::cpu::set_half_block_bytes(bytes);
    for (const OpCase& c : all_op_cases()) {
      if (c.dtype != DType::BF16 && c.dtype != DType::F16) continue;
      if (c.op != kernels::Op::Gemm && c.op != kernels::Op::CrossEntropy &&
          c.op != kernels::Op::CrossEntropyBackward)
        continue;
      // Small products only: at a few rows per block a 257^3 one is hundreds of GEMM calls.
      if (c.op == kernels::Op::Gemm && c.flops > 1e6) continue;
      // Vocabulary-wide rows are larger than any block here: one row per block.
      EXPECT_EQ(check_op_case(c, backend), "") << c.name << " in blocks of " << bytes << " bytes";
      ++checked;
    }
    kernels::cpu::set_half_block_bytes(previous);
  }
  set_num_threads(threads);
  EXPECT_GT(checked, 30);
}

}  // namespace
}  // namespace tessel::testing
