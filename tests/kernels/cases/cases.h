// SPDX-License-Identifier: Apache-2.0
// Declarations of the kernel case families (one function per file in this folder).
#pragma once

#include "../op_harness.h"

namespace tessel::testing {

// FAMILY DECLARATIONS

}  // namespace tessel::testing
