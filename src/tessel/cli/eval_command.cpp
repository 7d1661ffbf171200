// SPDX-License-Identifier: Apache-2.0
// `tessel eval`: mean cross-entropy (nats per token) and perplexity of a GPT-2 on a text file,
// as one JSON line. The tokens are cut into non-overlapping windows of the context length; each
// window predicts its next tokens, so every token but the first is predicted exactly once, and
// the last, shorter window is included. With --weights int8|bf16|f16 the model is scored as
// stored, converted (models/inference_weights.h) and scored again: the JSON line carries both
// perplexities and the change. The head runs on chunks of positions (CausalLM::eval_loss), so
// the whole window's logits never exist at once.
// The process's peak resident set and address space end it (cli/peak_memory.h).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "tessel/autograd/grad_mode.h"
#include "tessel/cli/commands.h"
#include "tessel/cli/device_option.h"
#include "tessel/cli/model_args.h"
#include "tessel/cli/peak_memory.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/family.h"
#include "tessel/models/gguf_model.h"
#include "tessel/nn/layers.h"

namespace tessel::cli {

namespace {

// What the matrices of a loaded model are, for the reference line: "f32", "bf16", or the GGUF
// formats they hold ("gguf q8_0 + f32").
std::string stored_weights_name(models::CausalLM& model) {
  std::set<std::string> names;
  for (auto& [path, module] : model.named_modules()) {
    const nn::Linear* linear = dynamic_cast<nn::Linear*>(module);
    const nn::Embedding* embedding = dynamic_cast<nn::Embedding*>(module);
    if (linear && linear->quant_type())
      names.insert("gguf " + std::string(kernels::quant::quant_type_name(*linear->quant_type())));
    else if (linear)
      names.insert(std::string(dtype_name(linear->weight.dtype())));
    if (embedding && embedding->quant_type())
      names.insert("gguf " +
                   std::string(kernels::quant::quant_type_name(*embedding->quant_type())));
    else if (embedding)
      names.insert(std::string(dtype_name(embedding->weight.dtype())));
  }
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : " + ") + name;
  return out;
}

struct EvalArgs {
  std::string model, text, weights = "stored";
  int64_t context = 0;
  int threads = 0;
};

void run_eval(const EvalArgs& args) {
  TESSEL_CHECK(args.context >= 0, "eval: --context must be >= 0 (0: the model's n_positions), got ",
               args.context);
  check_model_dir(args.model, "eval");
  const models::InferenceWeights weights = models::parse_inference_weights(args.weights);
  TESSEL_CHECK(
      has_tokenizer_files(args.model), "eval: no tokenizer in ", args.model,
      " (expected tokenizer.json, tokenizer.model, vocab.json + merges.txt, or encoder.json + "
      "vocab.bpe)");
  apply_threads(args.threads);
  const std::string text = read_text_input(args.text, "eval --text");
  const io::Tokenizer tokenizer = io::Tokenizer::load(args.model);
  const std::vector<int32_t> tokens = tokenizer.encode(text);
  const int64_t n = int64_t(tokens.size());
  TESSEL_CHECK(n >= 2, "eval: ", args.text, " holds ", n,
               " tokens; at least 2 are needed to predict one");
  const models::ConfigPtr config = models::load_model_source_config(args.model);
  const int64_t limit = config->max_positions();
  const int64_t context = args.context > 0 ? args.context : limit;
  TESSEL_CHECK(context <= limit, "eval: --context ", context, " exceeds max_positions = ", limit);
  TESSEL_CHECK(tokenizer.vocab_size() <= config->vocabulary_size(), "eval: the tokenizer has ",
               tokenizer.vocab_size(), " tokens, more than the model's vocab_size ",
               config->vocabulary_size());

  auto model = models::load_model_source(args.model);
  autograd::NoGradGuard no_grad;
  // Mean cross-entropy over every window, and the seconds it took.
  const auto score = [&] {
    const auto start = std::chrono::steady_clock::now();
    double total = 0;
    int64_t windows = 0;
    for (int64_t s = 0; s + 1 < n; s += context) {
      const int64_t len = std::min(context, n - 1 - s);
      std::vector<int32_t> ids(tokens.begin() + s, tokens.begin() + s + len);
      std::vector<int32_t> targets(tokens.begin() + s + 1, tokens.begin() + s + len + 1);
      // One chunk of positions' logits at a time (kLossChunkBytes), the same value as loss().
      const Tensor loss =
          model->eval_loss(from_data(ids, Shape{1, len}), from_data(targets, Shape{1, len}));
      total += loss.item() * double(len);
      ++windows;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::make_tuple(total / double(n - 1), seconds, windows);
  };
  // With --weights the model is scored as loaded first, then converted and scored again, so the
  // change the conversion makes is printed next to the reference (f32 for an f32 model).
  std::optional<double> reference;
  std::string reference_weights;
  if (weights != models::InferenceWeights::Stored) {
    reference_weights = stored_weights_name(*model);
    reference = std::get<0>(score());
    apply_inference_weights(*model, weights, "eval");
  }
  const auto [mean, seconds, windows] = score();
  nlohmann::json out{{"command", "eval"},
                     {"file", args.text},
                     {"tokens", n},
                     {"predicted_tokens", n - 1},
                     {"context", context},
                     {"windows", windows},
                     {"weights", args.weights},
                     {"mean_cross_entropy", mean},
                     {"perplexity", std::exp(mean)},
                     {"seconds", seconds},
                     {"tokens_per_s", seconds > 0 ? double(n - 1) / seconds : 0.0}};
  if (reference) {
    const double ppl = std::exp(mean), ref = std::exp(*reference);
    out["reference_weights"] = reference_weights;
    out["reference_mean_cross_entropy"] = *reference;
    out["reference_perplexity"] = ref;
    out["perplexity_change"] = ppl - ref;
    out["perplexity_change_pct"] = 100.0 * (ppl - ref) / ref;
    std::fprintf(stderr, "tessel: eval: perplexity %.4f with %s weights, %.4f with %s (%+.3f%%)\n",
                 ppl, args.weights.c_str(), ref, reference_weights.c_str(),
                 100.0 * (ppl - ref) / ref);
  }
  add_peak_memory(out);
  std::cout << out.dump() << std::endl;
  std::fprintf(stderr, "tessel: eval: %s\n", peak_memory_line().c_str());
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Mean cross-entropy and perplexity of a GPT-2 model directory on a text file");
  add_device_option(*cmd);
  cmd->add_option(
         "-m,--model", args->model,
         "Model directory (config.json + model.safetensors + tokenizer files) or a .gguf file")
      ->required();
  cmd->add_option("--text", args->text, "Text file to evaluate on")->required();
  cmd->add_option("-c,--context", args->context, "Window length (0: n_positions)")
      ->capture_default_str();
  cmd->add_option("--weights", args->weights,
                  std::string(kWeightsHelp) +
                      "; the model is also scored as stored and the perplexity change printed")
      ->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "Threads (0: TESSEL_NUM_THREADS or all cores)")
      ->capture_default_str();
  cmd->callback([args] { run_eval(*args); });
}

}  // namespace tessel::cli
