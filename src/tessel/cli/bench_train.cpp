// SPDX-License-Identifier: Apache-2.0
// `tessel bench train`: the speed of one GPT-2 training step (124M shape by default, random
// tokens, no dropout): forward + mean cross-entropy, backward, global gradient-norm clipping to
// 1.0, an AdamW step (weight decay on the matrices only) and zeroing the gradients. --precision
// bf16 / fp16 runs forward and backward on 16-bit weight copies over f32 masters, as
// train.precision does (fp16 without the loss scaler: one multiply per step). Reports ms/step,
// tokens/s, MFU against the f32 GEMM peak measured in the same run and the allocator's peak
// memory, runs the same step in PyTorch (bench/peers/torch_train.py: GPT-2 and LLaMA) for the
// ratio, and with --breakdown times every kernel call of a few steps (core/profile.h) to say
// where a step goes.
// One JSON line per figure.
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "tessel/autograd/engine.h"
#include "tessel/cli/commands.h"
#include "tessel/core/profile.h"
#include "tessel/core/threads.h"
#include "tessel/models/family.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/models/llama/llama_config.h"
#include "tessel/nn/autocast.h"
#include "tessel/tensor/allocator.h"
#include "tessel/train/optim/adamw.h"
#include "tessel/train/optim/grad_clip.h"

