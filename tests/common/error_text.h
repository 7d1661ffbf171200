// SPDX-License-Identifier: Apache-2.0
// The text of the tessel::Error a call throws, for tests that check what an error says.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
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

// Runs fn, expecting a tessel::Error whose message contains every word in `words`.
inline void expect_error(const std::function<void()>& fn,
                         std::initializer_list<const char*> words) {
  try {
    fn();
    ADD_FAILURE() << "expected tessel::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* w : words) EXPECT_NE(msg.find(w), std::string::npos) << msg << " lacks " << w;
  }
}

}  // namespace tessel::test
