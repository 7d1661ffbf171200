// SPDX-License-Identifier: Apache-2.0
// Rendering a parsed Jinja2 template. Scoping is Jinja2's: a for loop's body gets a fresh scope
// each iteration (a `set` inside it is gone after the iteration; namespace() objects carry state
// out), an if block does not. Globals: the caller's variables plus range(), namespace(), dict(),
// raise_exception(message) (an Error naming the line) and strftime_now(format).
// Rendering is bounded (output size, steps, macro recursion) so a hostile template fails with an
// Error instead of exhausting the server.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tessel/serve/jinja_parser.h"

namespace tessel::serve::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t(64) << 20;
  int64_t max_steps = 2'000'000;  // statements run plus loop iterations
  int max_call_depth = 64;        // nested macro calls
};

std::string render(const Template& t, const std::vector<std::pair<std::string, Value>>& globals,
                   const RenderLimits& limits = {});

}  // namespace tessel::serve::jinja
