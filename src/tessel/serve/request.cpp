// SPDX-License-Identifier: Apache-2.0
// Range checks of the per-request sampling parameters and the finish reasons' wire names.
#include "tessel/serve/request.h"

#include <cmath>

#include "tessel/core/error.h"

namespace tessel::serve {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

void SamplingParams::validate() const {
  TESSEL_CHECK(std::isfinite(temperature) && temperature >= 0 && temperature <= 100, "temperature ",
               temperature, " must be in [0, 100] (0 = greedy)");
  TESSEL_CHECK(std::isfinite(top_p) && top_p > 0 && top_p <= 1, "top_p ", top_p,
               " must be in (0, 1]");
  TESSEL_CHECK(top_k >= 0, "top_k ", top_k, " must be >= 0 (0 = no limit)");
  TESSEL_CHECK(std::isfinite(min_p) && min_p >= 0 && min_p <= 1, "min_p ", min_p,
               " must be in [0, 1]");
  TESSEL_CHECK(
      std::isfinite(repetition_penalty) && repetition_penalty > 0 && repetition_penalty <= 100,
      "repetition_penalty ", repetition_penalty, " must be in (0, 100] (1 = off)");
  TESSEL_CHECK(std::isfinite(presence_penalty) && presence_penalty >= -2 && presence_penalty <= 2,
               "presence_penalty ", presence_penalty, " must be in [-2, 2]");
  TESSEL_CHECK(
      std::isfinite(frequency_penalty) && frequency_penalty >= -2 && frequency_penalty <= 2,
      "frequency_penalty ", frequency_penalty, " must be in [-2, 2]");
  TESSEL_CHECK(max_tokens >= 1, "max_tokens ", max_tokens, " must be >= 1");
  TESSEL_CHECK(n >= 1, "n ", n, " must be >= 1");
  for (const std::string& s : stop) TESSEL_CHECK(!s.empty(), "stop: an empty stop string");
  for (int64_t id : stop_token_ids) TESSEL_CHECK(id >= 0, "stop_token_ids: ", id, " is negative");
  if (logprobs)
    TESSEL_CHECK(*logprobs >= 0 && *logprobs <= 20, "logprobs ", *logprobs, " must be in [0, 20]");
}

}  // namespace tessel::serve
