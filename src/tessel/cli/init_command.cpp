// SPDX-License-Identifier: Apache-2.0
// `tessel init`: a randomly initialised GPT-2 (GPT-2's init: N(0, initializer_range), residual
// projections scaled by 1/sqrt(2 n_layer)) written in the Hugging Face layout, config.json +
// model.safetensors. Tokenizer files beside the config are copied along.
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessel/cli/commands.h"
#include "tessel/cli/model_args.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/family.h"

namespace tessel::cli {

namespace {

namespace fs = std::filesystem;

struct InitArgs {
  std::string config, out;
  uint64_t seed = 0;
  bool force = false;
};

const char* const kTokenizerFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
    "merges.txt",     "encoder.json",          "vocab.bpe"};

void run_init(const InitArgs& args) {
  TESSEL_CHECK(fs::is_regular_file(args.config), "init: config ", args.config, " not found");
  const models::ConfigPtr config = models::load_model_config(args.config);
  const fs::path out(args.out), source = fs::path(args.config).parent_path();
  TESSEL_CHECK(args.force || !fs::exists(out / "config.json"), "init: ", out.string(),
               " already holds a model (config.json); pass --force to overwrite it");
  // The tokenizer must fit the model, or generated ids would have no text.
  const bool tokenizer = has_tokenizer_files(source.empty() ? fs::path(".") : source);
  if (tokenizer) {
    const io::Tokenizer tok = io::Tokenizer::load(source.empty() ? "." : source.string());
    TESSEL_CHECK(tok.vocab_size() <= config->vocabulary_size(), "init: the tokenizer in ",
                 source.string(), " has ", tok.vocab_size(), " tokens, more than vocab_size ",
                 config->vocabulary_size(), " of ", args.config);
  }
  Generator generator(args.seed);
  auto model = config->build_random(generator);
  models::save_model(*model, out.string());
  std::vector<std::string> copied;
  if (tokenizer) {
    for (const char* name : kTokenizerFiles) {
      const fs::path from = (source.empty() ? fs::path(".") : source) / name;
      if (!fs::exists(from) || fs::equivalent(from.parent_path(), out)) continue;
      fs::copy_file(from, out / name, fs::copy_options::overwrite_existing);
      copied.push_back(name);
    }
  }
  std::cout << nlohmann::json{{"command", "init"},
                              {"out", out.string()},
                              {"family", std::string(config->family().name())},
                              {"parameters", config->parameter_count()},
                              {"seed", args.seed},
                              {"tokenizer_files", copied}}
                   .dump()
            << std::endl;
}

}  // namespace

void add_init_command(CLI::App& app) {
  auto args = std::make_shared<InitArgs>();
  CLI::App* cmd = app.add_subcommand(
      "init", "Write a randomly initialised GPT-2 (config.json + model.safetensors)");
  cmd->add_option("--config", args->config,
                  "A Hugging Face GPT-2 config.json; tokenizer files in its directory are copied")
      ->required();
  cmd->add_option("--out", args->out, "Output model directory (created if missing)")->required();
  cmd->add_option("-s,--seed", args->seed, "Seed of the random weights")->capture_default_str();
  cmd->add_flag("--force", args->force, "Overwrite a model already in --out");
  cmd->callback([args] { run_init(*args); });
}

}  // namespace tessel::cli