namespace tessel::cli {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct TrainBenchOptions {
  std::string model = "124M";
  int64_t batch = 4, seq = 64;
  int steps = 10, warmup = 2, threads = 0, breakdown_steps = 3;
  std::string peer = "torch";
  std::string precision = "fp32";  // fp32 | bf16 | fp16
  std::string peer_script;  // empty: bench/peers/torch_train.py, found from cwd or the binary
  bool breakdown = false;
  uint64_t seed = 0;
};

void emit(json j) {
  j["threads"] = num_threads();
  std::cout << j.dump() << std::endl;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU seconds (user + system, all threads) and minor page faults of this process so far. On a
// loaded machine wall time swings by 2x or more; CPU time per step moves far less, and page
// faults count the fresh memory a step touches.
struct Usage {
  double cpu_s = 0;
  double faults = 0;
};

Usage usage_now() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  auto sec = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return {sec(r.ru_utime) + sec(r.ru_stime), double(r.ru_minflt)};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A config.json path or a preset of any family ("124M", "llama:tiny").
models::ConfigPtr load_config(const std::string& what) {
  models::ConfigPtr c = std::filesystem::is_regular_file(what) ? models::load_model_config(what)
                                                               : models::find_preset(what);
  if (const auto* gpt2 = dynamic_cast<const models::GPT2Config*>(c.get())) {
    // Dropout off on both sides: the comparison is of the arithmetic every step must do.
    auto copy = std::make_shared<models::GPT2Config>(*gpt2);
    copy->resid_pdrop = copy->embd_pdrop = copy->attn_pdrop = 0.0;
    return copy;
  }
  return c;
}

// The model, optimizer and batch of one benchmark, and the step being measured.
class TrainStep {
 public:
  TrainStep(const models::ModelConfig& config, const TrainBenchOptions& opt)
      : generator_(opt.seed),
        dtype_(opt.precision == "bf16"   ? DType::BF16
               : opt.precision == "fp16" ? DType::F16
                                         : DType::F32) {
    model_ = config.build_random(generator_);
    model_->train();
    params_ = model_->parameters();
    train::AdamWOptions adam;
    adam.weight_decay = 0.1;
    optimizer_ = std::make_unique<train::AdamW>(model_->named_parameters(), adam);
    std::mt19937_64 rng(opt.seed + 1);
    std::uniform_int_distribution<int64_t> token(0, config.vocabulary_size() - 1);
    std::vector<int64_t> ids(size_t(opt.batch * opt.seq)), targets(ids.size());
    for (auto& id : ids) id = token(rng);
    for (auto& id : targets) id = token(rng);
    ids_ = from_data(ids, Shape{opt.batch, opt.seq});
    targets_ = from_data(targets, Shape{opt.batch, opt.seq});
  }

  // One step; returns the loss. Phases are profile scopes, so --breakdown sees them too.
  double run() {
    Tensor loss;
    {
      // The 16-bit weight copies live until backward has used them.
      nn::LowPrecisionScope low_precision(*model_, dtype_);
      {
        profile::Scope s("phase.forward");
        loss = model_->loss(ids_, targets_);
      }
      {
        profile::Scope s("phase.backward");
        autograd::backward(loss);
      }
    }
    {
      profile::Scope s("phase.clip_grad_norm");
      train::clip_grad_norm(params_, 1.0);
    }
    {
      profile::Scope s("phase.adamw");
      optimizer_->step(3e-4);
    }
    {
      profile::Scope s("phase.zero_grad");
      model_->zero_grad();
    }
    return loss.to(DType::F64).data<double>()[0];
  }

  const models::CausalLM& model() const { return *model_; }

 private:
  Generator generator_;
  DType dtype_;
  std::shared_ptr<models::CausalLM> model_;
  std::vector<Tensor> params_;
  std::unique_ptr<train::AdamW> optimizer_;
  Tensor ids_, targets_;
};

std::filesystem::path find_peer_script(const TrainBenchOptions& opt) {
  if (!opt.peer_script.empty()) return opt.peer_script;
  const std::filesystem::path rel = "bench/peers/torch_train.py";
  if (std::filesystem::is_regular_file(rel)) return rel;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  for (auto dir = exe.parent_path(); !ec && !dir.empty() && dir != dir.root_path();
       dir = dir.parent_path()) {
    if (std::filesystem::is_regular_file(dir / rel)) return dir / rel;
  }
  TESSEL_FAIL("bench train: cannot find ", rel.string(),
              " (run from the repository root, or pass --peer-script PATH, or --peer none)");
}

// The peer's model flags for `config`: GPT-2, or LLaMA without what the peer does not implement.
std::string peer_shape_flags(const models::ModelConfig& config, const TrainBenchOptions& opt) {
  auto num = [](auto v) { return std::to_string(v); };
  if (const auto* g = dynamic_cast<const models::GPT2Config*>(&config)) {
    return " --n-layer " + num(g->n_layer) + " --n-embd " + num(g->n_embd) + " --n-head " +
           num(g->n_head) + " --vocab " + num(g->vocab_size) + " --positions " +
           num(g->n_positions);
  }
  if (const auto* l = dynamic_cast<const models::LlamaConfig*>(&config)) {
    TESSEL_CHECK(l->rope_scaling.type == models::RopeScaling::Type::Default,
                 "bench train: the PyTorch peer has no rope_scaling, and ", config.summary(),
                 " has rope_scaling type '", models::rope_type_name(l->rope_scaling.type),
                 "' (expected none); pass --peer none");
    // A window at least T keys wide masks nothing: the same step as without one.
    TESSEL_CHECK(l->window() == 0 || l->window() >= opt.seq,
                 "bench train: the PyTorch peer has no sliding window, and ", config.summary(),
                 " has sliding_window ", l->window(), " < T ", opt.seq,
                 " (expected none or at least T); pass --peer none");
    // --positions T: the peer's mask and rotary tables need T rows, not max_position_embeddings
    // (131072 for some presets).
    char reals[96];
    std::snprintf(reals, sizeof reals, " --rope-theta %.17g --rms-eps %.17g", l->rope_theta,
                  l->rms_norm_eps);
    return " --family llama --n-layer " + num(l->num_hidden_layers) + " --n-embd " +
           num(l->hidden) + " --n-head " + num(l->num_attention_heads) + " --kv-heads " +
           num(l->num_key_value_heads) + " --head-dim " + num(l->head_dim) + " --intermediate " +
           num(l->intermediate_size) + " --vocab " + num(l->vocab_size) + " --positions " +
           num(opt.seq) + reals + " --tied " + num(int(l->tie_word_embeddings)) + " --qkv-bias " +
           num(int(l->qkv_bias())) + " --o-bias " + num(int(l->o_bias())) + " --mlp-bias " +
           num(int(l->mlp_biases()));
  }
  TESSEL_FAIL("bench train: the PyTorch peer runs GPT-2 and LLaMA only, not ", config.summary(),
              "; pass --peer none");
}

// Runs the PyTorch peer with the same shape and threads; returns its JSON lines.
std::vector<json> run_peer(const models::ModelConfig& config, const TrainBenchOptions& opt) {
  const std::string cmd = "/usr/bin/python3 '" + find_peer_script(opt).string() + "' -B " +
                          std::to_string(opt.batch) + " -T " + std::to_string(opt.seq) +
                          peer_shape_flags(config, opt) + " --steps " + std::to_string(opt.steps) +
                          " --warmup " + std::to_string(opt.warmup) + " --threads " +
                          std::to_string(num_threads()) + (opt.breakdown ? " --breakdown" : "");
  std::cerr << "tessel bench train: peer: " << cmd << "\n";
  FILE* pipe = popen(cmd.c_str(), "r");
  TESSEL_CHECK(pipe != nullptr, "bench train: cannot start the peer: ", cmd);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  TESSEL_CHECK(status == 0, "bench train: the peer exited with status ", status, ": ", cmd);
  std::vector<json> lines;
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    std::string line = out.substr(start, end - start);
    if (!line.empty() && line[0] == '{') lines.push_back(json::parse(line));
    start = end + 1;
  }
  return lines;
}

// Kernel times of `steps` profiled steps, per step, one line per kernel name, then the phases and
// what no kernel accounts for (autograd bookkeeping, allocation, the ops' own checks).
// Each figure also as this thread's CPU time (cpu_ms_per_step), which a loaded machine does not
// inflate; with --threads 1 that is all the step's work.
void run_breakdown(TrainStep& step, int steps, double unprofiled_s) {
  profile::reset();
  profile::set_enabled(true);
  auto t0 = Clock::now();
  const double cpu0 = profile::thread_cpu_seconds();
  for (int i = 0; i < steps; ++i) step.run();
  const double total = seconds_since(t0) / steps;
  const double cpu_total = (profile::thread_cpu_seconds() - cpu0) / steps;
  profile::set_enabled(false);
  double kernels = 0, cpu_kernels = 0;
  std::vector<profile::Entry> phases;
  for (const profile::Entry& e : profile::snapshot()) {
    if (e.name.rfind("phase.", 0) == 0) {
      phases.push_back(e);
      continue;
    }
    const double s = e.seconds / steps;
    kernels += s;
    cpu_kernels += e.cpu_seconds / steps;
    json j = {{"bench", "train"},
              {"figure", "breakdown"},
              {"op", e.name},
              {"ms_per_step", s * 1e3},
              {"cpu_ms_per_step", e.cpu_seconds / steps * 1e3},
              {"share", s / total},
              {"calls_per_step", double(e.calls) / steps}};
    if (e.flops > 0) j["gflops"] = e.flops / e.seconds / 1e9;
    emit(j);
  }
  for (const profile::Entry& e : phases) {
    emit({{"bench", "train"},
          {"figure", "breakdown_phase"},
          {"phase", e.name.substr(6)},
          {"ms_per_step", e.seconds / steps * 1e3},
          {"cpu_ms_per_step", e.cpu_seconds / steps * 1e3},
          {"share", e.seconds / steps / total}});
  }
  emit({{"bench", "train"},
        {"figure", "breakdown_total"},
        {"ms_per_step_profiled", total * 1e3},
        {"ms_per_step_unprofiled", unprofiled_s * 1e3},
        {"kernels_ms", kernels * 1e3},
        {"outside_kernels_ms", (total - kernels) * 1e3},
        {"outside_kernels_share", (total - kernels) / total},
        {"cpu_ms_per_step_profiled", cpu_total * 1e3},
        {"cpu_kernels_ms", cpu_kernels * 1e3},
        {"cpu_outside_kernels_ms", (cpu_total - cpu_kernels) * 1e3}});
}

void run_train_bench(const TrainBenchOptions& opt) {
  if (opt.threads > 0) set_num_threads(opt.threads);
  const models::ConfigPtr config_ptr = load_config(opt.model);
  const models::ModelConfig& config = *config_ptr;
  TESSEL_CHECK(opt.seq <= config.max_positions(), "bench train: T ", opt.seq,
               " exceeds max_positions ", config.max_positions());
  std::cerr << "tessel bench train: model " << opt.model << ", B " << opt.batch << ", T " << opt.seq
            << ", " << num_threads() << " threads\n";
  BenchLimits lim = bench_peak(0.3);

  // The peer first: while it runs, tessel holds no memory or threads.
  std::vector<json> peer;
  if (opt.peer == "torch") peer = run_peer(config, opt);

  auto t0 = Clock::now();
  TrainStep step(config, opt);
  const double build_s = seconds_since(t0);
  for (int i = 0; i < opt.warmup; ++i) step.run();
  std::vector<double> times;
  double loss = 0;
  const Usage u0 = usage_now();
  const double state_bytes = double(cpu_allocator().bytes_in_use());  // weights + AdamW moments
  cpu_allocator().reset_peak();
  for (int i = 0; i < opt.steps; ++i) {
    auto s0 = Clock::now();
    loss = step.run();
    times.push_back(seconds_since(s0));
  }
  const double peak_bytes = double(cpu_allocator().peak_bytes());
  const Usage u1 = usage_now();
  const double s = median(times);
  const double best_s = *std::min_element(times.begin(), times.end());
  // The peak again after the steps: on a shared machine one measurement can land in a busy
  // moment, and a depressed peak would inflate the MFU.
  lim.gemm_gflops = std::max(lim.gemm_gflops, bench_peak(0.3).gemm_gflops);
  const double tokens = double(opt.batch * opt.seq);
  // Matmul FLOPs per token as the trainer's MFU counts them (ModelConfig::flops_per_token).
  const double n_params = double(step.model().parameter_count());
  const double flops_per_token = config.flops_per_token(opt.seq);
  const double tps = tokens / s;
  const json shape = {{"family", std::string(config.family().name())},
                      {"n_layer", config.num_layers()},
                      {"n_embd", config.hidden_size()},
                      {"n_head", config.num_heads()},
                      {"vocab_size", config.vocabulary_size()},
                      {"parameters", n_params}};
  emit({{"bench", "train"},
        {"figure", "step"},
        {"model", opt.model},
        {"precision", opt.precision},
        {"shape", shape},
        {"batch", opt.batch},
        {"seq", opt.seq},
        {"ms_per_step", s * 1e3},
        {"best_ms", best_s * 1e3},
        {"tokens_per_s", tps},
        {"flops_per_token", flops_per_token},
        {"gflops", flops_per_token * tps / 1e9},
        {"gemm_peak_gflops", lim.gemm_gflops},
        {"mfu", flops_per_token * tps / 1e9 / lim.gemm_gflops},
        {"cpu_ms_per_step", (u1.cpu_s - u0.cpu_s) / opt.steps * 1e3},
        {"page_faults_per_step", (u1.faults - u0.faults) / opt.steps},
        // Tensor allocator: the peak of the timed steps, and above the state held between steps
        // (activations, gradients, 16-bit weight copies, temporaries).
        {"peak_bytes", peak_bytes},
        {"step_peak_bytes", peak_bytes - state_bytes},
        {"steps", opt.steps},
        {"loss", loss},
        {"build_s", build_s}});
  for (const json& line : peer) {
    if (line.value("figure", "") == "step") {
      json p = line;
      p["mfu"] = flops_per_token * p["tokens_per_s"].get<double>() / 1e9 / lim.gemm_gflops;
      std::cout << p.dump() << std::endl;
      const double cpu_ms = (u1.cpu_s - u0.cpu_s) / opt.steps * 1e3;
      emit({{"bench", "train"},
            {"figure", "ratio_tessel_over_torch"},
            {"ratio", tps / p["tokens_per_s"].get<double>()},
            // Fastest step against fastest step: other jobs only ever add time.
            {"ratio_best", p.value("best_ms", 0.0) / (best_s * 1e3)},
            {"tessel_tokens_per_s", tps},
            {"torch_tokens_per_s", p["tokens_per_s"]},
            // Less sensitive to other jobs on the machine than the wall-clock ratio.
            {"cpu_time_ratio", p.value("cpu_ms_per_step", 0.0) / cpu_ms},
            {"peer", p["peer"]}});
    }
  }
  if (opt.breakdown) {
    run_breakdown(step, opt.breakdown_steps, s);
    for (const json& line : peer)
      if (line.value("figure", "") == "breakdown") std::cout << line.dump() << std::endl;
  }
}

}  // namespace

