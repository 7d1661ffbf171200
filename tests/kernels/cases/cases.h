// SPDX-License-Identifier: Apache-2.0
// Declarations of the kernel case families (one function per file in this folder).
#pragma once

#include "kernels/op_harness.h"

namespace tessel::testing {

// FAMILY DECLARATIONS
void add_elementwise_cases(std::vector<OpCase>& v);
void add_reduce_cases(std::vector<OpCase>& v);
void add_softmax_cases(std::vector<OpCase>& v);
void add_norm_cases(std::vector<OpCase>& v);
void add_embedding_cases(std::vector<OpCase>& v);
void add_cross_entropy_cases(std::vector<OpCase>& v);
void add_optimizer_cases(std::vector<OpCase>& v);
void add_dropout_cases(std::vector<OpCase>& v);
void add_gemm_cases(std::vector<OpCase>& v);
void add_attention_cases(std::vector<OpCase>& v);
void add_rope_cases(std::vector<OpCase>& v);
void add_square_sum_cases(std::vector<OpCase>& v);
void add_quant_matmul_cases(std::vector<OpCase>& v);
void add_paged_attention_cases(std::vector<OpCase>& v);
void add_grouped_gemm_cases(std::vector<OpCase>& v);

}  // namespace tessel::testing
