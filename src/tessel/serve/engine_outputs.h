// SPDX-License-Identifier: Apache-2.0
// What the engine does with a sequence's logits row: draws the next token with the sequence's
// sampler, decides whether the choice is done (end-of-sequence or a stop token id, a stop string,
// max_tokens, the context length), turns the token into final text through the sequence's text
// stream, and hands the Delta to the request's sink. Keeps the totals /metrics reports.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "tessel/serve/sequence.h"

namespace tessel::serve {

class OutputWriter {
 public:
  explicit OutputWriter(std::optional<int64_t> eos);

  // Samples seq's next token from `logits`, appends it to seq.tokens and sends the delta; returns
  // how the choice finished (kNone: it goes on).
  FinishReason sample(Sequence& seq, std::span<const float> logits, int64_t context_length);
  // Ends a choice from outside (cancelled, failed): sends a last delta with `reason`.
  void finish(Sequence& seq, FinishReason reason, const std::string& error);

  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t generated_tokens() const { return generated_tokens_; }
  int64_t requests_finished() const { return requests_finished_; }

 private:
  void send(Sequence& seq, Delta& delta);
  void count_finish(Sequence& seq);

  std::optional<int64_t> eos_;
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0, requests_finished_ = 0;
};

}  // namespace tessel::serve
