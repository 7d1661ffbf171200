// SPDX-License-Identifier: Apache-2.0
// `tessel bench serve`: a load generator against any OpenAI-compatible server (tessel serve, vLLM,
// llama.cpp's server). Closed loop at fixed concurrencies or open loop at Poisson request rates,
// prompt and output lengths from a distribution or prompts from a dataset; per run one JSON line
// (throughput, TTFT, TPOT, ITL, latency percentiles, errors by kind, the server's token counts
// beside the client's) and one human line on stderr. With -m MODEL the same requests also run
// through tessel's in-process generation one at a time, the baseline each run is compared with.
#include "tessel/cli/bench_serve.h"

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "tessel/cli/commands.h"
#include "tessel/cli/model_args.h"
#include "tessel/core/threads.h"
#include "tessel/io/tokenizer.h"
#include "tessel/models/family.h"
#include "tessel/models/gguf_model.h"

namespace tessel::cli {

namespace {

using nlohmann::json;

// Each run of a sweep takes its requests from its own range of indices: a later run never
// repeats an earlier run's prompts, which a server's prefix cache would otherwise answer.
constexpr int64_t kRunStride = int64_t(1) << 32;
constexpr int64_t kWarmupFirst = int64_t(1) << 40;

template <typename T>
std::vector<T> parse_list(const std::string& text, const std::string& what) {
  std::vector<T> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::istringstream one(item);
    T v{};
    one >> v;
    TESSEL_CHECK(!one.fail() && one.eof() && v > T(0), what, ": '", item, "' in '", text,
                 "' is not a positive number (expected a comma-separated list, e.g. 1,4,16)");
    out.push_back(v);
  }
  TESSEL_CHECK(!out.empty(), what, ": empty list");
  return out;
}

json summary_json(const serve::Summary& s) {
  return {{"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"count", s.count}};
}

json figures_json(const serve::RunFigures& f) {
  json errors = json::object();
  for (const auto& [kind, n] : f.errors) errors[kind] = n;
  return {{"completed", f.completed},
          {"failed", f.failed},
          {"errors", errors},
          {"duration_s", f.duration_s},
          {"requests_per_s", f.requests_per_s},
          {"output_tokens_per_s", f.output_tokens_per_s},
          {"total_tokens_per_s", f.total_tokens_per_s},
          {"ttft_s", summary_json(f.ttft_s)},
          {"tpot_s", summary_json(f.tpot_s)},
          {"itl_s", summary_json(f.itl_s)},
          {"latency_s", summary_json(f.latency_s)},
          {"ttft_histogram",
           {{"le", f.ttft_histogram.bounds()}, {"counts", f.ttft_histogram.counts()}}},
          {"tokens",
           {{"output", f.output_tokens},
            {"prompt", f.prompt_tokens},
            {"requested_output", f.requested_output_tokens},
            {"server_completion", f.server_completion_tokens},
            {"server_prompt", f.server_prompt_tokens},
            {"requests_with_usage", f.with_usage},
            {"client_chunks", f.client_chunks},
            {"client_tokens", f.with_client_tokens > 0 ? json(f.client_tokens) : json(nullptr)},
            {"planned_prompt", f.planned_prompt_tokens}}}};
}

std::string ms(double s) {
  std::ostringstream o;
  o.precision(s < 0.1 ? 2 : 3);
  o << s * 1e3 << " ms";
  return o.str();
}

void human_line(const std::string& what, const serve::RunFigures& f,
                std::optional<double> baseline_tps) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << "tessel bench serve: " << what << ": " << f.completed << " requests";
  if (f.failed) o << " (" << f.failed << " failed)";
  o << " in " << f.duration_s << " s: " << f.requests_per_s << " req/s, " << f.output_tokens_per_s
    << " output tok/s";
  if (baseline_tps && *baseline_tps > 0)
    o << " (" << f.output_tokens_per_s / *baseline_tps << "x baseline)";
  o.unsetf(std::ios::fixed);
  if (f.ttft_s.count) o << "; TTFT p50 " << ms(f.ttft_s.p50) << " p99 " << ms(f.ttft_s.p99);
  if (f.tpot_s.count) o << "; TPOT p50 " << ms(f.tpot_s.p50);
  if (f.itl_s.count) o << "; ITL p50 " << ms(f.itl_s.p50) << " p99 " << ms(f.itl_s.p99);
  std::cerr << o.str() << std::endl;
}

// Counts tokens of the received text with the client's tokenizer, after the run (so the run's
// threads do no tokenizing).
void count_client_tokens(std::vector<serve::RequestRecord>& records, const io::Tokenizer* tok) {
  if (!tok) return;
  for (serve::RequestRecord& r : records) {
    if (r.ok()) r.client_tokens = int64_t(tok->encode(r.text).size());
  }
}

// The first failure of each kind, with when it happened and what had arrived by then.
void report_failures(const std::vector<serve::RequestRecord>& records) {
  std::map<std::string, const serve::RequestRecord*> first;
  for (const serve::RequestRecord& r : records) {
    if (!r.ok() && !first.count(r.error)) first[r.error] = &r;
  }
  for (const auto& [kind, r] : first) {
    std::cerr << "tessel bench serve: " << kind << ": " << r->error_message.substr(0, 300)
              << " (request " << r->index << ", " << r->start_s << " s into the run, after "
              << r->latency_s() << " s and " << r->chunks << " chunks)\n";
  }
}

void run_serve_bench(const ServeBenchOptions& opt, const CLI::App& cmd) {
  poll_between_regions_by_default();
  const bool closed = cmd.count("--concurrency") > 0, open = cmd.count("--rate") > 0;
  TESSEL_CHECK(!(closed && open), "bench serve: give --concurrency or --rate, not both");
  TESSEL_CHECK(opt.requests >= 0, "bench serve: --requests ", opt.requests, " must be >= 0");
  TESSEL_CHECK(opt.duration >= 0, "bench serve: --duration ", opt.duration, " must be >= 0");
  TESSEL_CHECK(opt.local_model.empty() || opt.tokenizer.empty(),
               "bench serve: -m brings its own tokenizer; give -m or --tokenizer, not both");
  apply_threads(opt.threads);
  const std::vector<int64_t> concurrencies =
      open ? std::vector<int64_t>{}
           : parse_list<int64_t>(closed ? opt.concurrency : "1", "bench serve --concurrency");
  const std::vector<double> rates =
      open ? parse_list<double>(opt.rate, "bench serve --rate") : std::vector<double>{};
  const serve::BenchEndpoint endpoint = serve::parse_bench_endpoint(opt.endpoint);
  serve::WorkloadSpec spec;
  spec.seed = opt.seed;
  spec.prompt_tokens = serve::LengthDistribution::parse(opt.prompt_tokens, "--prompt-tokens");
  spec.output_tokens = serve::LengthDistribution::parse(opt.output_tokens, "--output-tokens");
  if (!opt.dataset.empty()) {
    spec.dataset = serve::split_dataset(read_text_input(opt.dataset, "bench serve --dataset"));
    TESSEL_CHECK(!spec.dataset.empty(), "bench serve: --dataset ", opt.dataset,
                 " holds no prompts (one per line, or fortune entries between '%' lines)");
  }

  // The client's tokenizer and vocabulary: -m MODEL (which also gives the baseline) or
  // --tokenizer; the server's report; else a size every common vocabulary reaches.
  std::optional<io::Tokenizer> tokenizer;
  int64_t vocab = opt.vocab, model_vocab = 0;
  std::string vocab_from = "--vocab";
  if (!opt.local_model.empty()) {
    check_model_dir(opt.local_model, "bench serve -m");
    model_vocab = models::load_model_source_config(opt.local_model)->vocabulary_size();
    if (has_tokenizer_files(opt.local_model)) tokenizer = io::Tokenizer::load(opt.local_model);
  } else if (!opt.tokenizer.empty()) {
    tokenizer = io::Tokenizer::load(opt.tokenizer);
  }
  ClientSettings settings;
  settings.endpoint = endpoint;
  settings.stream = opt.stream;
  settings.ignore_eos = opt.ignore_eos;
  settings.temperature = opt.temperature;
  settings.timeout_s = opt.timeout;
  settings.api_key = opt.api_key;
  if (tokenizer) {
    const io::Tokenizer* t = &*tokenizer;
    settings.ids_to_text = [t](const std::vector<int64_t>& ids) {
      std::vector<int32_t> v(ids.begin(), ids.end());
      return t->decode(v);
    };
  }
  const ServeTarget target = parse_base_url(opt.url);
  serve::ModelList served = ServeClient(target, settings).models();
  settings.model = opt.model;
  if (settings.model.empty()) {
    TESSEL_CHECK(!served.ids.empty(), "bench serve: GET ", opt.url,
                 "/v1/models lists no model; give --model NAME");
    settings.model = served.ids.front();
  }
  if (vocab == 0 && (model_vocab > 0 || tokenizer)) {
    vocab = model_vocab > 0 ? model_vocab : tokenizer->vocab_size();
    if (model_vocab > 0 && tokenizer) vocab = std::min(model_vocab, tokenizer->vocab_size());
    vocab_from = opt.local_model.empty() ? "the tokenizer" : "the model";
  }
  if (vocab == 0 && served.vocab_size) {
    vocab = *served.vocab_size;
    vocab_from = "the server's /v1/models";
  }
  if (vocab == 0) {
    vocab = 32000;
    vocab_from = "the default (give --vocab or a tokenizer)";
  }
  spec.vocab_size = vocab;
  spec.shared_prefix_tokens = opt.shared_prefix_tokens;
  const serve::Workload workload(spec);
  const ServeClient client(target, settings);
  std::cerr << "tessel bench serve: " << opt.url << " model '" << settings.model << "', "
            << opt.endpoint << ", "
            << (spec.dataset.empty()
                    ? "prompt tokens " +
                          (spec.shared_prefix_tokens > 0
                               ? std::to_string(spec.shared_prefix_tokens) + " shared + "
                               : std::string()) +
                          spec.prompt_tokens.describe() + " (random ids below " +
                          std::to_string(vocab) + ", from " + vocab_from + ")"
                    : std::to_string(spec.dataset.size()) + " prompts from " + opt.dataset)
            << ", output tokens " << spec.output_tokens.describe()
            << (opt.stream ? ", streamed" : ", not streamed") << "\n";
  const json common = {
      {"bench", "serve"},
      {"url", opt.url},
      {"endpoint", opt.endpoint},
      {"model", settings.model},
      {"prompt_tokens", spec.dataset.empty() ? json(spec.prompt_tokens.describe()) : json(nullptr)},
      {"shared_prefix_tokens", spec.shared_prefix_tokens},
      {"dataset", opt.dataset.empty() ? json(nullptr) : json(opt.dataset)},
      {"output_tokens", spec.output_tokens.describe()},
      {"stream", opt.stream},
      {"ignore_eos", opt.ignore_eos},
      {"temperature", opt.temperature},
      {"seed", opt.seed}};

  // The baseline first: the server idles meanwhile, and each run's line can carry the ratio.
  std::optional<double> baseline_tps;
  if (!opt.local_model.empty() && opt.baseline_requests > 0) {
    auto model = models::load_model_source(opt.local_model);
    const int64_t vocab_limit = tokenizer ? std::min(model_vocab, tokenizer->vocab_size()) : 0;
    std::vector<serve::RequestRecord> records =
        run_baseline(*model, tokenizer ? &*tokenizer : nullptr, workload, 0, opt.baseline_requests,
                     vocab_limit, opt.temperature);
    const serve::RunFigures f = serve::run_figures(records);
    baseline_tps = f.output_tokens_per_s;
    json line = common;
    line["figure"] = "baseline";
    line["model_path"] = opt.local_model;
    line["requests"] = opt.baseline_requests;
    line["threads"] = num_threads();
    line.update(figures_json(f));
    std::cout << line.dump() << std::endl;
    human_line("baseline (in-process generate, one request at a time)", f, std::nullopt);
  }

  for (int64_t w = 0; w < opt.warmup; ++w) {
    const serve::RequestRecord r =
        client.send(workload.request(kWarmupFirst + w), BenchClock::now());
    if (!r.ok()) std::cerr << "tessel bench serve: warm-up request failed: " << r.error << "\n";
  }

  const size_t runs = open ? rates.size() : concurrencies.size();
  for (size_t run = 0; run < runs; ++run) {
    const int64_t first = int64_t(run) * kRunStride;
    int64_t requests = opt.requests;
    if (requests == 0 && opt.duration == 0) requests = open ? 64 : 8 * concurrencies[run];
    std::vector<serve::RequestRecord> records =
        open ? run_open_loop(client, workload, rates[run], opt.seed + run, first, requests,
                             opt.duration)
             : run_closed_loop(client, workload, concurrencies[run], first, requests, opt.duration);
    count_client_tokens(records, tokenizer ? &*tokenizer : nullptr);
    const serve::RunFigures f = serve::run_figures(records);
    json line = common;
    line["figure"] = "run";
    line["mode"] = open ? "open" : "closed";
    if (open) {
      line["rate"] = rates[run];
    } else {
      line["concurrency"] = concurrencies[run];
    }
    line["requests"] = int64_t(records.size());
    line.update(figures_json(f));
    if (baseline_tps) {
      line["baseline_output_tokens_per_s"] = *baseline_tps;
      line["output_tokens_per_s_vs_baseline"] =
          *baseline_tps > 0 ? f.output_tokens_per_s / *baseline_tps : 0.0;
    }
    std::cout << line.dump() << std::endl;
    report_failures(records);
    std::ostringstream what;
    if (open) {
      what << "open loop at " << rates[run] << " req/s";
    } else {
      what << "concurrency " << concurrencies[run];
    }
    human_line(what.str(), f, baseline_tps);
    if (opt.ignore_eos && f.with_usage > 0 &&
        f.server_completion_tokens != f.requested_output_tokens)
      std::cerr << "tessel bench serve: the server generated " << f.server_completion_tokens
                << " tokens where " << f.requested_output_tokens
                << " were asked for with ignore_eos: it may not honour ignore_eos\n";
  }
}

}  // namespace

void add_bench_serve_command(CLI::App& bench) {
  auto opt = std::make_shared<ServeBenchOptions>();
  auto* cmd = bench.add_subcommand(
      "serve",
      "load generator against an OpenAI-compatible server: throughput, TTFT, TPOT, ITL per run "
      "(JSON lines), with -m MODEL the in-process baseline");
  cmd->add_option("--url", opt->url, "the server's base URL")->capture_default_str();
  cmd->add_option("--model", opt->model,
                  "model name sent in requests (default: the first id of GET /v1/models)");
  cmd->add_option("--endpoint", opt->endpoint, "completions or chat")
      ->check(CLI::IsMember({"completions", "chat"}))
      ->capture_default_str();
  cmd->add_option("--concurrency", opt->concurrency,
                  "closed loop: N clients, each sending its next request when the previous ends; "
                  "a list (1,4,16) runs each (default 1)");
  cmd->add_option("--rate", opt->rate,
                  "open loop: Poisson arrivals at R requests/s; a list runs each");
  cmd->add_option("--requests", opt->requests,
                  "requests per run (default: 8 x the concurrency, or 64 in the open loop)");
  cmd->add_option("--duration", opt->duration, "seconds per run: no new request after it");
  cmd->add_option("--prompt-tokens", opt->prompt_tokens,
                  "prompt length: N, uniform:A:B or normal:MEAN:SD (random token ids)")
      ->capture_default_str();
  cmd->add_option("--shared-prefix-tokens", opt->shared_prefix_tokens,
                  "random ids that open every prompt before its own --prompt-tokens (a shared "
                  "system prompt: what prefix caching saves)")
      ->capture_default_str();
  cmd->add_option("--output-tokens", opt->output_tokens,
                  "max_tokens per request, same forms (with ignore_eos: the exact length)")
      ->capture_default_str();
  cmd->add_option("--dataset", opt->dataset,
                  "prompts from a text file: one per line, or fortune entries between '%' lines");
  cmd->add_flag("--stream,!--no-stream", opt->stream,
                "stream the responses (server-sent events): TTFT and ITL need it")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos,!--no-ignore-eos", opt->ignore_eos,
                "send ignore_eos (vLLM, llama.cpp) so outputs have exactly max_tokens")
      ->capture_default_str();
  cmd->add_option("--temperature", opt->temperature, "sampling temperature sent (0: greedy)")
      ->capture_default_str();
  cmd->add_option("-s,--seed", opt->seed, "seed of the workload (lengths, prompts, arrivals)")
      ->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "requests sent one at a time before the runs")
      ->capture_default_str();
  cmd->add_option("-m,--local-model", opt->local_model,
                  "model directory or .gguf: the client's tokenizer and vocabulary, and the "
                  "baseline (the same requests through in-process generation, one at a time)");
  cmd->add_option("--tokenizer", opt->tokenizer,
                  "tokenizer file or model directory: client token counts and chat prompts");
  cmd->add_option("--vocab", opt->vocab,
                  "random prompt ids are drawn below it (default: the model's, the tokenizer's, "
                  "the server's n_vocab, else 32000)");
  cmd->add_option("--baseline-requests", opt->baseline_requests,
                  "requests of the workload the baseline runs (0: none)")
      ->capture_default_str();
  cmd->add_option("--timeout", opt->timeout, "seconds a request may take")->capture_default_str();
  cmd->add_option("--api-key", opt->api_key, "sent as Authorization: Bearer KEY");
  cmd->add_option("-t,--threads", opt->threads, "threads of the baseline (0: the default)")
      ->capture_default_str();
  cmd->callback([opt, cmd] { run_serve_bench(*opt, *cmd); });
}

}  // namespace tessel::cli
