// SPDX-License-Identifier: Apache-2.0
// Tensor-parallel serving under `mpirun -np 2`: rank 0's Engine with a StepMirror and rank 1's
// EngineFollower give the same greedy tokens, and logprobs within a tolerance, as one rank's
// Engine over the whole model, for a small random GPT-2 and a LLaMA with grouped-query heads.
// The requests share prefixes (prefix-cache hits), arrive in chunks (chunked prefill), ask for two
// choices (a copy-on-write block) and overflow a small pool (preemption), so every decision rank 0
// makes about blocks must reach rank 1's pool for its tokens to match. Both runs see the same
// schedule: the same requests are queued before the engine starts and the pools have the same
// number of blocks. The same requests sampled (temperature, top-p, top-k, a presence penalty, a
// seed each) give the same tokens as one rank too: rank 0 samples from the gathered logits with
// each choice's own Philox stream, so only the logits' last bits may differ. A GPT-2 whose 3
// heads cannot be split over 2 ranks is refused, naming both.
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/tokenizer_test_util.h"
#include "tessel/core/rng.h"
#include "tessel/dist/world.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/inference_weights.h"
#include "tessel/models/llama/llama.h"
#include "tessel/nn/layers.h"
#include "tessel/serve/engine.h"
#include "tessel/serve/engine_follower.h"
#include "tessel/sharding/placement.h"
#include "tessel/sharding/shard_layout.h"
#include "tessel/train/model_tensor_parallel.h"
#include "tessel/train/model_tp_load.h"

using namespace tessel;

namespace {

constexpr int64_t kVocab = 263;  // the test tokenizer's 262 ids and one row more
int g_failures = 0;

void check(bool ok, const std::string& what) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
}

std::shared_ptr<models::CausalLM> tiny_gpt2(int64_t heads, int64_t width = 24) {
  models::GPT2Config c;
  c.vocab_size = kVocab;
  c.n_positions = 97;
  c.n_embd = width;
  c.n_head = heads;
  c.n_layer = 2;
  c.initializer_range = 0.2;
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  Generator g(11);
  return models::GPT2::random(c, g);
}

// wide: 64 features in 4 query heads of 16 and an MLP of 128, so that each rank's columns of the
// row-parallel layers (32 and 64) start at a multiple of the int8 kernel's 32-element activation
// blocks (docs/SERVING.md says why that matters for --weights int8).
std::shared_ptr<models::CausalLM> tiny_llama(bool wide = false) {
  models::LlamaConfig c;
  c.vocab_size = kVocab + 1;  // an untied LM head is split evenly: no padding
  c.hidden = wide ? 64 : 24;
  c.intermediate_size = wide ? 128 : 38;
  c.num_hidden_layers = 2;
  c.num_attention_heads = wide ? 4 : 6;
  c.num_key_value_heads = 2;
  c.head_dim = wide ? 16 : 4;
  c.max_position_embeddings = 97;
  c.initializer_range = 0.2;
  c.bos_token_id = std::nullopt;
  c.eos_token_ids = {};
  Generator g(12);
  return models::Llama::random(c, g);
}

std::vector<int64_t> prompt_of(int64_t n, uint64_t seed) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[size_t(i)] = int64_t(uniform_at(seed, 0, uint64_t(i)) * 256.0f) % 256;
  return ids;
}

struct Output {
  std::vector<int64_t> tokens;
  std::vector<double> logprobs;  // each token's, then its alternatives'
  std::vector<int64_t> alternatives;
  int64_t ends = 0;
};

// Every request's choices, keyed "id/choice".
class Collector {
 public:
  serve::DeltaSink sink(const std::string& id) {
    return [this, id](const serve::Delta& d) {
      std::lock_guard<std::mutex> lock(mu_);
      Output& o = out_[id + "/" + std::to_string(d.index)];
      o.tokens.insert(o.tokens.end(), d.tokens.begin(), d.tokens.end());
      for (const serve::TokenLogprob& l : d.logprobs) {
        o.logprobs.push_back(l.logprob);
        for (const auto& [alt, lp] : l.top) {
          o.alternatives.push_back(alt);
          o.logprobs.push_back(lp);
        }
      }
      if (d.finish != serve::FinishReason::kNone) {
        ++o.ends;
        ++finished_;
        done_.notify_all();
      }
    };
  }
  bool wait(int64_t choices) {
    std::unique_lock<std::mutex> lock(mu_);
    return done_.wait_for(lock, std::chrono::seconds(240), [&] { return finished_ >= choices; });
  }
  std::map<std::string, Output> outputs() {
    std::lock_guard<std::mutex> lock(mu_);
    return out_;
  }

