// SPDX-License-Identifier: Apache-2.0
// Sampling, finish decisions and deltas for one sequence at a time.
#include "tessel/serve/engine_outputs.h"

#include <algorithm>

#include "tessel/core/log.h"

namespace tessel::serve {

OutputWriter::OutputWriter(std::optional<int64_t> eos) : eos_(eos) {}

void OutputWriter::send(Sequence& seq, Delta& delta) {
  const RequestState& request = *seq.request;
  delta.index = seq.choice;
  delta.prompt_tokens = seq.prompt_length;
  delta.completion_tokens = seq.generated();
  if (!request.sink) return;
  try {
    request.sink(delta);
  } catch (const std::exception& e) {
    // A front end's failure must not stop the engine; the request goes on or ends as planned.
    log(LogLevel::Error, "engine: the sink of request ", request.request.id, " threw: ", e.what());
  }
}

void OutputWriter::count_finish(Sequence& seq) {
  seq.state = SeqState::kFinished;
  RequestState& request = *seq.request;
  // A request counts once, when its last choice ends.
  if (request.finished_choices + 1 == request.request.params.n) {
    ++requests_finished_;
    prompt_tokens_ += int64_t(request.request.prompt.size());
  }
}

FinishReason OutputWriter::sample(Sequence& seq, std::span<const float> logits,
                                  int64_t context_length) {
  const SamplingParams& params = seq.request->request.params;
  const SampledToken token = seq.sampler->sample(logits);
  seq.tokens.push_back(token.token);
  ++generated_tokens_;
  Delta delta;
  delta.tokens = {token.token};
  if (params.logprobs) delta.logprobs = {token};
  const bool eos = eos_ && token.token == *eos_ && !params.ignore_eos;
  const bool stop_id = std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(),
                                 token.token) != params.stop_token_ids.end();
  FinishReason reason = FinishReason::kNone;
  if (eos || stop_id) {
    // The ending token's own text is not part of the output.
    StreamText rest = seq.text->finish();
    delta.text = std::move(rest.text);
    reason = FinishReason::kStop;
  } else {
    StreamText out = seq.text->push(token.token);
    delta.text = std::move(out.text);
    if (out.stopped) {
      reason = FinishReason::kStop;
    } else if (seq.generated() >= params.max_tokens ||
               int64_t(seq.tokens.size()) >= context_length) {
      StreamText rest = seq.text->finish();
      delta.text += rest.text;
      reason = rest.stopped ? FinishReason::kStop : FinishReason::kLength;
    }
  }
  delta.finish = reason;
  if (reason != FinishReason::kNone) count_finish(seq);
  send(seq, delta);
  return reason;
}

void OutputWriter::finish(Sequence& seq, FinishReason reason, const std::string& error) {
  Delta delta;
  delta.finish = reason;
  delta.error = error;
  count_finish(seq);
  send(seq, delta);
  ++seq.request->finished_choices;
}

}  // namespace tessel::serve
