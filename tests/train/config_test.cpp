// SPDX-License-Identifier: Apache-2.0
// The training configuration: defaults, file then `--set` overrides (the last word wins), every
// class of error naming its source, key and allowed range, exact TOML round trips (awkward
// strings, shortest doubles), a key table that is complete and maps each key to its own member,
// and docs/TRAINING.md documenting every key with the code's default and range.
#include "tessel/train/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tessel/core/error.h"

namespace tessel::train {
namespace {

namespace fs = std::filesystem;

// The message of the Error that `fn` throws; fails the test when nothing is thrown.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a tessel::Error";
  return "";
}

std::string parse_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return error_of([&] { TrainConfig::parse(text, overrides, "run.toml"); });
}

std::string set_error(const std::string& override_text) {
  return error_of([&] { TrainConfig::parse("", {override_text}); });
}

// Every member, so that two configurations can be compared without an operator== in the header.
void expect_same(const TrainConfig& a, const TrainConfig& b) {
  EXPECT_EQ(a.model.config, b.model.config);
  EXPECT_EQ(a.model.init_from, b.model.init_from);
  EXPECT_EQ(a.data.dir, b.data.dir);
  EXPECT_EQ(a.data.seed, b.data.seed);
  EXPECT_EQ(a.train.steps, b.train.steps);
  EXPECT_EQ(a.train.micro_batch, b.train.micro_batch);
  EXPECT_EQ(a.train.seq_len, b.train.seq_len);
  EXPECT_EQ(a.train.grad_accum, b.train.grad_accum);
  EXPECT_EQ(a.train.global_batch, b.train.global_batch);
  EXPECT_EQ(a.train.seed, b.train.seed);
  EXPECT_EQ(a.train.threads, b.train.threads);
  EXPECT_EQ(a.train.max_bad_steps, b.train.max_bad_steps);
  EXPECT_EQ(a.train.recompute, b.train.recompute);
  EXPECT_EQ(a.train.precision, b.train.precision);
  EXPECT_EQ(a.train.loss_scale_init, b.train.loss_scale_init);
  EXPECT_EQ(a.train.loss_scale_window, b.train.loss_scale_window);
  EXPECT_EQ(a.parallel.zero_stage, b.parallel.zero_stage);
  EXPECT_EQ(a.parallel.bucket_mb, b.parallel.bucket_mb);
  EXPECT_EQ(a.parallel.overlap, b.parallel.overlap);
  EXPECT_EQ(a.parallel.schedule, b.parallel.schedule);
  EXPECT_EQ(a.parallel.sequence_parallel, b.parallel.sequence_parallel);
  EXPECT_EQ(a.parallel.expert_tensor_parallel, b.parallel.expert_tensor_parallel);
  EXPECT_EQ(a.parallel.tp_plan, b.parallel.tp_plan);
  EXPECT_EQ(a.optim.lr, b.optim.lr);
  EXPECT_EQ(a.optim.min_lr_ratio, b.optim.min_lr_ratio);
  EXPECT_EQ(a.optim.warmup_steps, b.optim.warmup_steps);
  EXPECT_EQ(a.optim.decay, b.optim.decay);
  EXPECT_EQ(a.optim.weight_decay, b.optim.weight_decay);
  EXPECT_EQ(a.optim.beta1, b.optim.beta1);
  EXPECT_EQ(a.optim.beta2, b.optim.beta2);
  EXPECT_EQ(a.optim.eps, b.optim.eps);
  EXPECT_EQ(a.optim.grad_clip, b.optim.grad_clip);
  EXPECT_EQ(a.eval.interval, b.eval.interval);
  EXPECT_EQ(a.eval.batches, b.eval.batches);
  EXPECT_EQ(a.checkpoint.dir, b.checkpoint.dir);
  EXPECT_EQ(a.checkpoint.interval, b.checkpoint.interval);
  EXPECT_EQ(a.checkpoint.keep, b.checkpoint.keep);
  EXPECT_EQ(a.log.interval, b.log.interval);
  EXPECT_EQ(a.log.jsonl, b.log.jsonl);
  EXPECT_EQ(a.log.tensorboard, b.log.tensorboard);
  EXPECT_EQ(a.sample.tokens, b.sample.tokens);
  EXPECT_EQ(a.sample.prompt, b.sample.prompt);
  EXPECT_EQ(a.sample.temperature, b.sample.temperature);
  EXPECT_EQ(a.sample.top_k, b.sample.top_k);
  EXPECT_EQ(a.sample.seed, b.sample.seed);
  EXPECT_EQ(a.machine.peak_gflops, b.machine.peak_gflops);
  EXPECT_EQ(a.fault.nan_at_step, b.fault.nan_at_step);
  EXPECT_EQ(a.fault.kill_at_step, b.fault.kill_at_step);
  EXPECT_EQ(a.fault.save_delay_ms, b.fault.save_delay_ms);
}

