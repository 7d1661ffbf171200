// SPDX-License-Identifier: Apache-2.0
// How many rows a model's rotary position tables hold: made on first use with at least
// kRotaryMinRows rows and grown geometrically as longer sequences arrive (capped at the context the
// model takes), so decoding one token at a time rebuilds them a logarithmic number of times. One
// rule for the families that make such tables (models/llama/llama_rope.cpp) and for the planner's
// serving-memory formula, which predicts them without a model (plan/serve_memory.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

namespace tessel::models {

inline constexpr int64_t kRotaryMinRows = 256;

// The rows after a call over positions [0, seq_len) when `held` rows exist already (0: none),
// with at most `limit` rows unless seq_len itself is longer.
inline int64_t rotary_table_rows(int64_t held, int64_t seq_len, int64_t limit) {
  return std::min(std::max(limit, seq_len), std::max({seq_len, 2 * held, kRotaryMinRows}));
}

}  // namespace tessel::models
