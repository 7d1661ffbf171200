// SPDX-License-Identifier: Apache-2.0
// The list of kernel case families. Each family file in this folder adds its cases here.
#include "cases.h"

namespace tessel::testing {

const std::vector<OpCase>& all_op_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> v;
    // FAMILIES (one line per family file)
    return v;
  }();
  return cases;
}

}  // namespace tessel::testing
