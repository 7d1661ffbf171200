// SPDX-License-Identifier: Apache-2.0
// The training configuration's key table and all it drives: reading TOML (toml++), `--set
// section.key=value` overrides, range checks, the resolved TOML printout and config_keys(). Each
// key exists once, in build_key_table(), so the parser, the printer and the documentation test
// cannot disagree about a name, a default or a range.
#include "tessel/train/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <type_traits>
#include <variant>

#include "tessel/core/error.h"
#include "tessel/nn/recompute.h"
#include "tessel/tensor/device_memory.h"

namespace tessel::train {
namespace {

enum class Kind { kString, kInteger, kNumber, kBoolean };

// Where a key's value lives in TrainConfig; integers of every width travel as int64_t.
using FieldRef = std::variant<std::string*, int64_t*, uint64_t*, int*, double*, bool*>;
using Value = std::variant<std::string, int64_t, double, bool>;

constexpr double kInf = std::numeric_limits<double>::infinity();

// What a key allows. Intervals without an upper end have hi = infinity.
struct Range {
  enum class Shape { kAny, kNonEmpty, kOneOf, kInterval, kBoolean } shape;
  double lo, hi;
  bool lo_open, hi_open;
  std::vector<std::string> choices;
};

// clang-format off
Range any() { return {Range::Shape::kAny, 0, 0, false, false, {}}; }
Range boolean() { return {Range::Shape::kBoolean, 0, 0, false, false, {}}; }
Range non_empty() { return {Range::Shape::kNonEmpty, 0, 0, false, false, {}}; }
Range one_of(std::vector<std::string> c) { return {Range::Shape::kOneOf, 0, 0, false, false, c}; }
Range at_least(double lo) { return {Range::Shape::kInterval, lo, kInf, false, false, {}}; }
// interval(true, 0, 10, false) is (0, 10].
Range interval(bool lo_open, double lo, double hi, bool hi_open) {
  return {Range::Shape::kInterval, lo, hi, lo_open, hi_open, {}};
}
// clang-format on

struct KeyDef {
  std::string section, name;
  FieldRef (*field)(TrainConfig&);
  Range range;
  std::string doc;
  Kind kind = Kind::kString;
  std::string full() const { return section + "." + name; }
};

// clang-format off
#define TESSEL_CONFIG_KEY(sec, key, range, doc) \
  KeyDef{#sec, #key, [](TrainConfig& c) -> FieldRef { return &c.sec.key; }, range, doc}
// clang-format on

std::vector<KeyDef> build_key_table() {
  std::vector<KeyDef> keys = {
      TESSEL_CONFIG_KEY(
          model, config, non_empty(),
          "Preset (tiny, small, 124M, medium, 355M, large, 774M, xl, 1558M), HF config.json, or "
          "model dir (a preset name always means the preset: ./NAME for a directory)"),
      TESSEL_CONFIG_KEY(model, init_from, any(), "HF model directory whose weights start training"),
      TESSEL_CONFIG_KEY(data, dir, any(), "Dataset directory written by `tessel data prepare`"),
      TESSEL_CONFIG_KEY(data, seed, at_least(0), "Seed for shuffling the training windows"),
      TESSEL_CONFIG_KEY(train, steps, at_least(1), "Optimizer steps"),
      TESSEL_CONFIG_KEY(train, micro_batch, at_least(1), "Rows per micro-batch (B)"),
      TESSEL_CONFIG_KEY(train, seq_len, at_least(1),
                        "Tokens per row (T), <= the model's n_positions"),
      TESSEL_CONFIG_KEY(train, grad_accum, at_least(1), "Micro-batches per optimizer step"),
      TESSEL_CONFIG_KEY(train, global_batch, at_least(0),
                        "Sequences per optimizer step over every dp rank (0: micro_batch x "
                        "grad_accum x dp); when set, grad_accum follows from it and the layout"),
      TESSEL_CONFIG_KEY(train, seed, at_least(0), "Seed for model initialisation and dropout"),
      TESSEL_CONFIG_KEY(train, threads, interval(false, 0, 1024, false),
                        "Worker threads; 0: TESSEL_NUM_THREADS or all cores"),
      TESSEL_CONFIG_KEY(train, max_bad_steps, at_least(1),
                        "Abort after this many non-finite steps in a row"),
      TESSEL_CONFIG_KEY(train, recompute, non_empty(),
                        "Activation recomputation per block: none, selective (attention) or "
                        "full; or one per pipeline rank, \"full,selective,none\" (a run of "
                        "ranks as mode*N, \"selective*8,none*8\"); mode:N recomputes only the "
                        "rank's first N blocks (\"full:3\"), mode:N+rest gives the others `rest` "
                        "(\"full:3+selective\")"),
      TESSEL_CONFIG_KEY(train, precision, one_of({"fp32", "bf16", "fp16"}),
                        "Forward/backward dtype over f32 master weights: fp32, bf16 or fp16"),
      TESSEL_CONFIG_KEY(train, device, non_empty(),
                        "Where the step runs: cpu, cuda or cuda:N (CUDA: one process)"),
      TESSEL_CONFIG_KEY(train, loss_scale_init, interval(true, 0, 4294967296.0, false),
                        "fp16: initial dynamic loss scale"),
      TESSEL_CONFIG_KEY(train, loss_scale_window, at_least(1),
                        "fp16: overflow-free steps after which the loss scale doubles"),
      TESSEL_CONFIG_KEY(
          parallel, zero_stage, interval(false, 0, 3, false),
          "ZeRO stage over the dp ranks: 1 partitions optimizer state, 2 gradients, 3 parameters"),
      TESSEL_CONFIG_KEY(parallel, bucket_mb, at_least(1),
                        "Gradient bucket size (MiB) for data-parallel averaging"),
      TESSEL_CONFIG_KEY(parallel, overlap, boolean(),
                        "Average gradient buckets during backward (false: all after it)"),
      TESSEL_CONFIG_KEY(parallel, schedule, non_empty(),
                        "Pipeline schedule with pp > 1: gpipe, 1f1b or interleaved:V"),
      TESSEL_CONFIG_KEY(parallel, pipeline_split, any(),
                        "Blocks per pipeline stage, e.g. 3,4,4,2 (the embedding with the first, "
                        "the head with the last; interleaved: per virtual stage); empty: balanced"),
      TESSEL_CONFIG_KEY(parallel, sequence_parallel, boolean(),
                        "With tp > 1: norms, dropouts and residuals on sequence pieces (--sp)"),
      TESSEL_CONFIG_KEY(parallel, expert_tensor_parallel, boolean(),
                        "With tp > 1 and an MoE model: each expert's FFN split over tp (--etp)"),
      TESSEL_CONFIG_KEY(parallel, tp_plan, any(),
                        "Tensor-parallel plan JSON file; empty: the model family's built-in plan"),
      TESSEL_CONFIG_KEY(optim, lr, interval(true, 0, 10, false), "Peak learning rate"),
      TESSEL_CONFIG_KEY(optim, min_lr_ratio, interval(false, 0, 1, false),
                        "The schedule ends at lr * min_lr_ratio"),
      TESSEL_CONFIG_KEY(optim, warmup_steps, at_least(0),
                        "Steps of linear warmup from lr / warmup_steps to lr (<= train.steps)"),
      TESSEL_CONFIG_KEY(optim, decay, one_of({"cosine", "linear", "constant"}),
                        "Decay after warmup, down to lr * min_lr_ratio"),
      TESSEL_CONFIG_KEY(optim, weight_decay, interval(false, 0, 10, false),
                        "Decoupled (AdamW) weight decay; never on biases and norm weights"),
      TESSEL_CONFIG_KEY(optim, beta1, interval(false, 0, 1, true), "AdamW first-moment decay"),
      TESSEL_CONFIG_KEY(optim, beta2, interval(false, 0, 1, true), "AdamW second-moment decay"),
      TESSEL_CONFIG_KEY(optim, eps, interval(true, 0, 1, false), "AdamW denominator epsilon"),
      TESSEL_CONFIG_KEY(optim, grad_clip, at_least(0),
                        "Clip the global L2 norm of the gradients to this; 0: no clipping"),
      TESSEL_CONFIG_KEY(eval, interval, at_least(0),
                        "Steps between evaluations; 0: only at the end"),
      TESSEL_CONFIG_KEY(eval, batches, at_least(1), "Validation micro-batches per evaluation"),
      TESSEL_CONFIG_KEY(checkpoint, dir, non_empty(),
                        "Run directory: checkpoints, metrics log, resolved config"),
      TESSEL_CONFIG_KEY(checkpoint, interval, at_least(0),
                        "Steps between checkpoints; 0: only at the end"),
      TESSEL_CONFIG_KEY(checkpoint, keep, at_least(0), "Newest checkpoints kept; 0 keeps all"),
      TESSEL_CONFIG_KEY(log, interval, at_least(1), "Steps between progress lines"),
      TESSEL_CONFIG_KEY(log, jsonl, any(),
                        "Per-step metrics file, relative to checkpoint.dir; \"\" disables it"),
      TESSEL_CONFIG_KEY(log, tensorboard, boolean(),
                        "Also write TensorBoard event files to checkpoint.dir/tensorboard"),
      TESSEL_CONFIG_KEY(sample, tokens, at_least(0), "Tokens sampled after training; 0: none"),
      TESSEL_CONFIG_KEY(sample, prompt, any(),
                        "Prompt text (dataset's tokenizer); \"\" starts from end-of-text"),
      TESSEL_CONFIG_KEY(sample, temperature, at_least(0), "Sampling temperature; 0: greedy"),
      TESSEL_CONFIG_KEY(sample, top_k, at_least(0), "Sample from the k likeliest tokens; 0: all"),
      TESSEL_CONFIG_KEY(sample, seed, at_least(0), "Seed for sampling"),
      TESSEL_CONFIG_KEY(machine, peak_gflops, at_least(0),
                        "Dense f32 peak GFLOP/s for MFU; 0: measured at start (about 1 s)"),
      TESSEL_CONFIG_KEY(memory, device_budget, any(),
                        "Offload: bytes of the device tier (\"512MiB\"); \"\": no offload"),
      TESSEL_CONFIG_KEY(memory, host_budget, non_empty(), "Offload: bytes of the host tier"),
      TESSEL_CONFIG_KEY(memory, nvme_dir, any(), "Offload: NVMe tier directory; \"\": none"),
      TESSEL_CONFIG_KEY(memory, nvme_budget, non_empty(),
                        "Offload: bytes of the NVMe tier's swap file; 0: a slot per chunk"),
      TESSEL_CONFIG_KEY(memory, chunk_size, non_empty(), "Offload: bytes of one chunk"),
      TESSEL_CONFIG_KEY(memory, prefetch, at_least(0),
                        "Offload: chunk accesses read ahead along the traced step; 0: none"),
      TESSEL_CONFIG_KEY(fault, nan_at_step, at_least(0),
                        "Drill: poison one gradient with NaN at this step; 0: never"),
      TESSEL_CONFIG_KEY(fault, kill_at_step, at_least(0),
                        "Drill: SIGKILL this process midway through this step; 0: never"),
      TESSEL_CONFIG_KEY(fault, save_delay_ms, at_least(0),
                        "Drill: every checkpoint save takes this much longer (ms); 0: none"),
  };
  // The kind follows the member's type, in FieldRef's order.
  constexpr Kind kKindOf[] = {Kind::kString,  Kind::kInteger, Kind::kInteger,
                              Kind::kInteger, Kind::kNumber,  Kind::kBoolean};
  TrainConfig scratch;
  for (auto& key : keys) key.kind = kKindOf[key.field(scratch).index()];
  return keys;
}

#undef TESSEL_CONFIG_KEY

const std::vector<KeyDef>& key_table() {
  static const std::vector<KeyDef> table = build_key_table();
  return table;
}

// clang-format off
const char* kind_name(Kind k) {
  return k == Kind::kString ? "string" : k == Kind::kNumber ? "number"
                                        : k == Kind::kBoolean ? "boolean" : "integer";
}
const char* article(Kind k) { return k == Kind::kInteger ? "an " : "a "; }
// clang-format on

// Shortest text that reads back to the same double; exponents lose their leading zeros (3e-4).
std::string format_number(double value) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, value);
  std::string text(buf, result.ptr);
  const size_t e = text.find('e');
  if (e != std::string::npos) {
    size_t digits = e + 1;
    if (digits < text.size() && (text[digits] == '-' || text[digits] == '+')) ++digits;
    while (digits + 1 < text.size() && text[digits] == '0') text.erase(digits, 1);
  }
  return text;
}

std::string toml_string(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += {'\\', ch};
    } else if (ch == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04X", static_cast<unsigned>(c));
      out += esc;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string toml_literal(const Value& value) {
  if (const auto* s = std::get_if<std::string>(&value)) return toml_string(*s);
  if (const auto* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  std::string text = format_number(std::get<double>(value));
  // TOML reads "1" as an integer; keep doubles doubles.
  if (text.find_first_of(".ein") == std::string::npos) text += ".0";
  return text;
}

std::string range_text(const Range& r) {
  if (r.shape == Range::Shape::kAny) return "any";
  if (r.shape == Range::Shape::kNonEmpty) return "non-empty";
  if (r.shape == Range::Shape::kBoolean) return "true or false";
  if (r.shape == Range::Shape::kOneOf) {
    std::string out = "one of ";
    for (size_t i = 0; i < r.choices.size(); ++i) out += (i ? ", " : "") + r.choices[i];
    return out;
  }
  if (r.hi == kInf) return (r.lo_open ? "> " : ">= ") + format_number(r.lo);
  return (r.lo_open ? "(" : "[") + format_number(r.lo) + ", " + format_number(r.hi) +
         (r.hi_open ? ")" : "]");
}

std::string describe(const toml::node& node) {
  if (const auto* v = node.as_string()) return "string " + toml_string(v->get());
  if (const auto* v = node.as_integer()) return "integer " + std::to_string(v->get());
  if (const auto* v = node.as_floating_point()) return "number " + format_number(v->get());
  if (const auto* v = node.as_boolean()) return v->get() ? "boolean true" : "boolean false";
  if (node.is_array()) return "an array";
  return node.is_table() ? "a table" : "a date/time";
}

// "source:line:column" when the node came from a file, so the message points at the value.
std::string where(const std::string& source, const toml::node& node) {
  const auto& begin = node.source().begin;
  if (begin.line == 0) return source;
  return source + ":" + std::to_string(begin.line) + ":" + std::to_string(begin.column);
}

bool is_section(const std::string& name) {
  return std::any_of(key_table().begin(), key_table().end(),
                     [&](const KeyDef& k) { return k.section == name; });
}

const KeyDef* find_key(const std::string& section, const std::string& name) {
  for (const auto& k : key_table())
    if (k.section == section && k.name == name) return &k;
  return nullptr;
}

std::string section_names() {
  std::string out, last;
  for (const auto& k : key_table()) {
    if (k.section != last) out += (out.empty() ? "" : ", ") + k.section;
    last = k.section;
  }
  return out;
}

std::string section_keys(const std::string& section) {
  std::string out;
  for (const auto& k : key_table())
    if (k.section == section) out += (out.empty() ? "" : ", ") + k.name;
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

bool is_near(const std::string& typed, const std::string& known) {
  const bool prefix =
      typed.size() >= 2 && (known.rfind(typed, 0) == 0 || typed.rfind(known, 0) == 0);
  return prefix || edit_distance(typed, known) <= std::max<size_t>(2, typed.size() / 4);
}

// "; did you mean 'optim.lr'?" for a near miss: a small edit away, or the same key name filed
// under another section (train.lr -> optim.lr). Empty when nothing is close.
std::string suggest_key(const std::string& typed) {
  const size_t dot = typed.find('.');
  const std::string leaf = dot == std::string::npos ? typed : typed.substr(dot + 1);
  std::vector<std::string> hits;
  for (const auto& k : key_table())
    if (k.name == leaf) hits.push_back(k.full());
  if (hits.empty()) {
    size_t best = std::numeric_limits<size_t>::max();
    for (const auto& k : key_table()) {
      const size_t d = edit_distance(typed, k.full());
      if (d < best && is_near(typed, k.full())) best = d, hits = {k.full()};
    }
  }
  if (hits.empty()) return "";
  std::string out = "; did you mean ";
  for (size_t i = 0; i < hits.size(); ++i)
    out += (i == 0 ? "" : i + 1 == hits.size() ? " or " : ", ") + ("'" + hits[i] + "'");
  return out + "?";
}

std::string suggest_section(const std::string& typed) {
  for (const auto& k : key_table())
    if (is_near(typed, k.section)) return "; did you mean [" + k.section + "]?";
  return "";
}

void check_section(const std::string& src, const std::string& section) {
  TESSEL_CHECK(is_section(section), src, ": unknown section '", section,
               "'; the sections are: ", section_names(), suggest_section(section));
}

void check_key(const std::string& src, const std::string& section, const std::string& name) {
  check_section(src, section);
  TESSEL_CHECK(find_key(section, name) != nullptr, src, ": unknown key '", section, ".", name,
               "'; [", section, "] has: ", section_keys(section),
               suggest_key(section + "." + name));
}

Value read(TrainConfig& config, const KeyDef& key) {
  return std::visit(
      [](auto* field) -> Value {
        using T = std::remove_pointer_t<decltype(field)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
          return static_cast<int64_t>(*field);
        else
          return *field;
      },
      key.field(config));
}

// Empty when `value` is allowed for `key`, else the sentence saying why not.
std::string range_violation(const KeyDef& key, const Value& value) {
  const Range& r = key.range;
  if (const auto* s = std::get_if<std::string>(&value)) {
    if (r.shape == Range::Shape::kNonEmpty && s->empty()) return key.full() + " must not be empty";
    if (r.shape == Range::Shape::kOneOf &&
        std::find(r.choices.begin(), r.choices.end(), *s) == r.choices.end())
      return key.full() + " = " + toml_string(*s) + " is not " + range_text(r);
    return "";
  }
  if (std::holds_alternative<bool>(value)) return "";  // the type check is the whole range
  const bool is_int = std::holds_alternative<int64_t>(value);
  const double x = is_int ? static_cast<double>(std::get<int64_t>(value)) : std::get<double>(value);
  const std::string shown = is_int ? std::to_string(std::get<int64_t>(value)) : format_number(x);
  if (!std::isfinite(x)) return key.full() + " = " + shown + " is not a finite number";
  if (r.shape != Range::Shape::kInterval) return "";
  const bool low_ok = r.lo_open ? x > r.lo : x >= r.lo;
  const bool high_ok = r.hi_open ? x < r.hi : x <= r.hi;
  if (low_ok && high_ok) return "";
  if (r.hi != kInf) return key.full() + " = " + shown + " is outside " + range_text(r);
  return key.full() + " = " + shown + " must be " + range_text(r);
}

void assign(TrainConfig& config, const KeyDef& key, const Value& value, const std::string& src) {
  const std::string problem = range_violation(key, value);
  TESSEL_CHECK(problem.empty(), src, ": ", problem);
  std::visit(
      [&](auto* field) {
        using T = std::remove_pointer_t<decltype(field)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
          *field = static_cast<T>(std::get<int64_t>(value));
        else
          *field = std::get<T>(value);
      },
      key.field(config));
}

// The node as the key's kind: integers widen to doubles; doubles narrow to integers only when
// they are whole numbers (2.0, 1e3).
Value convert(const KeyDef& key, const toml::node& node, const std::string& src) {
  const auto* integer = node.as_integer();
  const auto* floating = node.as_floating_point();
  if (key.kind == Kind::kString && node.is_string()) return node.as_string()->get();
  if (key.kind == Kind::kBoolean && node.is_boolean()) return node.as_boolean()->get();
  if (key.kind == Kind::kNumber && integer) return static_cast<double>(integer->get());
  if (key.kind == Kind::kNumber && floating) return floating->get();
  if (key.kind == Kind::kInteger && integer) return integer->get();
  if (key.kind == Kind::kInteger && floating) {
    const double d = floating->get();  // NaN and infinities fail both tests
    if (d == std::trunc(d) && std::abs(d) < 0x1p63) return static_cast<int64_t>(d);
  }
  TESSEL_FAIL(src, ": ", key.full(), ": expected ", article(key.kind), kind_name(key.kind),
              ", got ", describe(node));
}

toml::table parse_toml(const std::string& text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    TESSEL_FAIL(source, ":", at.line, ":", at.column, ": TOML syntax error: ", e.description());
  }
}

void apply_document(TrainConfig& config, const toml::table& doc, const std::string& source) {
  for (auto&& [section_key, section_node] : doc) {
    const std::string section(section_key.str());
    const std::string at = where(source, section_node);
    TESSEL_CHECK(section_node.is_table() || is_section(section), at, ": '", section,
                 "' is not inside a section; write [section] then key = value",
                 suggest_key(section));
    check_section(at, section);
    TESSEL_CHECK(section_node.is_table(), at, ": ", section, " must be a table ([", section,
                 "]), got ", describe(section_node));
    for (auto&& [name_key, node] : *section_node.as_table()) {
      const std::string name(name_key.str());
      const std::string node_at = where(source, node);
      check_key(node_at, section, name);
      const KeyDef& key = *find_key(section, name);
      assign(config, key, convert(key, node, node_at), node_at);
    }
  }
}

std::string trim(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  return first == std::string::npos ? ""
                                    : text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

std::optional<toml::table> try_parse(const std::string& text) {
  try {
    return toml::parse(text);
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
}

// An override's value is TOML (3e-4, 8, "text"); a string key also takes an unquoted word as
// itself, so `--set optim.decay=linear` and `--set checkpoint.dir=runs/x` need no shell quoting.
Value override_value(const KeyDef& key, const std::string& text, const std::string& src) {
  const std::optional<toml::table> parsed = try_parse("v = " + text);
  const toml::node* node = parsed && parsed->size() == 1 ? parsed->get("v") : nullptr;
  if (key.kind == Kind::kString) {
    if (node != nullptr && node->is_string()) return node->as_string()->get();
    // Only text that to_toml() can write back: a run's resolved configuration must re-read.
    TESSEL_CHECK(try_parse("v = " + toml_string(text)), src, ": ", key.full(),
                 ": the value is not valid UTF-8");
    return text;
  }
  TESSEL_CHECK(node != nullptr, src, ": ", key.full(), ": expected ", article(key.kind),
               kind_name(key.kind), ", got '", text, "', which is not a TOML value");
  return convert(key, *node, src);
}

void apply_override(TrainConfig& config, const std::string& text) {
  const std::string src = "--set " + text;
  const size_t eq = text.find('=');
  TESSEL_CHECK(eq != std::string::npos, src, ": expected section.key=value");
  const std::string name = trim(text.substr(0, eq));
  const size_t dot = name.find('.');
  TESSEL_CHECK(dot != std::string::npos && dot > 0 && dot + 1 < name.size(), src,
               ": expected section.key=value, got key '", name, "'", suggest_key(name));
  const std::string section = name.substr(0, dot), leaf = name.substr(dot + 1);
  check_key(src, section, leaf);
  const KeyDef& key = *find_key(section, leaf);
  assign(config, key, override_value(key, trim(text.substr(eq + 1)), src), src);
}

}  // namespace

TrainConfig TrainConfig::parse(const std::string& toml_text,
                               const std::vector<std::string>& overrides,
                               const std::string& source) {
  TrainConfig config;
  apply_document(config, parse_toml(toml_text, source), source);
  for (const auto& text : overrides) apply_override(config, text);
  config.validate();
  return config;
}

TrainConfig TrainConfig::from_file(const std::string& path,
                                   const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "cannot read training config '", path, "': ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), overrides, path);
}

void TrainConfig::validate() const {
  TrainConfig copy = *this;
  for (const auto& key : key_table()) {
    const std::string problem = range_violation(key, read(copy, key));
    TESSEL_CHECK(problem.empty(), "training config: ", problem);
  }
  TESSEL_CHECK(optim.warmup_steps <= train.steps,
               "training config: optim.warmup_steps = ", optim.warmup_steps,
               " exceeds train.steps = ", train.steps, "; the warmup must fit in the run");
  try {
    (void)nn::parse_recompute_list(train.recompute);
  } catch (const Error& e) {
    TESSEL_FAIL("training config: train.recompute = '", train.recompute, "': ", e.what());
  }
  try {
    (void)parse_device(train.device);
  } catch (const Error&) {
    TESSEL_FAIL("training config: train.device = '", train.device,
                "' expected cpu, cuda or cuda:N");
  }
  validate_memory(*this);
}

std::string TrainConfig::to_toml() const {
  TrainConfig copy = *this;
  std::string out = "# tessel training configuration, every key (see docs/TRAINING.md).\n";
  std::string section;
  for (const auto& key : key_table()) {
    if (key.section != section) {
      section = key.section;
      out += "\n[" + section + "]\n";
    }
    out += "# " + key.doc + "\n" + key.name + " = " + toml_literal(read(copy, key)) + "\n";
  }
  return out;
}

std::vector<ConfigKeyInfo> config_keys() {
  TrainConfig defaults;
  std::vector<ConfigKeyInfo> out;
  for (const auto& key : key_table())
    out.push_back({key.full(), kind_name(key.kind), toml_literal(read(defaults, key)),
                   range_text(key.range), key.doc});
  return out;
}

}  // namespace tessel::train
