// SPDX-License-Identifier: Apache-2.0
// `tessel generate`: loads a GPT-2 in the Hugging Face layout, processes the prompt in one forward,
// then decodes token by token with the key/value cache (greedy at temperature 0, else sampled
// with top-k / top-p). Text output streams the tokens as they come; JSON output is one line with
// the ids, the text and the prompt and generation throughput. With --tp N under mpirun -np N the
// model is split by the family's tensor-parallel plan (train/model_tensor_parallel.h), each rank
// reading only its share of a model directory (cli/tp_model.h): each rank runs its heads and
// vocabulary rows, the last position's logits are gathered before sampling, and rank 0 alone
// prints; the ids are those of one rank (with --weights too: int8 keeps the whole rows' scales).
// With --pp N each rank holds one pipeline stage (cli/pp_model.h): the hidden states flow from rank
// to rank, the last one's logits are broadcast, and every rank samples the same ids; with --tp T
// as well, each stage is split among T ranks.
// With --ep N a mixture-of-experts model's experts are spread over the ranks (cli/ep_model.h):
// every rank runs the whole forward and gathers its MoE layers' expert rows, so every rank samples
// the same ids as one process; with --tp T as well (N·T ranks) the dense parts are tensor-parallel
// and each expert's FFN columns split over tp, as --tp alone splits a mixture of experts; with
// --pp P (N·P ranks) each pipeline stage's experts are spread over its N ranks (cli/ep_pp_model.h),
// and with both (N·T·P ranks) each stage's N·T ranks split it as --ep N --tp T splits a model.
// Every process ends with its peak resident set and address space on stderr (cli/peak_memory.h;
// also in the JSON line), so the memory a rank's share saves is visible.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "tessel/cli/commands.h"
#include "tessel/cli/device_option.h"
#include "tessel/cli/ep_model.h"
#include "tessel/cli/ep_pp_model.h"
#include "tessel/cli/job_refusal.h"
#include "tessel/cli/model_args.h"
#include "tessel/cli/peak_memory.h"
#include "tessel/cli/pp_model.h"
#include "tessel/cli/tp_model.h"
#include "tessel/core/threads.h"
#include "tessel/dist/world.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/family.h"
#include "tessel/models/generation.h"
#include "tessel/models/gguf_model.h"
#include "tessel/train/model_tensor_parallel.h"

