// SPDX-License-Identifier: Apache-2.0
// `tessel tokenize`: text -> ids (a JSON array on one line) with a model directory's tokenizer
// (tokenizer.json, a SentencePiece tokenizer.model, or GPT-2's vocabulary files, as
// io::Tokenizer::load chooses), or ids -> text with --decode.
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessel/cli/commands.h"
#include "tessel/cli/model_args.h"
#include "tessel/io/tokenizer.h"

namespace tessel::cli {

namespace {

struct TokenizeArgs {
  std::string model, text, file, decode;
  bool special = false;
};

void run_tokenize(const TokenizeArgs& args, const CLI::App& cmd) {
  const int given =
      int(cmd.count("--text") > 0) + int(cmd.count("--file") > 0) + int(cmd.count("--decode") > 0);
  TESSEL_CHECK(given == 1, "tokenize: give exactly one of --text, --file or --decode (got ", given,
               ")");
  TESSEL_CHECK(std::filesystem::exists(args.model), "tokenize: ", args.model, " not found");
  TESSEL_CHECK(!std::filesystem::is_directory(args.model) || io::Tokenizer::files_in(args.model),
               "tokenize: no tokenizer in ", args.model,
               " (expected tokenizer.json, tokenizer.model, vocab.json + merges.txt, or "
               "encoder.json + vocab.bpe)");
  const io::Tokenizer tokenizer = io::Tokenizer::load(args.model);
  if (cmd.count("--decode")) {
    std::vector<int32_t> ids;
    for (int64_t id : parse_id_list(args.decode, "tokenize --decode")) {
      TESSEL_CHECK(id < tokenizer.vocab_size(), "tokenize --decode: id ", id,
                   " is out of range [0, ", tokenizer.vocab_size(), ")");
      ids.push_back(int32_t(id));
    }
    std::cout << tokenizer.decode(ids) << std::endl;
    return;
  }
  const std::string text =
      cmd.count("--file") ? read_text_file(args.file, "tokenize --file") : args.text;
  std::cout << nlohmann::json(tokenizer.encode(text, args.special)).dump() << std::endl;
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Print the token ids of a text as a JSON array, or the text of ids (--decode)");
  cmd->add_option("-m,--model", args->model,
                  "Model directory with tokenizer files (or a tokenizer.json or .model file)")
      ->required();
  cmd->add_option("--text", args->text, "Text to encode");
  cmd->add_option("--file", args->file, "File whose whole content is encoded");
  cmd->add_option("--decode", args->decode, "Comma-separated ids to decode, e.g. 1,2,3");
  cmd->add_flag("--special", args->special,
                "Recognise special tokens such as <|endoftext|> in the text (default: plain text)");
  cmd->callback([args, cmd] { run_tokenize(*args, *cmd); });
}

}  // namespace tessel::cli