// The members expect_same() compares, in table order: the key table must name exactly these.
// clang-format off
const std::vector<std::string> kAllKeys = {
    "model.config",       "model.init_from",     "data.dir",
    "data.seed",          "train.steps",         "train.micro_batch",
    "train.seq_len",      "train.grad_accum",    "train.global_batch",   "train.seed",
    "train.threads",      "train.max_bad_steps", "train.recompute",
    "train.precision", "train.device",    "train.loss_scale_init", "train.loss_scale_window",
    "parallel.zero_stage", "parallel.bucket_mb", "parallel.overlap",
    "parallel.schedule",  "parallel.pipeline_split", "parallel.sequence_parallel", "parallel.expert_tensor_parallel",
    "parallel.tp_plan",
    "optim.lr",           "optim.min_lr_ratio",  "optim.warmup_steps",
    "optim.decay",        "optim.weight_decay",  "optim.beta1",
    "optim.beta2",        "optim.eps",           "optim.grad_clip",
    "eval.interval",      "eval.batches",        "checkpoint.dir",
    "checkpoint.interval", "checkpoint.keep",    "log.interval",
    "log.jsonl",          "log.tensorboard",     "sample.tokens",       "sample.prompt",
    "sample.temperature", "sample.top_k",        "sample.seed",
    "machine.peak_gflops", "memory.device_budget", "memory.host_budget", "memory.nvme_dir",
    "memory.nvme_budget",  "memory.chunk_size",   "memory.prefetch",     "fault.nan_at_step",  "fault.kill_at_step",
    "fault.save_delay_ms"};
// clang-format on

TEST(TrainConfig, EmptyTextGivesTheStructDefaults) {
  const TrainConfig parsed = TrainConfig::parse("", {});
  expect_same(parsed, TrainConfig{});
  EXPECT_EQ(parsed.model.config, "tiny");
  EXPECT_EQ(parsed.optim.lr, 1e-3);
  EXPECT_EQ(parsed.optim.decay, "cosine");
  EXPECT_EQ(parsed.train.steps, 1000);
  EXPECT_NO_THROW(TrainConfig{}.validate());
}

TEST(TrainConfig, FileThenOverridesInOrderTheLastWins) {
  const fs::path path =
      fs::temp_directory_path() / ("tessel_config_" + std::to_string(::getpid()) + ".toml");
  {
    std::ofstream out(path);
    out << "[optim]\nlr = 0.002\nwarmup_steps = 7\n\n[train]\nsteps = 33\nthreads = 13\n";
  }
  const TrainConfig c = TrainConfig::from_file(
      path.string(), {"optim.lr=3e-4", "train.steps=77", "optim.lr = 5e-4", "data.seed=13"});
  fs::remove(path);
  EXPECT_EQ(c.optim.lr, 5e-4);         // file, then two overrides: the last one
  EXPECT_EQ(c.train.steps, 77);        // override beats the file
  EXPECT_EQ(c.optim.warmup_steps, 7);  // file beats the default
  EXPECT_EQ(c.train.threads, 13);      // file only
  EXPECT_EQ(c.data.seed, 13u);         // override only
  EXPECT_EQ(c.optim.beta2, 0.95);      // untouched default
}