namespace tessel::cli {

namespace {

struct GenerateArgs {
  std::string model, prompt, prompt_ids, format = "text", weights = "stored";
  int64_t n_predict = 32;
  models::SamplingOptions sampling{0.8, 40, 0.95, 0};
  int threads = 0;
  int tp = 1;
  int ep = 1;
  int pp = 1;
  bool ignore_eos = false;
  std::string device;  // --device: cpu, cuda:N
};

double per_second(int64_t n, double seconds) {
  return seconds > 0 ? double(n) / seconds : 0.0;
}

void run_generate(const GenerateArgs& args, const CLI::App& cmd) {
  poll_between_regions_by_default();
  const bool text_prompt = cmd.count("--prompt") > 0, id_prompt = cmd.count("--prompt-ids") > 0;
  TESSEL_CHECK(text_prompt != id_prompt,
               "generate: give exactly one of -p/--prompt or "
               "--prompt-ids");
  TESSEL_CHECK(args.format == "text" || args.format == "json", "generate: --format '", args.format,
               "' expected text or json");
  TESSEL_CHECK(args.n_predict >= 0, "generate: -n ", args.n_predict, " must be >= 0");
  args.sampling.validate();
  const models::InferenceWeights weights = models::parse_inference_weights(args.weights);
  check_model_dir(args.model, "generate");
  apply_threads(args.threads);
  // Everything that can be refused is checked before the weights are read.
  const models::ConfigPtr config = models::load_model_source_config(args.model);
  const int64_t vocab_size = config->vocabulary_size(), max_positions = config->max_positions();
  std::optional<io::Tokenizer> tokenizer;
  if (has_tokenizer_files(args.model)) {
    tokenizer = io::Tokenizer::load(args.model);
  } else {
    TESSEL_CHECK(
        !text_prompt, "generate: -p needs a tokenizer in ", args.model,
        " (tokenizer.json, tokenizer.model, vocab.json + merges.txt, or encoder.json + vocab.bpe); "
        "give --prompt-ids instead");
    TESSEL_CHECK(args.format == "json", "generate: text output needs a tokenizer in ", args.model,
                 "; use --format json");
  }
  std::vector<int64_t> prompt;
  if (text_prompt) {
    for (int32_t id : tokenizer->encode(args.prompt)) prompt.push_back(id);
    TESSEL_CHECK(!prompt.empty(), "generate: the prompt is empty");
  } else {
    prompt = parse_id_list(args.prompt_ids, "generate --prompt-ids");
  }
  for (int64_t id : prompt) {
    TESSEL_CHECK(id < vocab_size, "generate: prompt id ", id, " is out of range [0, ", vocab_size,
                 ")");
  }
  const int64_t total = int64_t(prompt.size()) + args.n_predict;
  TESSEL_CHECK(total <= max_positions, "generate: prompt of ", prompt.size(), " tokens + -n ",
               args.n_predict, " = ", total,
               " tokens exceeds the context length max_positions = ", max_positions);

  TESSEL_CHECK(args.tp >= 1, "generate: --tp ", args.tp, " must be >= 1");
  const dist::CommPtr ep_world =
      start_expert_parallel(args.model, args.ep, args.tp, "generate", args.pp);
  if (!ep_world) {
    // Every rank of a job reaches the same refusal (the layout, or a model the plan or its
    // experts' width cannot split): rank 0 alone reports it, one line.
    const dist::CommPtr world = dist::detect_launch().size > 1 ? dist::init_world() : nullptr;
    check_on_every_rank(world, [&] {
      check_pp_request(args.model, args.tp, args.pp, 1, "generate");
      if (args.pp == 1 && args.tp > 1) (void)models::inference_tensor_parallel(*config, args.tp);
    });
  }
  const int ranks = args.tp * args.pp;
  TESSEL_CHECK(args.device.empty() || args.device == "cpu" || (args.tp * args.pp * args.ep == 1),
               "generate --device ", args.device,
               ": one process for now (--tp, --pp and --ep run on the CPU)");
  const char* flag = args.pp > 1 ? "--pp" : "--tp";
  const dist::LaunchInfo launch = dist::detect_launch();
  TESSEL_CHECK(ep_world || launch.size == ranks, "generate: ", flag, " ", ranks,
               " ranks, but the job has ", launch.size, " (", launch.describe(),
               "); start it with mpirun -np ", ranks);
  std::shared_ptr<models::CausalLM> model;
  models::GenerationOptions options;
  std::shared_ptr<train::ModelTensorParallel> tp;
  bool leader = true;
  int rank = -1;  // under --tp, --pp or --ep: this process's rank, named in its memory line
  if (ep_world && args.pp > 1) {
    // Expert parallelism inside each stage; every rank gets the logits and samples alike.
    leader = ep_world->rank() == 0;
    rank = ep_world->rank();
    PpRankModel loaded = load_ep_pp_rank_model(
        args.model, weights, ep_world, args.ep, args.tp, 1,
        serve::PipelineStageModel::LogitsTo::kEveryRank, [&](const std::string& line) {
          if (leader) std::fprintf(stderr, "tessel: generate: %s\n", line.c_str());
        });
    std::fprintf(stderr, "tessel: generate: pipeline rank %d runs blocks [%lld, %lld) and %s\n",
                 ep_world->rank(), static_cast<long long>(loaded.model->first_block()),
                 static_cast<long long>(loaded.model->last_block()), loaded.share.c_str());
    model = std::move(loaded.model);
  } else if (ep_world) {
    leader = ep_world->rank() == 0;
    rank = ep_world->rank();
    EpRankModel loaded =
        load_ep_rank_model(args.model, weights, ep_world, args.tp, [&](const std::string& line) {
          if (leader) std::fprintf(stderr, "tessel: generate: %s\n", line.c_str());
        });
    std::fprintf(stderr, "tessel: generate: expert-parallel rank %d %s\n", ep_world->rank(),
                 loaded.share.c_str());
    model = std::move(loaded.model);
    if ((tp = std::move(loaded.tp)))
      options.full_logits = [tp](const Tensor& local) {
        return train::model_tp_full_logits(*tp, local);
      };
  } else if (args.pp > 1) {
    // Each rank reads only its stage's tensors; every rank gets the logits and samples alike.
    dist::CommPtr world = dist::init_world();
    leader = world->rank() == 0;
    rank = world->rank();
    PpRankModel loaded = load_pp_rank_model(
        args.model, weights, world, args.tp, 1, serve::PipelineStageModel::LogitsTo::kEveryRank,
        [&](const std::string& line) {
          if (leader) std::fprintf(stderr, "tessel: generate: %s\n", line.c_str());
        });
    std::fprintf(stderr, "tessel: generate: pipeline rank %d runs blocks [%lld, %lld) and %s\n",
                 world->rank(), static_cast<long long>(loaded.model->first_block()),
                 static_cast<long long>(loaded.model->last_block()), loaded.share.c_str());
    model = std::move(loaded.model);
  } else if (args.tp > 1) {
    // Each rank reads only its share of a model directory or a GGUF file.
    dist::CommPtr world = dist::init_world();
    leader = world->rank() == 0;
    rank = world->rank();
    TpRankModel loaded =
        load_tp_rank_model(args.model, weights, world, "generate", [&](const std::string& line) {
          if (leader) std::fprintf(stderr, "tessel: generate: %s\n", line.c_str());
        });
    std::fprintf(stderr, "tessel: generate: tensor-parallel rank %d %s\n", world->rank(),
                 loaded.share.c_str());
    model = std::move(loaded.model);
    tp = std::move(loaded.tp);
    options.full_logits = [tp](const Tensor& local) {
      return train::model_tp_full_logits(*tp, local);
    };
  } else {
    model = models::load_model_source(args.model);
    apply_inference_weights(*model, weights, "generate");
    if (!args.device.empty()) move_model_to_device(*model, args.device, "generate");
  }
  options.max_new_tokens = args.n_predict;
  options.sampling = args.sampling;
  const int64_t eos = config->eos_id().value_or(-1);
  if (!args.ignore_eos && eos >= 0 && eos < vocab_size) options.stop_token = eos;
  if (tokenizer) options.vocab_limit = std::min(vocab_size, tokenizer->vocab_size());
  const bool stream = args.format == "text" && leader;
  if (stream) {
    std::vector<int32_t> p(prompt.begin(), prompt.end());
    std::fputs(tokenizer->decode_bytes(p).c_str(), stdout);
    std::fflush(stdout);
    // Raw bytes per token: a character split across tokens is completed by the next ones.
    options.on_token = [&](int64_t id) {
      if (id == eos && !args.ignore_eos) return true;
      const int32_t one = int32_t(id);
      std::fputs(tokenizer->decode_bytes({&one, 1}).c_str(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  const models::GenerationResult r = models::generate(*model, prompt, options);
  const double prompt_rate = per_second(int64_t(prompt.size()), r.prefill_seconds);
  const double decode_rate = per_second(r.decode_forwards, r.decode_seconds);
  // Every rank says what the process peaked at (loading and generating), after its output.
  const auto print_memory = [rank, &r] {
    std::fprintf(stderr, "tessel: generate: %s\n", peak_memory_line(rank).c_str());
    std::fprintf(stderr, "tessel: generate: rank %d KV cache %lld bytes\n", rank < 0 ? 0 : rank,
                 static_cast<long long>(r.kv_cache_bytes));
    std::fprintf(stderr,
                 "tessel: generate: rank %d allocator peak %lld bytes above the loaded model's "
                 "%lld\n",
                 rank < 0 ? 0 : rank, static_cast<long long>(r.allocator_peak_bytes),
                 static_cast<long long>(r.allocator_base_bytes));
  };
  if (!leader) {
    print_memory();
    return;
  }
  if (stream) {
    std::fputs("\n", stdout);
    std::fprintf(stderr,
                 "tessel: generate: prompt %zu tokens, %.1f tokens/s; generated %zu tokens, "
                 "%.1f tokens/s\n",
                 prompt.size(), prompt_rate, r.tokens.size(), decode_rate);
    print_memory();
    return;
  }
  nlohmann::json out{{"command", "generate"},
                     {"prompt_ids", prompt},
                     {"generated_ids", r.tokens},
                     {"generated_logits", r.token_logits},
                     {"prompt_tokens", prompt.size()},
                     {"generated_tokens", r.tokens.size()},
                     {"stopped_at_eos", r.stopped},
                     {"prompt_seconds", r.prefill_seconds},
                     {"generation_seconds", r.decode_seconds},
                     {"prompt_tokens_per_s", prompt_rate},
                     {"generation_tokens_per_s", decode_rate},
                     {"temperature", args.sampling.temperature},
                     {"top_k", args.sampling.top_k},
                     {"top_p", args.sampling.top_p},
                     {"seed", args.sampling.seed},
                     {"weights", args.weights},
                     {"kv_cache_bytes", r.kv_cache_bytes},
                     {"allocator_base_bytes", r.allocator_base_bytes},
                     {"allocator_peak_bytes", r.allocator_peak_bytes}};
  if (tokenizer) {
    std::vector<int32_t> gen(r.tokens.begin(), r.tokens.end());
    std::vector<int32_t> p(prompt.begin(), prompt.end());
    out["prompt"] = tokenizer->decode(p);
    out["text"] = tokenizer->decode(gen);
  } else {
    out["prompt"] = nullptr;
    out["text"] = nullptr;
  }
  add_peak_memory(out);
  // Invalid UTF-8 cannot occur (decode repairs it), so dump() does not throw.
  std::cout << out.dump() << std::endl;
  print_memory();
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate text with a GPT-2 model directory (KV-cache decoding)");
  add_device_option(*cmd, &args->device);
  cmd->add_option(
         "-m,--model", args->model,
         "Model directory (config.json + model.safetensors + tokenizer files) or a .gguf file")
      ->required();
  cmd->add_option("-p,--prompt", args->prompt, "Prompt text");
  cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt as comma-separated token ids");
  cmd->add_option("-n,--n-predict", args->n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temp", args->sampling.temperature, "Temperature (0: greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", args->sampling.top_k, "Sample among the k most likely (0: all)")
      ->capture_default_str();
  cmd->add_option("--top-p", args->sampling.top_p,
                  "Sample among the most likely tokens of total probability p (1: all)")
      ->capture_default_str();
  cmd->add_option("-s,--seed", args->sampling.seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--format", args->format, "text (streamed) or json")->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "Threads (0: TESSEL_NUM_THREADS or all cores)")
      ->capture_default_str();
  cmd->add_option(
         "--tp", args->tp,
         "Tensor-parallel ranks: run under mpirun -np N with --tp N (same ids as one rank)")
      ->capture_default_str();
  cmd->add_option("--ep", args->ep,
                  "Expert-parallel ranks of a mixture-of-experts model: run under mpirun -np N "
                  "with --ep N, -np N*T with --tp T or --pp T as well (same ids as one rank)")
      ->capture_default_str();
  cmd->add_option("--pp", args->pp,
                  "Pipeline stages: run under mpirun -np N with --pp N, each rank holding its "
                  "stage's blocks (same ids as one rank)")
      ->capture_default_str();
  cmd->add_option("--weights", args->weights, kWeightsHelp)->capture_default_str();
  cmd->add_flag("--ignore-eos", args->ignore_eos,
                "Keep generating after the end-of-text token (eos_token_id of config.json)");
  cmd->callback([args, cmd] { run_generate(*args, *cmd); });
}

}  // namespace tessel::cli
