// SPDX-License-Identifier: Apache-2.0
// `tessel quantize`: writes a model (a Hugging Face directory or a GGUF file) as one GGUF file,
// tokenizer included, so `tessel generate -m out.gguf` needs nothing else. --type sets how the
// matrices are stored (f32, f16, bf16; norms and biases stay f32) or quantized (q8_0, q4_0,
// q4_k_m, q5_k_m: per-tensor types in models/gguf_quant_policy.h; a quantized GGUF input is widened
// first). Prints one progress line per tensor with its reconstruction error on stderr, and a JSON
// summary on stdout.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessel/cli/commands.h"
#include "tessel/cli/model_args.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/gguf_model.h"

namespace tessel::cli {

namespace {

struct QuantizeArgs {
  std::string model, output, type = "f16", name;
  int threads = 0;
  bool quiet = false;
};

void run_quantize(const QuantizeArgs& args) {
  namespace fs = std::filesystem;
  check_model_dir(args.model, "quantize");
  models::check_gguf_export_type(args.type);
  TESSEL_CHECK(!args.output.empty(), "quantize: -o/--output is required");
  TESSEL_CHECK(!fs::is_directory(args.output), "quantize: -o ", args.output,
               " is a directory; give the .gguf file to write");
  apply_threads(args.threads);
  const auto start = std::chrono::steady_clock::now();
  std::optional<io::Tokenizer> tokenizer;
  if (has_tokenizer_files(args.model)) {
    tokenizer = io::Tokenizer::load(args.model);
  } else {
    std::fprintf(stderr, "tessel: quantize: no tokenizer in %s; %s will hold the weights only\n",
                 args.model.c_str(), args.output.c_str());
  }
  auto model = models::load_model_source(args.model, models::GgufWeights::Dequantized);
  models::GgufExportOptions options;
  options.type = args.type;
  options.name = args.name.empty() ? fs::path(args.model).stem().string() : args.name;
  if (options.name.empty()) options.name = fs::path(args.model).parent_path().filename().string();
  options.tokenizer = tokenizer ? &*tokenizer : nullptr;
  double worst = 0;
  size_t count = 0;
  models::save_gguf_model(*model, args.output, options, [&](const models::GgufTensorReport& r) {
    worst = std::max(worst, r.rel_rms_error);
    count = r.count;
    if (!args.quiet)
      std::fprintf(stderr,
                   "tessel: quantize: [%zu/%zu] %-28s %-14s %-4s max|err| %.3g  rel rms err %.3g\n",
                   r.index, r.count, r.name.c_str(), r.shape.str().c_str(), r.type.c_str(),
                   r.max_abs_error, r.rel_rms_error);
    if (!args.quiet && !r.note.empty())
      std::fprintf(stderr, "tessel: quantize:   note: %s %s\n", r.name.c_str(), r.note.c_str());
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << nlohmann::json{{"command", "quantize"},
                              {"model", args.model},
                              {"output", args.output},
                              {"type", args.type},
                              {"tensors", count},
                              {"bytes", fs::file_size(args.output)},
                              {"tokenizer", tokenizer.has_value()},
                              {"max_rel_rms_error", worst},
                              {"seconds", seconds}}
                   .dump()
            << std::endl;
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto args = std::make_shared<QuantizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "quantize",
      "Write a model (directory or .gguf) as one GGUF file with its tokenizer, for "
      "`generate -m out.gguf`");
  cmd->add_option("-m,--model", args->model, "Model directory (config.json + weights) or .gguf")
      ->required();
  cmd->add_option("-o,--output", args->output, "The .gguf file to write (atomically)")->required();
  cmd->add_option("--type", args->type,
                  "Matrix type: f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m (docs/MODELS.md)")
      ->capture_default_str();
  cmd->add_option("--name", args->name, "general.name (default: the model's file or folder name)");
  cmd->add_option("-t,--threads", args->threads, "Threads (0: TESSEL_NUM_THREADS or all cores)")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", args->quiet, "No per-tensor lines");
  cmd->callback([args] { run_quantize(*args); });
}

}  // namespace tessel::cli