void add_bench_train_command(CLI::App& bench) {
  auto opt = std::make_shared<TrainBenchOptions>();
  auto* cmd = bench.add_subcommand(
      "train", "GPT-2 training step speed: ms/step, tokens/s, MFU, peak memory, PyTorch ratio");
  cmd->add_option("--model", opt->model, "preset (124M, 355M, 774M, 1558M) or config.json path")
      ->capture_default_str();
  cmd->add_option("-B,--batch", opt->batch, "sequences per step")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 16))
      ->capture_default_str();
  cmd->add_option("-T,--seq", opt->seq, "tokens per sequence")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--steps", opt->steps, "timed steps (the median is reported)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "untimed steps first")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option("--threads", opt->threads, "threads (0: TESSEL_NUM_THREADS or all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd->add_option("--precision", opt->precision,
                  "fp32, or bf16 / fp16 weight copies and activations over f32 masters (the "
                  "PyTorch peer stays fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--peer", opt->peer, "run the same step in PyTorch too (torch) or not (none)")
      ->check(CLI::IsMember({"torch", "none"}))
      ->capture_default_str();
  cmd->add_option("--peer-script", opt->peer_script,
                  "path of torch_train.py (default: bench/peers/ from here or the binary)");
  cmd->add_flag("--breakdown", opt->breakdown, "time every kernel call of a few extra steps");
  cmd->add_option("--breakdown-steps", opt->breakdown_steps, "steps profiled for --breakdown")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("-s,--seed", opt->seed, "seed of the weights and the tokens")
      ->capture_default_str();
  cmd->callback([opt] { run_train_bench(*opt); });
}

}  // namespace tessel::cli
