// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the model subcommands (generate, eval, tokenize, init): comma-separated id
// lists, whether a directory holds tokenizer files, reading a whole text file (and refusing a
// binary one), thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/core/threads.h"
#include "tessel/io/gguf.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/gguf_model.h"
#include "tessel/models/inference_weights.h"

namespace tessel::cli {

// "1,2, 3" -> {1, 2, 3}; `what` names the flag in errors.
inline std::vector<int64_t> parse_id_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    std::string item = text.substr(pos, comma - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    size_t used = 0;
    long long value = -1;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TESSEL_CHECK(!item.empty() && used == item.size() && value >= 0, what, ": '", item,
                 "' is not a token id (expected comma-separated integers >= 0, e.g. 1,2,3)");
    ids.push_back(value);
    pos = comma + 1;
  }
  return ids;
}

// The tokenizer files Tokenizer::load(dir) reads, or a GGUF file with tokenizer.ggml.* keys.
inline bool has_tokenizer_files(const std::filesystem::path& dir) {
  if (models::is_gguf_model(dir.string()))
    return io::GgufFile::open(dir.string(), io::GgufMapping::Windows)
        .metadata()
        .contains("tokenizer.ggml.model");
  return io::Tokenizer::files_in(dir.string()).has_value();
}

inline std::string read_text_file(const std::string& path, const std::string& what) {
  TESSEL_CHECK(std::filesystem::is_regular_file(path), what, ": ", path, " is not a readable file");
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), what, ": cannot open ", path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A text file to score or train on. As `data prepare` decides: a NUL byte in the first 64 KiB
// means it is not text (a binary file would be scored as garbage without a word).
inline std::string read_text_input(const std::string& path, const std::string& what) {
  std::string text = read_text_file(path, what);
  const size_t head = std::min<size_t>(text.size(), size_t(1) << 16);
  const size_t nul = text.find('\0');
  TESSEL_CHECK(nul >= head, what, ": ", path, " is not text (it holds a NUL byte at offset ", nul,
               "); `tessel data prepare` refuses it too");
  return text;
}

// A model directory (config.json + weights) or a GGUF file, which needs nothing else.
inline void check_model_dir(const std::string& dir, const std::string& what) {
  if (models::is_gguf_model(dir)) return;
  TESSEL_CHECK(std::filesystem::is_directory(dir), what, ": model directory ", dir, " not found");
  TESSEL_CHECK(std::filesystem::exists(std::filesystem::path(dir) / "config.json"), what, ": ",
               (std::filesystem::path(dir) / "config.json").string(), " not found");
}

// --weights of generate, eval, serve and bench generate.
inline constexpr const char* kWeightsHelp =
    "Matrices for inference: int8 (weight-only, one scale per output channel), bf16, f16, or "
    "stored (as the model holds them); converted once at load (docs/MODELS.md)";

// Converts a loaded model's matrices as --weights says, with one line on stderr saying what
// changed ("tessel: <what>: ...").
inline void apply_inference_weights(models::CausalLM& model, models::InferenceWeights weights,
                                    const std::string& what) {
  // Stored too: the quantized matrices take their backend's layout (inference_weights.h).
  const models::WeightConversion c = models::convert_inference_weights(model, weights);
  if (weights == models::InferenceWeights::Stored) return;
  std::fprintf(stderr, "tessel: %s: --weights %s: %lld matrices converted (%.1f MB -> %.1f MB)%s\n",
               what.c_str(), models::inference_weights_name(weights),
               static_cast<long long>(c.converted), double(c.bytes_before) / 1e6,
               double(c.bytes_after) / 1e6,
               c.kept ? ", the GGUF blocks already quantized kept as they are" : "");
}

// 0 keeps the default (TESSEL_NUM_THREADS or all cores).
inline void apply_threads(int threads) {
  if (threads > 0) set_num_threads(threads);
}

}  // namespace tessel::cli