 private:
  std::mutex mu_;
  std::condition_variable done_;
  std::map<std::string, Output> out_;
  int64_t finished_ = 0;
};

serve::EngineOptions options_for(const models::CausalLM& model, int64_t blocks) {
  serve::EngineOptions o;
  o.max_batch_tokens = 13;  // prompts arrive in chunks
  o.max_seqs = 9;
  o.block_size = 4;
  const models::KVCache probe = model.make_cache(1, 1);
  const models::KvGeometry g{probe.n_layer(), probe.kv_heads(), probe.head_dim()};
  // The same number of blocks whatever this rank's share of the heads.
  o.kv_cache_bytes = blocks * o.block_size * g.bytes_per_token(int64_t(dtype_size(probe.dtype())));
  return o;
}

// int8: the codes and scales are one rank's (check_int8_pieces), but the activations entering
// each product are rounded to int8 per 32-element block, and an activation whose f32 value differs
// in its last bit (the row-parallel sums add in another order) can round to the neighbouring code.
constexpr double kInt8Tolerance = 1e-4;

constexpr int64_t kRequests = 7;
constexpr int64_t kChoices = kRequests + 1;  // request 3 has two choices

// Greedy, or sampled with a seed per request (choice c of a request uses its seed + c).
enum class Decoding { kGreedy, kSeeded };

// Rank 0 queues the requests, starts the engine and collects every choice.
std::map<std::string, Output> serve_requests(serve::Engine& engine, Decoding decoding,
                                             serve::EngineStats& stats) {
  Collector c;
  const std::vector<int64_t> shared = prompt_of(23, 5);
  for (int64_t i = 0; i < kRequests; ++i) {
    serve::Request r;
    r.id = "r" + std::to_string(i);
    r.prompt = shared;  // a 23-token system prompt: blocks 0-4 are cached after the first
    const std::vector<int64_t> own = prompt_of(3 + 5 * (i % 3), 100 + uint64_t(i));
    r.prompt.insert(r.prompt.end(), own.begin(), own.end());
    r.params.max_tokens = 17 + i;
    r.params.temperature = 0.0;
    if (decoding == Decoding::kSeeded) {
      r.params.temperature = 0.7 + 0.1 * double(i % 4);
      r.params.top_p = i % 2 ? 0.9 : 1.0;
      r.params.top_k = i % 3 == 2 ? 40 : 0;
      r.params.presence_penalty = i == 5 ? 0.4 : 0.0;
      r.params.seed = 1000 + 17 * uint64_t(i);
    }
    r.params.ignore_eos = true;
    r.params.logprobs = 2;
    if (i == 3) r.params.n = 2;  // the choices share the prompt's last, partial block
    const serve::SubmitResult s = engine.submit(r, c.sink(r.id));
    check(s.status == serve::SubmitStatus::kAccepted, "submit " + r.id + ": " + s.message);
  }
  engine.start();
  check(c.wait(kChoices), "every choice finished within 240 s");
  engine.drain(std::chrono::seconds(10));
  stats = engine.stats();
  return c.outputs();
}

