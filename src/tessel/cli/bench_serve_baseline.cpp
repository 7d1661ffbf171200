// SPDX-License-Identifier: Apache-2.0
// The baseline of `tessel bench serve`: the workload's requests through models::generate in this
// process, one at a time and without HTTP, as `tessel generate` runs them. Its output tokens/s
// against a server's, measured in the same run, is the gain of the server's batching.
#include "tessel/cli/bench_serve.h"
#include "tessel/core/error.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/generation.h"

namespace tessel::cli {

std::vector<serve::RequestRecord> run_baseline(models::CausalLM& model,
                                               const io::Tokenizer* tokenizer,
                                               const serve::Workload& workload, int64_t first_index,
                                               int64_t count, int64_t vocab_limit,
                                               double temperature) {
  std::vector<serve::RequestRecord> records;
  const BenchClock::time_point run_start = BenchClock::now();
  for (int64_t i = 0; i < count; ++i) {
    const serve::BenchRequest request = workload.request(first_index + i);
    std::vector<int64_t> prompt = request.prompt_ids;
    if (prompt.empty()) {
      TESSEL_CHECK(tokenizer, "bench serve: the baseline needs a tokenizer for text prompts");
      for (int32_t id : tokenizer->encode(request.prompt_text)) prompt.push_back(id);
      TESSEL_CHECK(!prompt.empty(), "bench serve: dataset entry of request ", request.index,
                   " encodes to no tokens");
    }
    serve::RequestRecord rec;
    rec.index = request.index;
    rec.max_tokens = request.max_tokens;
    rec.planned_prompt_tokens = int64_t(prompt.size());
    models::GenerationOptions options;
    options.max_new_tokens = request.max_tokens;
    options.sampling.temperature = temperature;
    options.sampling.seed = uint64_t(request.index);
    options.vocab_limit = vocab_limit;  // no stop token: the server is asked to ignore EOS too
    const BenchClock::time_point start = BenchClock::now();
    options.on_token = [&](int64_t) {
      rec.token_times_s.push_back(std::chrono::duration<double>(BenchClock::now() - start).count());
      return true;
    };
    const models::GenerationResult r = models::generate(model, prompt, options);
    const BenchClock::time_point end = BenchClock::now();
    rec.start_s = std::chrono::duration<double>(start - run_start).count();
    rec.end_s = std::chrono::duration<double>(end - run_start).count();
    rec.chunks = int64_t(r.tokens.size());
    rec.usage = serve::Usage{int64_t(prompt.size()), int64_t(r.tokens.size())};
    records.push_back(std::move(rec));
  }
  return records;
}

}  // namespace tessel::cli