TEST(TrainConfig, MissingFileNamesThePath) {
  const std::string path = "/nonexistent/tessel_" + std::to_string(::getpid()) + ".toml";
  const std::string message = error_of([&] { TrainConfig::from_file(path, {}); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
}

TEST(TrainConfig, StringOverridesTakeBareWordsAndTomlStrings) {
  const TrainConfig c =
      TrainConfig::parse("", {"optim.decay=linear", "checkpoint.dir=runs/x", "model.config=124M",
                              "sample.prompt=\"two words\"", "data.dir='lit\\eral'",
                              "log.jsonl=", "model.init_from=7"});
  EXPECT_EQ(c.optim.decay, "linear");
  EXPECT_EQ(c.checkpoint.dir, "runs/x");
  EXPECT_EQ(c.model.config, "124M");
  EXPECT_EQ(c.sample.prompt, "two words");
  EXPECT_EQ(c.data.dir, "lit\\eral");
  EXPECT_EQ(c.log.jsonl, "");
  EXPECT_EQ(c.model.init_from, "7");  // an unquoted word is taken as written
  // Bytes that to_toml() could not write back are refused, so a resolved config always re-reads.
  const std::string m = set_error("sample.prompt=caf\xe9");
  EXPECT_NE(m.find("sample.prompt: the value is not valid UTF-8"), std::string::npos) << m;
}

TEST(TrainConfig, IntegersWidenToDoublesAndWholeDoublesNarrowToIntegers) {
  const TrainConfig c =
      TrainConfig::parse("[optim]\nlr = 1\n[train]\nsteps = 77.0\nmicro_batch = 1e1\n", {});
  EXPECT_EQ(c.optim.lr, 1.0);
  EXPECT_EQ(c.train.steps, 77);
  EXPECT_EQ(c.train.micro_batch, 10);
  EXPECT_EQ(TrainConfig::parse("", {"train.seq_len=13.0", "machine.peak_gflops=7"}).train.seq_len,
            13);
}

TEST(TrainConfig, WrongTypesNameSourceKeyAndWhatWasGiven) {
  std::string m = parse_error("[optim]\nlr = \"abc\"\n");
  EXPECT_NE(m.find("run.toml:2:6"), std::string::npos) << m;
  EXPECT_NE(m.find("optim.lr: expected a number, got string \"abc\""), std::string::npos) << m;

  m = parse_error("[train]\nsteps = 2.5\n");
  EXPECT_NE(m.find("train.steps: expected an integer, got number 2.5"), std::string::npos) << m;
  m = parse_error("[model]\nconfig = 5\n");
  EXPECT_NE(m.find("model.config: expected a string, got integer 5"), std::string::npos) << m;
  m = parse_error("[eval]\nbatches = true\n");
  EXPECT_NE(m.find("eval.batches: expected an integer, got boolean true"), std::string::npos) << m;
  m = parse_error("[optim]\nbeta1 = [0.9]\n");
  EXPECT_NE(m.find("optim.beta1: expected a number, got an array"), std::string::npos) << m;

  m = set_error("optim.lr=abc");
  EXPECT_NE(m.find("--set optim.lr=abc"), std::string::npos) << m;
  EXPECT_NE(m.find("optim.lr: expected a number"), std::string::npos) << m;
  m = set_error("train.steps=\"33\"");
  EXPECT_NE(m.find("train.steps: expected an integer, got string \"33\""), std::string::npos) << m;
  m = set_error("train.steps=3.5");
  EXPECT_NE(m.find("train.steps: expected an integer, got number 3.5"), std::string::npos) << m;
}

TEST(TrainConfig, ValuesOutsideTheirRangeNameKeyAndRange) {
  struct Case {
    std::string set, key, range;
  };
  const std::vector<Case> cases = {
      {"optim.lr=-1", "optim.lr = -1", "(0, 10]"},
      {"optim.lr=0", "optim.lr = 0", "(0, 10]"},
      {"optim.lr=10.5", "optim.lr = 10.5", "(0, 10]"},
      {"optim.min_lr_ratio=1.5", "optim.min_lr_ratio = 1.5", "[0, 1]"},
      {"optim.warmup_steps=-7", "optim.warmup_steps = -7", ">= 0"},
      {"optim.decay=exp", "optim.decay = \"exp\"", "one of cosine, linear, constant"},
      {"optim.weight_decay=11", "optim.weight_decay = 11", "[0, 10]"},
      {"optim.beta1=1", "optim.beta1 = 1", "[0, 1)"},
      {"optim.beta2=-0.5", "optim.beta2 = -0.5", "[0, 1)"},
      {"optim.eps=0", "optim.eps = 0", "(0, 1]"},
      {"optim.grad_clip=-1", "optim.grad_clip = -1", ">= 0"},
      {"train.steps=0", "train.steps = 0", ">= 1"},
      {"train.micro_batch=0", "train.micro_batch = 0", ">= 1"},
      {"train.seq_len=-13", "train.seq_len = -13", ">= 1"},
      {"train.grad_accum=0", "train.grad_accum = 0", ">= 1"},
      {"train.threads=1025", "train.threads = 1025", "[0, 1024]"},
      {"train.threads=-1", "train.threads = -1", "[0, 1024]"},
      {"train.max_bad_steps=0", "train.max_bad_steps = 0", ">= 1"},
      {"eval.interval=-1", "eval.interval = -1", ">= 0"},
      {"eval.batches=0", "eval.batches = 0", ">= 1"},
      {"checkpoint.interval=-3", "checkpoint.interval = -3", ">= 0"},
      {"checkpoint.keep=-1", "checkpoint.keep = -1", ">= 0"},
      {"log.interval=0", "log.interval = 0", ">= 1"},
      {"sample.tokens=-1", "sample.tokens = -1", ">= 0"},
      {"sample.temperature=-0.5", "sample.temperature = -0.5", ">= 0"},
      {"sample.top_k=-2", "sample.top_k = -2", ">= 0"},
      {"machine.peak_gflops=-1", "machine.peak_gflops = -1", ">= 0"},
      {"fault.nan_at_step=-1", "fault.nan_at_step = -1", ">= 0"},
      {"fault.kill_at_step=-7", "fault.kill_at_step = -7", ">= 0"},
      {"data.seed=-3", "data.seed = -3", ">= 0"},  // unsigned: negative is an error
      {"train.seed=-1", "train.seed = -1", ">= 0"},
      {"sample.seed=-1", "sample.seed = -1", ">= 0"},
  };
  for (const auto& c : cases) {
    const std::string m = set_error(c.set);
    EXPECT_NE(m.find("--set " + c.set), std::string::npos) << m;
    EXPECT_NE(m.find(c.key), std::string::npos) << c.set << " -> " << m;
    EXPECT_NE(m.find(c.range), std::string::npos) << c.set << " -> " << m;
  }
  std::string m = parse_error("[optim]\nlr = -1\n");
  EXPECT_NE(m.find("run.toml:2:6: optim.lr = -1 is outside (0, 10]"), std::string::npos) << m;
  m = set_error("model.config=\"\"");
  EXPECT_NE(m.find("model.config must not be empty"), std::string::npos) << m;
  m = parse_error("[checkpoint]\ndir = \"\"\n");
  EXPECT_NE(m.find("checkpoint.dir must not be empty"), std::string::npos) << m;
  m = set_error("machine.peak_gflops=inf");
  EXPECT_NE(m.find("machine.peak_gflops = inf is not a finite number"), std::string::npos) << m;
  m = parse_error("[optim]\ngrad_clip = nan\n");
  EXPECT_NE(m.find("optim.grad_clip = nan is not a finite number"), std::string::npos) << m;
}

TEST(TrainConfig, UnknownSectionsAndKeysListTheKnownOnesAndSuggest) {
  std::string m = parse_error("[optimizer]\nlr = 1e-3\n");
  EXPECT_NE(m.find("run.toml:1:1: unknown section 'optimizer'"), std::string::npos) << m;
  EXPECT_NE(
      m.find("model, data, train, parallel, optim, eval, checkpoint, log, sample, machine, memory, "
             "fault"),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("did you mean [optim]?"), std::string::npos) << m;

  m = parse_error("[optim]\nlrr = 1e-3\n");
  EXPECT_NE(m.find("unknown key 'optim.lrr'"), std::string::npos) << m;
  EXPECT_NE(m.find("lr, min_lr_ratio, warmup_steps, decay"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'optim.lr'?"), std::string::npos) << m;

  m = set_error("train.lr=1e-3");  // right key, wrong section
  EXPECT_NE(m.find("unknown key 'train.lr'"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'optim.lr'?"), std::string::npos) << m;
  m = set_error("optim.seed=3");  // a name three sections share
  EXPECT_NE(m.find("did you mean 'data.seed', 'train.seed' or 'sample.seed'?"), std::string::npos)
      << m;
  m = set_error("optim.learning_rate=3");  // nothing close: no guess
  EXPECT_NE(m.find("unknown key 'optim.learning_rate'"), std::string::npos) << m;
  EXPECT_EQ(m.find("did you mean"), std::string::npos) << m;
  m = set_error("zzz.lr=3");
  EXPECT_NE(m.find("unknown section 'zzz'"), std::string::npos) << m;

  m = parse_error("lr = 3e-4\n");  // a key outside any section
  EXPECT_NE(m.find("'lr' is not inside a section"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'optim.lr'?"), std::string::npos) << m;
  m = parse_error("optim = 3\n");
  EXPECT_NE(m.find("optim must be a table"), std::string::npos) << m;
  m = parse_error("[optim.schedule]\nlr = 1\n");
  EXPECT_NE(m.find("unknown key 'optim.schedule'"), std::string::npos) << m;
}

TEST(TrainConfig, TomlSyntaxErrorsGiveLineAndColumn) {
  const std::string m = parse_error("[optim]\nlr = 1e-3\nbeta1 = = 0.9\n");
  EXPECT_NE(m.find("run.toml:3:"), std::string::npos) << m;
  EXPECT_NE(m.find("TOML syntax error"), std::string::npos) << m;
  EXPECT_NE(parse_error("[optim]\nlr = 1\nlr = 2\n").find("run.toml:3:"), std::string::npos);
}

TEST(TrainConfig, MalformedOverridesSayWhatIsExpected) {
  for (const std::string bad : {"optim.lr", "lr=1", "=3", ".lr=1", "optim.=1"}) {
    const std::string m = set_error(bad);
    EXPECT_NE(m.find("--set " + bad + ": expected section.key=value"), std::string::npos) << m;
  }
  EXPECT_NE(set_error("lr=1").find("did you mean 'optim.lr'?"), std::string::npos);
  // A value that smuggles in a second TOML line is not one value.
  EXPECT_NE(set_error("optim.lr=1\n[train]\nsteps=1").find("not a TOML value"), std::string::npos);
}

TEST(TrainConfig, WarmupLongerThanTheRunNamesBothKeys) {
  std::string m = set_error("optim.warmup_steps=1001");
  EXPECT_NE(m.find("optim.warmup_steps = 1001 exceeds train.steps = 1000"), std::string::npos) << m;
  EXPECT_NO_THROW(TrainConfig::parse("", {"optim.warmup_steps=1000"}));
  TrainConfig c;
  c.train.steps = 7;
  c.optim.warmup_steps = 13;
  m = error_of([&] { c.validate(); });
  EXPECT_NE(m.find("optim.warmup_steps = 13 exceeds train.steps = 7"), std::string::npos) << m;
  c.optim.warmup_steps = 0;
  c.optim.beta2 = 1.0;  // validate() also re-checks ranges of a hand-built config
  EXPECT_NE(error_of([&] { c.validate(); }).find("optim.beta2 = 1 is outside [0, 1)"),
            std::string::npos);
}

TEST(TrainConfig, ToTomlRoundTripsAwkwardStringsAndDoublesExactly) {
  TrainConfig c;
  c.model.config = "quote\" back\\slash 'single' \t tab\nnewline \x01 \x7f ünï";
  c.sample.prompt = "\"\"\"triple\"\"\" \\n not a newline";
  c.checkpoint.dir = "C:\\runs\\x";
  c.log.jsonl = "";
  c.optim.lr = 3e-4;
  c.optim.min_lr_ratio = 1.0 / 3.0;
  c.optim.eps = 5e-324;  // the smallest denormal
  c.optim.beta2 = 0.999;
  c.machine.peak_gflops = 1e300;
  c.sample.temperature = 0;
  c.data.seed = 9223372036854775807ull;  // the largest TOML integer
  c.train.threads = 1024;
  const std::string text = c.to_toml();
  EXPECT_NE(text.find("lr = 3e-4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("temperature = 0.0\n"), std::string::npos) << text;  // stays a double
  EXPECT_NE(text.find("# Peak learning rate\nlr = "), std::string::npos) << text;
  const TrainConfig back = TrainConfig::parse(text, {}, "resolved.toml");
  expect_same(back, c);
  EXPECT_EQ(back.to_toml(), text);
}

TEST(TrainConfig, ToTomlRoundTripsRandomValues) {
  std::mt19937_64 rng(33);
  for (int trial = 0; trial < 200; ++trial) {
    TrainConfig c;
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    c.optim.lr = std::nextafter(10.0 * unit(rng), 11.0);
    c.optim.min_lr_ratio = unit(rng);
    c.optim.beta1 = unit(rng);
    c.optim.beta2 = unit(rng);
    c.optim.eps = std::ldexp(std::max(unit(rng), 1e-3), -static_cast<int>(rng() % 900));
    c.optim.weight_decay = 10.0 * unit(rng);
    c.optim.grad_clip = std::ldexp(unit(rng), static_cast<int>(rng() % 200) - 100);
    c.machine.peak_gflops = std::ldexp(unit(rng), static_cast<int>(rng() % 2000) - 1000);
    c.sample.temperature = unit(rng) * 7;
    c.train.seed = rng() >> 1;
    c.sample.top_k = static_cast<int64_t>(rng() >> 1);
    const TrainConfig back = TrainConfig::parse(c.to_toml(), {});
    expect_same(back, c);
    if (HasFailure()) break;
  }
}

TEST(TrainConfig, ToTomlHasEverySectionAndKeyWithItsDoc) {
  const std::string text = TrainConfig{}.to_toml();
  for (const auto& info : config_keys()) {
    const std::string section = info.key.substr(0, info.key.find('.'));
    const std::string name = info.key.substr(info.key.find('.') + 1);
    const size_t header = text.find("[" + section + "]\n");
    const size_t line =
        text.find("# " + info.doc + "\n" + name + " = " + info.default_value + "\n", header);
    EXPECT_NE(header, std::string::npos) << section;
    EXPECT_NE(line, std::string::npos) << info.key;
  }
}

TEST(TrainConfig, KeyTableIsCompleteUniqueAndMapsEachKeyToItsOwnMember) {
  const auto keys = config_keys();
  std::vector<std::string> names;
  std::set<std::string> unique;
  for (const auto& info : keys) {
    names.push_back(info.key);
    unique.insert(info.key);
    EXPECT_FALSE(info.doc.empty()) << info.key;
    EXPECT_FALSE(info.range.empty()) << info.key;
    EXPECT_TRUE(info.type == "string" || info.type == "integer" || info.type == "number" ||
                info.type == "boolean");
  }
  EXPECT_EQ(names, kAllKeys);
  EXPECT_EQ(unique.size(), keys.size());

  // Changing one key through the table changes that key's line of to_toml() and no other:
  // two entries sharing a member, or an entry reaching the wrong one, would show here.
  const TrainConfig defaults;
  for (const auto& info : keys) {
    std::string value = info.type == "string" ? "x13" : "77";
    if (info.key == "optim.decay") value = "linear";
    if (info.key == "train.recompute") value = "full";
    if (info.key == "train.precision") value = "bf16";
    if (info.key == "train.device") value = "cuda:13";
    if (info.key == "parallel.zero_stage") value = "2";
    if (info.key.rfind("memory.", 0) == 0 && info.type == "string") value = "13MiB";
    if (info.type == "boolean") value = "false";
    if (info.key == "parallel.sequence_parallel" || info.key == "parallel.expert_tensor_parallel" ||
        info.key == "log.tensorboard")
      value = "true";
    if (info.type == "number") value = "0.25";
    const TrainConfig changed = TrainConfig::parse("", {info.key + "=" + value});
    std::istringstream a(defaults.to_toml()), b(changed.to_toml());
    std::string line_a, line_b, differing;
    int differences = 0;
    while (std::getline(a, line_a) && std::getline(b, line_b))
      if (line_a != line_b) ++differences, differing = line_b;
    EXPECT_EQ(differences, 1) << info.key;
    const std::string name = info.key.substr(info.key.find('.') + 1);
    EXPECT_EQ(differing.rfind(name + " = ", 0), 0u) << info.key << ": " << differing;
  }
}

// The configuration files shipped in configs/ stay valid as keys and ranges change.
TEST(TrainConfig, ShippedConfigFilesParse) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(TESSEL_SOURCE_DIR "/configs")) {
    if (entry.path().extension() != ".toml") continue;
    ++files;
    EXPECT_NO_THROW(TrainConfig::from_file(entry.path().string(), {})) << entry.path();
  }
  EXPECT_GE(files, 1) << "no configs/*.toml found";
}

// Every key appears in docs/TRAINING.md as a table row `section.key` | default | range | ...
TEST(TrainConfig, TrainingDocDocumentsEveryKeyWithItsDefaultAndRange) {
  std::ifstream in(TESSEL_SOURCE_DIR "/docs/TRAINING.md");
  ASSERT_TRUE(in.good()) << "docs/TRAINING.md is missing";
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  for (const auto& info : config_keys()) {
    const std::string row_start = "| `" + info.key + "` |";
    int rows = 0;
    for (const auto& line : lines) {
      if (line.rfind(row_start, 0) != 0) continue;
      ++rows;
      EXPECT_NE(line.find("| `" + info.default_value + "` |"), std::string::npos)
          << info.key << " default " << info.default_value << " in: " << line;
      EXPECT_NE(line.find("| " + info.range + " |"), std::string::npos)
          << info.key << " range " << info.range << " in: " << line;
    }
    EXPECT_EQ(rows, 1) << "docs/TRAINING.md needs one table row for `" << info.key << "`";
  }
}

}  // namespace
}  // namespace tessel::train

namespace tessel::train {
namespace {

TEST(TrainConfig, BooleansAreTomlBooleans) {
  EXPECT_FALSE(TrainConfig::parse("[parallel]\noverlap = false\n", {}).parallel.overlap);
  EXPECT_FALSE(TrainConfig::parse("", {"parallel.overlap=false"}).parallel.overlap);
  EXPECT_TRUE(
      TrainConfig::parse("", {"parallel.overlap=false", "parallel.overlap=true"}).parallel.overlap);
  for (const auto& [text, overrides] :
       {std::pair<std::string, std::vector<std::string>>{"[parallel]\noverlap = 1\n", {}},
        {"", {"parallel.overlap=maybe"}},
        {"", {"parallel.overlap=\"false\""}}}) {
    try {
      TrainConfig::parse(text, overrides);
      FAIL() << "accepted " << text << (overrides.empty() ? "" : overrides[0]);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("parallel.overlap: expected a boolean"),
                std::string::npos)
          << e.what();
    }
  }
  // The printout reads back.
  TrainConfig c;
  c.parallel.overlap = false;
  EXPECT_FALSE(TrainConfig::parse(c.to_toml(), {}).parallel.overlap);
}

TEST(TrainConfig, TensorBoardIsOffByDefaultAndSetLikeOtherBooleans) {
  EXPECT_FALSE(TrainConfig{}.log.tensorboard);
  EXPECT_TRUE(TrainConfig::parse("", {"log.tensorboard=true"}).log.tensorboard);
  EXPECT_TRUE(TrainConfig::parse("[log]\ntensorboard = true\n", {}).log.tensorboard);
  try {
    TrainConfig::parse("", {"log.tensorboard=yes"});
    FAIL() << "accepted log.tensorboard=yes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("log.tensorboard: expected a boolean"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessel::train
