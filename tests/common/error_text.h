// SPDX-License-Identifier: Apache-2.0
// The text of the tessel::Error a call throws, for tests that check what an error says.
#pragma once

#include <functional>
#include <string>

#include "tessel/core/error.h"

namespace tessel::test {

// e.what() of the Error `f` throws, or "(no error)" when it returns.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace tessel::test
