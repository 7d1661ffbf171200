// SPDX-License-Identifier: Apache-2.0
// `tessel bench generate`: text generation throughput of a randomly initialised model of any family
// (GPT-2 124M shape
// by default; fp32, batch 1): prompt processing (prefill) tokens/s and greedy cached decode
// tokens/s, and the decode's weight traffic as a fraction of the read bandwidth measured in the
// same run. One JSON line per figure. --model measures a model directory or a GGUF file instead
// (a quantized GGUF decodes from its blocks; the traffic counts their bytes). --weights converts
// the matrices first (int8 / bf16 / f16, models/inference_weights.h). For a mixture-of-experts
// model the traffic is the active weights (DeepSpeed-MoE's inference bound): a token reads only
// the experts it was routed to.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "tessel/cli/commands.h"
#include "tessel/core/profile.h"
#include "tessel/core/thread_pool.h"
#include "tessel/core/threads.h"
#include "tessel/models/family.h"
#include "tessel/models/generation.h"
#include "tessel/models/gguf_model.h"
#include "tessel/models/inference_weights.h"
#include "tessel/nn/moe.h"

namespace tessel::cli {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct GenerateBenchOptions {
  std::string config = "124M";
  std::string model;  // a model directory or .gguf: measured instead of a random `config`
  std::string weights = "stored";  // --weights: the matrices converted after loading
  int64_t prompt = 512;
  int64_t tokens = 64;
  double seconds = 1.0;
  uint64_t seed = 0;
  bool profile = false;  // where a decode step's time goes, per kernel
};

void emit(json j) {
  j["threads"] = num_threads();
  std::cout << j.dump() << std::endl;
}

// A config.json path or a preset of any family ("124M", "llama:tiny").
models::ConfigPtr load_config(const std::string& what) {
  if (std::filesystem::is_regular_file(what)) return models::load_model_config(what);
  return models::find_preset(what);
}

// Every decode step reads every weight once (the tied embedding serves as the LM head), so the
// traffic per token is the bytes of the distinct parameter tensors; tied ones share storage.
size_t weight_bytes(const models::CausalLM& model) {
  std::set<const void*> seen;
  size_t bytes = 0;
  for (const Tensor& p : model.parameters()) {
    if (seen.insert(p.data_ptr()).second) bytes += p.nbytes();
  }
  return bytes;
}

// What one token's decode reads of a mixture-of-experts model: every weight but the experts' once,
// and of each MoE layer's expert stacks the top_k experts the token chose (k / E of them; at batch
// 1 a token's k choices are distinct experts). Equal to weight_bytes for a dense model.
double active_weight_bytes(models::CausalLM& model) {
  double idle = 0;
  for (auto& [name, m] : model.named_modules()) {
    const auto* moe = dynamic_cast<const nn::MoE*>(m);
    if (moe == nullptr) continue;
    const nn::MoEConfig& c = moe->config();
    for (const Tensor& p : moe->experts->parameters())
      idle += double(p.nbytes()) * double(c.num_experts - c.top_k) / double(c.num_experts);
  }
  return double(weight_bytes(model)) - idle;
}

// The kernels' share of the decode: one profiled run with every token and one with the prompt
// and a single token; their difference is the decode's, next to the decode's wall time, so the
// time outside any kernel (op dispatch, allocation, the sampling) shows as the remainder.
void emit_decode_profile(models::CausalLM& model, const std::vector<int64_t>& prompt,
                         const models::GenerationOptions& gen, const std::string& config) {
  auto profiled = [&](int64_t tokens, double* decode_seconds) {
    models::GenerationOptions g = gen;
    g.max_new_tokens = tokens;
    profile::reset();
    profile::set_enabled(true);
    const models::GenerationResult r = models::generate(model, prompt, g);
    profile::set_enabled(false);
    if (decode_seconds) *decode_seconds = r.decode_seconds;
    std::map<std::string, profile::Entry> out;
    for (const profile::Entry& e : profile::snapshot()) out[e.name] = e;
    return std::make_pair(out, r.decode_forwards);
  };
  double decode_s = 0;
  const auto [all, forwards] = profiled(gen.max_new_tokens, &decode_s);
  const auto [prefill, none] = profiled(1, nullptr);
  std::vector<std::pair<double, std::string>> rows;
  double kernels_s = 0;
  for (const auto& [name, e] : all) {
    auto it = prefill.find(name);
    const double s = e.seconds - (it == prefill.end() ? 0.0 : it->second.seconds);
    const int64_t calls = e.calls - (it == prefill.end() ? 0 : it->second.calls);
    if (calls <= 0) continue;
    kernels_s += s;
    rows.emplace_back(s, name);
    emit({{"bench", "generate"},
          {"figure", "decode_profile"},
          {"config", config},
          {"kernel", name},
          {"calls_per_token", double(calls) / double(forwards)},
          {"ms_per_token", s / double(forwards) * 1e3},
          {"share", decode_s > 0 ? s / decode_s : 0.0}});
  }
  emit({{"bench", "generate"},
        {"figure", "decode_profile_total"},
        {"config", config},
        {"ms_per_token", decode_s / double(forwards) * 1e3},
        {"kernels_ms_per_token", kernels_s / double(forwards) * 1e3},
        {"outside_kernels_share", decode_s > 0 ? 1.0 - kernels_s / decode_s : 0.0}});
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run_generate_bench(const GenerateBenchOptions& opt) {
  poll_between_regions_by_default();
  const models::ConfigPtr config_ptr =
      opt.model.empty() ? load_config(opt.config) : models::load_model_source_config(opt.model);
  const models::ModelConfig& config = *config_ptr;
  TESSEL_CHECK(opt.prompt + opt.tokens <= config.max_positions(), "bench generate: prompt ",
               opt.prompt, " + tokens ", opt.tokens, " exceeds max_positions ",
               config.max_positions());
  std::cerr << "tessel bench generate: "
            << (opt.model.empty() ? "config " + opt.config : "model " + opt.model) << ", prompt "
            << opt.prompt << ", tokens " << opt.tokens << ", " << num_threads() << " threads\n";
  const BenchLimits lim = bench_peak(std::min(opt.seconds, 0.5));

  auto t0 = Clock::now();
  Generator generator(opt.seed);
  auto model =
      opt.model.empty() ? config.build_random(generator) : models::load_model_source(opt.model);
  model->eval();
  models::convert_inference_weights(*model, models::parse_inference_weights(opt.weights));
  const double build_s = std::chrono::duration<double>(Clock::now() - t0).count();

  std::mt19937_64 rng(opt.seed);
  std::uniform_int_distribution<int64_t> token(0, config.vocabulary_size() - 1);
  std::vector<int64_t> prompt(size_t(opt.prompt));
  for (auto& id : prompt) id = token(rng);

  models::GenerationOptions gen;
  gen.max_new_tokens = opt.tokens;
  gen.sampling.temperature = 0.0;         // greedy: no stop token, so every run decodes all tokens
  models::generate(*model, prompt, gen);  // warm-up of both phases

  // Whole runs (prefill then decode) until the budget is spent; medians of each phase's rate.
  // Each run's decode is set against the read probe measured right after it: on a shared host
  // the memory's rate moved 17-24 GB/s (one thread) between the start-up probe and the decode
  // minutes later, so a fraction of the floor against the start-up figure measured the host.
  const double bytes = active_weight_bytes(*model);
  ReadProbe probe;
  std::vector<double> prefill_tps, decode_tps, probe_gbs, fractions;
  auto start = Clock::now();
  do {
    models::GenerationResult r = models::generate(*model, prompt, gen);
    prefill_tps.push_back(double(opt.prompt) / r.prefill_seconds);
    decode_tps.push_back(double(r.decode_forwards) / r.decode_seconds);
    probe_gbs.push_back(probe.gbs(0.0));
    fractions.push_back(bytes * decode_tps.back() / 1e9 / probe_gbs.back());
  } while (std::chrono::duration<double>(Clock::now() - start).count() < opt.seconds);

  json shape = {{"family", std::string(config.family().name())},
                {"n_layer", config.num_layers()},
                {"n_embd", config.hidden_size()},
                {"n_head", config.num_heads()},
                {"vocab_size", config.vocabulary_size()}};
  if (!opt.model.empty()) shape["path"] = opt.model;
  const double prefill = median(prefill_tps), decode = median(decode_tps);
  const double stored_bytes = double(weight_bytes(*model));
  emit({{"bench", "generate"},
        {"figure", "prefill"},
        {"config", opt.config},
        {"model", shape},
        {"prompt", opt.prompt},
        {"tokens_per_s", prefill},
        {"ms", double(opt.prompt) / prefill * 1e3},
        {"runs", int(prefill_tps.size())},
        {"build_s", build_s}});
  emit({{"bench", "generate"},
        {"figure", "decode"},
        {"config", opt.config},
        {"weights", opt.weights},
        {"prompt", opt.prompt},
        {"tokens", opt.tokens},
        {"tokens_per_s", decode},
        {"ms_per_token", 1e3 / decode},
        {"runs", int(decode_tps.size())},
        {"threads", num_threads()},
        {"pool_spin_us", detail::pool_spin_us()}});  // -1: OpenMP regions instead of the pool
  emit({{"bench", "generate"},
        {"figure", "decode_bandwidth"},
        {"weight_bytes", bytes},  // read per token: the active weights of an MoE model
        {"stored_weight_bytes", stored_bytes},
        {"gbs", bytes * decode / 1e9},
        // The probes right after each run (their median) and the runs' own fractions (median);
        // the start-up probe beside them.
        {"read_bandwidth_gbs", median(probe_gbs)},
        {"fraction_of_read_bandwidth", median(fractions)},
        {"read_bandwidth_gbs_at_start", lim.read_gbs},
        {"probes", int(probe_gbs.size())}});
  if (opt.profile) emit_decode_profile(*model, prompt, gen, opt.config);
}

}  // namespace

void add_bench_generate_command(CLI::App& bench) {
  auto opt = std::make_shared<GenerateBenchOptions>();
  auto* cmd = bench.add_subcommand("generate",
                                   "prefill and cached greedy decode throughput of a random model "
                                   "of any family (fp32, batch 1)");
  cmd->add_option("--config", opt->config,
                  "preset of any family (124M, llama:smollm-135m, ...) or config.json path")
      ->capture_default_str();
  cmd->add_option("--model", opt->model,
                  "model directory or .gguf (quantized or not) to measure instead of --config");
  cmd->add_option("--weights", opt->weights,
                  "matrices converted after loading: int8, bf16, f16 or stored")
      ->capture_default_str();
  cmd->add_option("--prompt", opt->prompt, "prompt tokens")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--tokens", opt->tokens, "tokens to generate")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--seconds", opt->seconds, "time budget for the timed runs (at least one)")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  cmd->add_option("-s,--seed", opt->seed, "seed of the weights and the prompt")
      ->capture_default_str();
  cmd->add_flag("--profile", opt->profile,
                "after the timed runs, one profiled run: the decode's time per kernel");
  cmd->callback([opt] { run_generate_bench(*opt); });
}

}  // namespace tessel::cli
