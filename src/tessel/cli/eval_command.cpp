// SPDX-License-Identifier: Apache-2.0
// `tessel eval`: mean cross-entropy (nats per token) and perplexity of a GPT-2 on a text file,
// as one JSON line. The tokens are cut into non-overlapping windows of the context length; each
// window predicts its next tokens, so every token but the first is predicted exactly once, and
// the last, shorter window is included.
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessel/autograd/grad_mode.h"
#include "tessel/cli/commands.h"
#include "tessel/cli/model_args.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/family.h"
#include "tessel/models/gguf_model.h"

namespace tessel::cli {

namespace {

struct EvalArgs {
  std::string model, text;
  int64_t context = 0;
  int threads = 0;
};

void run_eval(const EvalArgs& args) {
  TESSEL_CHECK(args.context >= 0, "eval: --context must be >= 0 (0: the model's n_positions), got ",
               args.context);
  check_model_dir(args.model, "eval");
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
  const auto start = std::chrono::steady_clock::now();
  double total = 0;
  int64_t windows = 0;
  for (int64_t s = 0; s + 1 < n; s += context) {
    const int64_t len = std::min(context, n - 1 - s);
    std::vector<int32_t> ids(tokens.begin() + s, tokens.begin() + s + len);
    std::vector<int32_t> targets(tokens.begin() + s + 1, tokens.begin() + s + len + 1);
    const Tensor loss =
        model->loss(from_data(ids, Shape{1, len}), from_data(targets, Shape{1, len}));
    total += loss.item() * double(len);
    ++windows;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double mean = total / double(n - 1);
  std::cout << nlohmann::json{{"command", "eval"},
                              {"file", args.text},
                              {"tokens", n},
                              {"predicted_tokens", n - 1},
                              {"context", context},
                              {"windows", windows},
                              {"mean_cross_entropy", mean},
                              {"perplexity", std::exp(mean)},
                              {"seconds", seconds},
                              {"tokens_per_s", seconds > 0 ? double(n - 1) / seconds : 0.0}}
                   .dump()
            << std::endl;
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Mean cross-entropy and perplexity of a GPT-2 model directory on a text file");
  cmd->add_option(
         "-m,--model", args->model,
         "Model directory (config.json + model.safetensors + tokenizer files) or a .gguf file")
      ->required();
  cmd->add_option("--text", args->text, "Text file to evaluate on")->required();
  cmd->add_option("-c,--context", args->context, "Window length (0: n_positions)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "Threads (0: TESSEL_NUM_THREADS or all cores)")
      ->capture_default_str();
  cmd->callback([args] { run_eval(*args); });
}

}  // namespace tessel::cli
