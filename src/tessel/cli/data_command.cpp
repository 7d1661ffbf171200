// SPDX-License-Identifier: Apache-2.0
// `tessel data prepare`: tokenizes text files into train/val token shards with a manifest. A
// progress bar on stderr (redrawn in place on a terminal, one line every 10 s otherwise) and a
// one-line JSON summary on stdout.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessel/cli/commands.h"
#include "tessel/core/error.h"
#include "tessel/io/token_dataset_prepare.h"

namespace tessel::cli {

namespace {

std::string clock_text(double seconds) {
  const long s = long(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

// Draws "prepare [=====>    ]  45.2%  12.3/27.3 MB  4.1 MB/s  1.2M tokens  ETA 0:00:03".
class ProgressBar {
 public:
  ProgressBar() : tty_(::isatty(STDERR_FILENO) == 1), start_(Clock::now()), last_(start_) {}

  void update(const io::PrepareProgress& p, bool final = false) {
    const auto now = Clock::now();
    const double since_last = std::chrono::duration<double>(now - last_).count();
    if (!final && since_last < (tty_ ? 0.1 : 10.0)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double frac = p.bytes_total ? double(p.bytes_done) / double(p.bytes_total) : 1.0;
    const double rate = elapsed > 0 ? double(p.bytes_done) / 1e6 / elapsed : 0.0;
    const double eta = rate > 0 ? double(p.bytes_total - p.bytes_done) / 1e6 / rate : 0.0;
    const int width = 24, filled = int(frac * width);
    std::string bar(size_t(filled), '=');
    if (filled < width) bar += '>' + std::string(size_t(width - filled - 1), ' ');
    char line[256];
    std::snprintf(
        line, sizeof line, "prepare [%s] %5.1f%%  %.1f/%.1f MB  %.1f MB/s  %.2fM tokens  %s %s",
        bar.c_str(), 100.0 * frac, double(p.bytes_done) / 1e6, double(p.bytes_total) / 1e6, rate,
        double(p.tokens) / 1e6, final ? "took" : "ETA", clock_text(final ? elapsed : eta).c_str());
    if (tty_) {
      std::fprintf(stderr, "\r%s\033[K%s", line, final ? "\n" : "");
    } else {
      std::fprintf(stderr, "%s\n", line);
    }
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool tty_;
  Clock::time_point start_, last_;
};

struct PrepareArgs {
  io::PrepareOptions options;
  std::string split = "auto";
  bool quiet = false;
};

void run_prepare(PrepareArgs& args) {
  io::PrepareOptions& o = args.options;
  const auto split = io::parse_document_split(args.split);
  TESSEL_CHECK(split.has_value(), "data prepare: --split '", args.split,
               "' expected auto, file, blank or percent");
  o.split = *split;
  ProgressBar bar;
  io::PrepareProgress last;
  if (!args.quiet) {
    o.progress = [&](const io::PrepareProgress& p) {
      last = p;
      bar.update(p);
    };
    o.note = [](const std::string& note) {
      std::fprintf(stderr, "tessel: data prepare: %s\n", note.c_str());
    };
  }
  const io::PrepareSummary sum = io::prepare_token_dataset(o);
  if (!args.quiet) bar.update(last, true);
  auto split_json = [](const io::PrepareSplitSummary& s) {
    return nlohmann::json{
        {"documents", s.documents}, {"tokens", s.tokens}, {"shards", s.shards.size()}};
  };
  std::cout << nlohmann::json{{"command", "data prepare"},
                              {"manifest", sum.manifest},
                              {"inputs", sum.inputs.size()},
                              {"input_bytes", sum.input_bytes},
                              {"vocab_size", sum.vocab_size},
                              {"dtype", sum.token_bytes == 2 ? "uint16" : "uint32"},
                              {"train", split_json(sum.train)},
                              {"val", split_json(sum.val)},
                              {"seconds", sum.seconds}}
                   .dump()
            << std::endl;
}

}  // namespace

void add_data_command(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Prepare token datasets for training");
  data->require_subcommand(1);
  auto args = std::make_shared<PrepareArgs>();
  io::PrepareOptions& o = args->options;
  CLI::App* prep = data->add_subcommand(
      "prepare", "Tokenize text files into train/val token shards with a manifest.json");
  prep->add_option("--tokenizer", o.tokenizer,
                   "Tokenizer directory (tokenizer.json, vocab.json + merges.txt, or encoder.json "
                   "+ vocab.bpe) or a tokenizer.json file")
      ->required();
  prep->add_option("--input", o.inputs,
                   "Text files, or directories whose text files are read (sorted by name)")
      ->required();
  prep->add_option("--out", o.out_dir, "Output directory (shards + manifest.json)")->required();
  prep->add_option("--val-fraction", o.val_fraction,
                   "Fraction of the documents, taken from the end, that form the val split")
      ->capture_default_str();
  prep->add_option("--shard-tokens", o.shard_tokens, "Tokens per shard file")
      ->capture_default_str();
  prep->add_flag("--append-eot", o.append_eot,
                 "End every document, the last included, with <|endoftext|> (default: only "
                 "between documents)");
  prep->add_option("--split", args->split,
                   "How files become documents: auto (percent if a line is exactly '%', else "
                   "file), file, blank (blank-line paragraphs), percent (fortune format)")
      ->capture_default_str();
  prep->add_option("--threads", o.threads, "Tokenizer threads (0: TESSEL_NUM_THREADS or all cores)")
      ->capture_default_str();
  prep->add_flag("--quiet", args->quiet, "No progress bar or notes on stderr");
  prep->callback([args] { run_prepare(*args); });
}

}  // namespace tessel::cli
