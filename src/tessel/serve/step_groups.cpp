// SPDX-License-Identifier: Apache-2.0
// Placing requests in groups and sharing out the sequence limit (step_groups.h).
#include "tessel/serve/step_groups.h"

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel::serve {

int least_loaded_group(std::span<const int64_t> loads) {
  TESSEL_CHECK(!loads.empty(), "least_loaded_group: no groups");
  return int(std::min_element(loads.begin(), loads.end()) - loads.begin());
}

int64_t group_max_seqs(int64_t max_seqs, int64_t groups, int64_t group) {
  TESSEL_CHECK(max_seqs >= 1 && groups >= 1 && group >= 0 && group < groups,
               "group_max_seqs: max_seqs ", max_seqs, ", groups ", groups, ", group ", group,
               " (expected max_seqs, groups >= 1 and 0 <= group < groups)");
  return std::max<int64_t>(1, max_seqs / groups + (group < max_seqs % groups ? 1 : 0));
}

}  // namespace tessel::serve