// --weights int8 under tp: every row-parallel layer's piece holds exactly the codes and scales of
// its columns in the whole model's int8 rows (each rank checks its own piece against a whole
// model it converts itself). Also shows the check has teeth: some row's slice has a smaller
// max|x| than the whole row, so a scale from the slice alone would differ.
void check_int8_pieces(const std::string& name, models::CausalLM& piece_model,
                       const train::ModelTensorParallel& tp,
                       const std::function<std::shared_ptr<models::CausalLM>()>& make) {
  auto whole = make();
  whole->eval();
  models::convert_inference_weights(*whole, models::InferenceWeights::Int8);
  std::map<std::string, nn::Linear*> whole_layers;
  for (auto& [path, m] : whole->named_modules())
    if (auto* l = dynamic_cast<nn::Linear*>(m)) whole_layers[path] = l;
  int64_t layers = 0, rows_smaller = 0;
  for (auto& [path, m] : piece_model.named_modules()) {
    auto* piece = dynamic_cast<nn::Linear*>(m);
    const sharding::ShardLayout* spec = piece ? tp.result.spec(path + ".weight") : nullptr;
    if (spec == nullptr || spec->dim != 1) continue;
    ++layers;
    const nn::Linear& w = *whole_layers.at(path);
    const int64_t in = w.in_features(), n = tp.tp->size(), r = tp.tp->rank();
    const int64_t off = sharding::shard_offset(in, int(n), int(r));
    const int64_t cols = sharding::shard_size(in, int(n), int(r));
    const int64_t rows = w.out_features(), wide = in + 4, narrow = cols + 4;
    check(piece->quant_type() == kernels::quant::QuantType::Int8 &&
              piece->weight.shape() == Shape({rows, narrow}),
          name + ": " + path + " piece is " + piece->weight.shape().str());
    const auto* a = static_cast<const uint8_t*>(w.weight.data_ptr());
    const auto* b = static_cast<const uint8_t*>(piece->weight.data_ptr());
    bool same = true;
    for (int64_t i = 0; i < rows; ++i) {
      same = same && std::memcmp(a + i * wide, b + i * narrow, 4) == 0 &&
             std::memcmp(a + i * wide + 4 + off, b + i * narrow + 4, size_t(cols)) == 0;
      int max_code = 0;
      for (int64_t c = 0; c < cols; ++c)
        max_code = std::max(max_code, std::abs(int(int8_t(b[i * narrow + 4 + c]))));
      rows_smaller += max_code < 127;
    }
    check(same, name + ": " + path + " rank " + std::to_string(r) +
                    "'s int8 codes or scales differ from the whole rows'");
  }
  check(layers > 0 && rows_smaller > 0,
        name + ": " + std::to_string(layers) + " row-parallel layers, " +
            std::to_string(rows_smaller) + " rows whose slice has a smaller max|x| than the row");
}

void run_case(const std::string& name,
              const std::function<std::shared_ptr<models::CausalLM>()>& make, Decoding decoding,
              const dist::CommPtr& world,
              models::InferenceWeights weights = models::InferenceWeights::Stored,
              double tolerance = 2e-5) {
  const bool leader = world->rank() == 0;
  constexpr int64_t kBlocks = 40;  // 7 sequences of up to 53 tokens need 98: preemption
  std::map<std::string, Output> expected;
  if (leader) {  // one rank, the whole model
    auto whole = make();
    whole->eval();
    models::convert_inference_weights(*whole, weights);
    serve::Engine engine(whole, io::Tokenizer(io::small_config()), options_for(*whole, kBlocks));
    serve::EngineStats stats;
    expected = serve_requests(engine, decoding, stats);
  }
  auto model = make();
  auto tp = std::make_shared<train::ModelTensorParallel>(
      train::parallelize_model(*model, world, "", false));
  model->eval();
  train::convert_inference_weights_tp(*model, *tp, weights);
  if (weights == models::InferenceWeights::Int8) check_int8_pieces(name, *model, *tp, make);
  auto mirror = std::make_shared<serve::StepMirror>(
      world, [tp](const Tensor& local) { return train::model_tp_full_logits(*tp, local); });
  const serve::EngineOptions options = options_for(*model, kBlocks);
  if (!leader) {
    serve::EngineFollower follower(model, options, mirror);
    check(follower.pool_plan().num_blocks == kBlocks,
          name + ": rank 1's pool has " + std::to_string(follower.pool_plan().num_blocks) +
              " blocks");
    const int64_t steps = follower.run();
    check(steps > 0, name + ": rank 1 ran no step");
    return;
  }
  serve::Engine engine(model, io::Tokenizer(io::small_config()), options, mirror);
  serve::EngineStats stats;
  const std::map<std::string, Output> got = serve_requests(engine, decoding, stats);
  check(stats.prefix_hits > 0, name + ": no prefix-cache hit");
  check(stats.preemptions > 0, name + ": no preemption");
  check(got.size() == size_t(kChoices), name + ": " + std::to_string(got.size()) + " choices");
  double worst = 0;
  for (const auto& [key, want] : expected) {
    auto it = got.find(key);
    if (it == got.end()) {
      check(false, name + ": choice " + key + " missing");
      continue;
    }
    const Output& have = it->second;
    check(have.ends == 1 && have.tokens.size() == want.tokens.size(),
          name + ": " + key + " ended " + std::to_string(have.ends) + " times with " +
              std::to_string(have.tokens.size()) + " tokens, expected " +
              std::to_string(want.tokens.size()));
    check(have.tokens == want.tokens, name + ": " + key + " tokens differ from one rank's");
    check(have.alternatives == want.alternatives, name + ": " + key + " top alternatives differ");
    if (have.logprobs.size() != want.logprobs.size()) {
      check(false, name + ": " + key + " logprob counts differ");
      continue;
    }
    for (size_t i = 0; i < want.logprobs.size(); ++i)
      worst = std::max(worst, std::abs(have.logprobs[i] - want.logprobs[i]));
  }
  // f32 products split over 2 ranks and summed: the rounding of a 24-wide model (see main for
  // the converted weights' bounds).
  check(worst <= tolerance, name + ": largest logprob difference " + std::to_string(worst) +
                                " above " + std::to_string(tolerance));
  if (decoding == Decoding::kSeeded && got.count("r3/0") && got.count("r3/1")) {
    // Seeds 1051 and 1052 over one prompt: the draws really are random (and per choice).
    check(got.at("r3/0").tokens != got.at("r3/1").tokens,
          name + ": the two seeded choices of r3 sampled the same tokens");
  }
  std::printf(
      "%s: %zu choices, tokens equal to one rank's, largest logprob difference "
      "%.3g, %lld prefix-cache hits, %lld preemptions\n",
      name.c_str(), got.size(), worst, static_cast<long long>(stats.prefix_hits),
      static_cast<long long>(stats.preemptions));
}

