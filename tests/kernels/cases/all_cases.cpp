// SPDX-License-Identifier: Apache-2.0
// The list of kernel case families. Each family file in this folder adds its cases here.
#include "cases.h"

namespace tessel::testing {

const std::vector<OpCase>& all_op_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> v;
    // FAMILIES (one line per family file)
    add_elementwise_cases(v);
    add_reduce_cases(v);
    add_softmax_cases(v);
    add_norm_cases(v);
    add_embedding_cases(v);
    add_cross_entropy_cases(v);
    add_optimizer_cases(v);
    add_dropout_cases(v);
    add_gemm_cases(v);
    add_attention_cases(v);
    add_rope_cases(v);
    add_square_sum_cases(v);
    add_quant_matmul_cases(v);
    add_paged_attention_cases(v);
    add_grouped_gemm_cases(v);
    return v;
  }();
  return cases;
}

}  // namespace tessel::testing