// 3 heads over 2 ranks: one error naming both, before any communication.
void refuses_uneven_heads(const dist::CommPtr& world) {
  auto model = tiny_gpt2(3);
  std::string message;
  try {
    train::parallelize_model(*model, world, "", false);
  } catch (const Error& e) {
    message = e.what();
  }
  check(message.find("n_head = 3 is not divisible by tp = 2") != std::string::npos,
        "3 heads on 2 ranks: got '" + message + "'");
}

}  // namespace

int main() {
  try {
    dist::CommPtr world = dist::init_world();
    if (world->size() != 2) {
      std::fprintf(stderr, "serve_tensor_parallel: run under mpirun -np 2 (got %d ranks)\n",
                   world->size());
      return 2;
    }
    run_case(
        "gpt2", [] { return tiny_gpt2(4); }, Decoding::kGreedy, world);
    run_case(
        "llama-gqa", [] { return tiny_llama(); }, Decoding::kGreedy, world);
    run_case(
        "gpt2-seeded", [] { return tiny_gpt2(4); }, Decoding::kSeeded, world);
    run_case(
        "llama-gqa-seeded", [] { return tiny_llama(); }, Decoding::kSeeded, world);
    // --weights under tp: each rank's pieces converted, int8 with the whole rows' scales. The
    // 64-wide models align the row-parallel splits with the int8 activation blocks.
    run_case(
        "gpt2-int8", [] { return tiny_gpt2(4, 64); }, Decoding::kGreedy, world,
        models::InferenceWeights::Int8, kInt8Tolerance);
    run_case(
        "llama-gqa-int8", [] { return tiny_llama(true); }, Decoding::kGreedy, world,
        models::InferenceWeights::Int8, kInt8Tolerance);
    run_case(
        "llama-gqa-bf16", [] { return tiny_llama(true); }, Decoding::kSeeded, world,
        models::InferenceWeights::BF16);
    run_case(
        "gpt2-f16", [] { return tiny_gpt2(4); }, Decoding::kGreedy, world,
        models::InferenceWeights::F16);
    refuses_uneven_heads(world);
    Tensor failures = from_data(std::vector<int64_t>{g_failures}, Shape{1});
    world->all_reduce(failures);
    return failures.data<int64_t>()[0] == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "serve_tensor_parallel: %s\n", e.what());
    dist::abort_job(1, e.what());
  }
}
