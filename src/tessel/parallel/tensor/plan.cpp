// SPDX-License-Identifier: Apache-2.0
// Plan files: parsing, pattern matching over module paths, checking every rule against the
// model, then applying the styles.
#include "tessel/parallel/tensor/plan.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "tessel/core/error.h"
#include "tessel/nn/layers.h"
#include "tessel/parallel/tensor/sequence_parallel.h"
#include "tessel/parallel/tensor/vocab_parallel.h"
#include "tessel/sharding/op_rules.h"

namespace tessel::parallel {
namespace {

StyleKind parse_style(const std::string& name, const std::string& where) {
  for (StyleKind k :
       {StyleKind::Colwise, StyleKind::Rowwise, StyleKind::VocabParallel, StyleKind::Sequence})
    if (name == style_name(k)) return k;
  TESSEL_FAIL(where, ": unknown style \"", name,
              "\" (expected Colwise, Rowwise, VocabParallel or Sequence)");
}

PlanRule parse_rule(const std::string& pattern, const nlohmann::json& value,
                    const std::string& where) {
  PlanRule rule;
  rule.pattern = pattern;
  if (value.is_string()) {
    rule.style = parse_style(value.get<std::string>(), where);
    return rule;
  }
  TESSEL_CHECK(value.is_object() && value.contains("style") && value["style"].is_string(), where,
               ": expected a style name or an object with \"style\", got ", value.dump());
  rule.style = parse_style(value["style"].get<std::string>(), where);
  for (const auto& [key, v] : value.items()) {
    if (key == "style") continue;
    if (key == "blocks" && rule.style == StyleKind::Colwise && v.is_number_integer()) {
      rule.blocks = v.get<int64_t>();
      TESSEL_CHECK(rule.blocks >= 1, where, ": blocks ", rule.blocks, " must be >= 1");
    } else if (key == "unit" && rule.style == StyleKind::Colwise &&
               (v.is_string() || v.is_number_integer())) {
      rule.unit = v.is_string() ? v.get<std::string>() : std::to_string(v.get<int64_t>());
    } else if (key == "replicate" && rule.style == StyleKind::Colwise && v.is_boolean()) {
      rule.replicate = v.get<bool>();
    } else if (key == "input_is_sharded" && rule.style == StyleKind::Rowwise && v.is_boolean()) {
      rule.input_is_sharded = v.get<bool>();
    } else if (key == "gather_output" && rule.style == StyleKind::Sequence && v.is_boolean()) {
      rule.gather_output = v.get<bool>();
    } else {
      TESSEL_FAIL(where, ": option \"", key, "\": ", v.dump(), " is not an option of style ",
                  style_name(rule.style),
                  " (Colwise: blocks, unit, replicate; Rowwise: input_is_sharded; Sequence: "
                  "gather_output)");
    }
  }
  return rule;
}

int64_t resolve_unit(const PlanRule& rule, const ParallelizeOptions& o) {
  if (!rule.unit.empty() && rule.unit.find_first_not_of("0123456789") == std::string::npos) {
    const int64_t u = std::stoll(rule.unit);
    TESSEL_CHECK(u >= 1, "plan rule '", rule.pattern, "': unit ", u, " must be >= 1");
    return u;
  }
  auto it = o.sizes.find(rule.unit);
  TESSEL_CHECK(it != o.sizes.end(), "plan rule '", rule.pattern, "': unit \"", rule.unit,
               "\" is not a size this model defines");
  return it->second;
}

bool kind_fits(StyleKind style, nn::Module& m) {
  switch (style) {
    case StyleKind::Colwise:
    case StyleKind::Rowwise:
      return dynamic_cast<nn::Linear*>(&m) != nullptr;
    case StyleKind::VocabParallel:
      return dynamic_cast<nn::Embedding*>(&m) != nullptr;
    case StyleKind::Sequence:
      return dynamic_cast<nn::LayerNorm*>(&m) != nullptr ||
             dynamic_cast<nn::RMSNorm*>(&m) != nullptr ||
             dynamic_cast<nn::Dropout*>(&m) != nullptr ||
             dynamic_cast<nn::Embedding*>(&m) != nullptr;
  }
  return false;
}

const char* kinds_of(StyleKind style) {
  switch (style) {
    case StyleKind::Colwise:
    case StyleKind::Rowwise:
      return "Linear";
    case StyleKind::VocabParallel:
      return "Embedding";
    case StyleKind::Sequence:
      return "LayerNorm, RMSNorm, Dropout or Embedding";
  }
  return "";
}

std::vector<std::pair<std::string, nn::Module*>> module_paths(nn::Module& root) {
  return root.named_modules();
}

// The op signature a style on this module stands for (sharding/op_rules.h), for an input of one
// token: a style is legal only as an instance of a declared signature. Empty op: nothing to check
// (dropouts).
void check_declared(StyleKind style, nn::Module& m, bool sp, const std::string& path) {
  using sharding::Placement;
  const Placement R = Placement::replicate(), S0 = Placement::shard(0);
  std::string op;
  std::vector<Placement> in;
  std::vector<Shape> shapes;
  Placement want = R;
  if (auto* lin = dynamic_cast<nn::Linear*>(&m)) {
    op = "linear";
    shapes = {Shape{1, 1, lin->in_features()}, Shape{lin->out_features(), lin->in_features()}};
    if (style == StyleKind::Colwise) in = {R, S0}, want = Placement::shard(2);
    if (style == StyleKind::Rowwise)
      in = {Placement::shard(2), Placement::shard(1)}, want = Placement::partial();
  } else if (auto* emb = dynamic_cast<nn::Embedding*>(&m)) {
    if (style == StyleKind::VocabParallel) {
      op = "embedding", in = {S0, R}, want = Placement::partial();
      shapes = {emb->weight.shape(), Shape{1, 1}};
    }
  } else if (auto* ln = dynamic_cast<nn::LayerNorm*>(&m); ln && sp) {
    const int64_t c = ln->weight.size(0);
    op = "layer_norm", in = {Placement::shard(1), R, R}, want = Placement::shard(1);
    shapes = {Shape{1, 1, c}, Shape{c}, Shape{c}};
  }
  if (op.empty()) return;
  const auto sig = sharding::find_signature(op, in, shapes);
  TESSEL_CHECK(sig && sig->output == want, "tensor-parallel plan: style ", style_name(style),
               " on '", path, "' is not a declared placement signature of ", op,
               " (sharding/op_rules.h)");
}

std::string join_name(const std::string& module, const char* param) {
  return module.empty() ? std::string(param) : module + "." + param;
}

}  // namespace

const char* style_name(StyleKind kind) {
  switch (kind) {
    case StyleKind::Colwise:
      return "Colwise";
    case StyleKind::Rowwise:
      return "Rowwise";
    case StyleKind::VocabParallel:
      return "VocabParallel";
    case StyleKind::Sequence:
      return "Sequence";
  }
  return "?";
}

ParallelPlan ParallelPlan::parse(const std::string& json_text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    TESSEL_FAIL("tensor-parallel plan ", origin, ": not valid JSON: ", e.what());
  }
  TESSEL_CHECK(j.is_object(), "tensor-parallel plan ", origin,
               ": expected an object of \"pattern\": style");
  ParallelPlan plan;
  for (const auto& [key, value] : j.items()) {
    if (!key.empty() && key[0] == '#') continue;
    TESSEL_CHECK(!key.empty(), "tensor-parallel plan ", origin, ": empty pattern");
    plan.rules.push_back(
        parse_rule(key, value, "tensor-parallel plan " + origin + ", pattern '" + key + "'"));
  }
  TESSEL_CHECK(!plan.rules.empty(), "tensor-parallel plan ", origin, ": no rules");
  return plan;
}

ParallelPlan ParallelPlan::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "tensor-parallel plan: cannot read ", path);
  return parse(std::string(std::istreambuf_iterator<char>(in), {}), path);
}

bool pattern_matches(const std::string& pattern, const std::string& path) {
  // '*' matches a run of non-'.' characters; backtracking over at most one star at a time.
  size_t p = 0, s = 0, star = std::string::npos, mark = 0;
  while (s < path.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = s;
    } else if (p < pattern.size() && pattern[p] == path[s]) {
      ++p;
      ++s;
    } else if (star != std::string::npos && path[mark] != '.') {
      p = star + 1;
      s = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

const sharding::ShardLayout* ParallelizeResult::spec(const std::string& name) const {
  for (const auto& [n, s] : sharded)
    if (n == name) return &s;
  return nullptr;
}

ParallelizeResult parallelize(nn::Module& root, dist::CommPtr tp, const ParallelPlan& plan,
                              const ParallelizeOptions& options) {
  TESSEL_CHECK(tp != nullptr, "parallelize: the tensor-parallel communicator is null");
  const int n = tp->size();
  // Pass 1: match and check everything before any module changes.
  struct Match {
    std::string path;
    nn::Module* module;
    const PlanRule* rule;
    int64_t unit;
  };
  std::vector<Match> matches;
  std::map<std::string, const PlanRule*> owner;
  for (const PlanRule& rule : plan.rules) {
    const int64_t unit = rule.style == StyleKind::Colwise ? resolve_unit(rule, options) : 1;
    size_t hits = 0;
    for (auto& [path, module] : module_paths(root)) {
      if (path.empty() || !pattern_matches(rule.pattern, path)) continue;
      ++hits;
      auto [it, fresh] = owner.emplace(path, &rule);
      TESSEL_CHECK(fresh, "tensor-parallel plan: module '", path, "' is matched by both '",
                   it->second->pattern, "' and '", rule.pattern, "'");
      TESSEL_CHECK(kind_fits(rule.style, *module), "tensor-parallel plan: style ",
                   style_name(rule.style), " (pattern '", rule.pattern, "') applies to ",
                   kinds_of(rule.style), "; '", path, "' is a ", module->type_name());
      TESSEL_CHECK(!module->has_forward_override(), "tensor-parallel plan: '", path,
                   "' is already parallelized");
      check_declared(rule.style, *module, options.sequence_parallel, path);
      if (rule.style == StyleKind::Colwise && (rule.blocks > 1 || unit > 1)) {
        auto* lin = dynamic_cast<nn::Linear*>(module);
        const int64_t out = lin->out_features();
        TESSEL_CHECK(out % rule.blocks == 0 && (out / rule.blocks) % unit == 0,
                     "tensor-parallel plan: '", path, "': ", out, " output features are not ",
                     rule.blocks, " blocks of whole units of ", unit);
        const int64_t units = out / rule.blocks / unit;
        const bool replicated = rule.replicate && units < n && n % units == 0;
        TESSEL_CHECK(units % n == 0 || replicated, "tensor-parallel plan: '", path, "': ", units,
                     " heads (units of ", unit, ") are not divisible by tp = ", n,
                     rule.replicate ? " and tp is not a multiple of them (to replicate them)" : "");
      }
      matches.push_back({path, module, &rule, unit});
    }
    if (hits == 0) {
      std::string some;
      int shown = 0;
      for (auto& [path, module] : module_paths(root)) {
        if (path.empty() || shown++ >= 8) continue;
        some += (some.empty() ? "" : ", ") + path;
      }
      TESSEL_FAIL("tensor-parallel plan: pattern '", rule.pattern, "' matches no module of this ",
                  root.type_name(), " (its modules begin: ", some, ", ...)");
    }
  }
  // Pass 2: apply.
  ParallelizeResult result;
  result.sequence = std::make_shared<SequenceState>();
  result.sequence_parallel = options.sequence_parallel;
  TpOptions base;
  base.sequence_parallel = options.sequence_parallel;
  base.sequence = result.sequence;
  base.copy_values = options.copy_values;
  for (const Match& m : matches) {
    const PlanRule& rule = *m.rule;
    switch (rule.style) {
      case StyleKind::Colwise: {
        auto& lin = dynamic_cast<nn::Linear&>(*m.module);
        TpOptions o = base;
        o.blocks = rule.blocks;
        o.unit = m.unit;
        o.replicate = rule.replicate;
        const sharding::ShardLayout spec{0,      lin.out_features(), 0, rule.blocks,
                                         m.unit, rule.replicate};
        parallelize_colwise(lin, tp, o);
        result.sharded.emplace_back(join_name(m.path, "weight"), spec);
        if (lin.bias.defined()) result.sharded.emplace_back(join_name(m.path, "bias"), spec);
        break;
      }
      case StyleKind::Rowwise: {
        auto& lin = dynamic_cast<nn::Linear&>(*m.module);
        parallelize_rowwise(lin, tp, rule.input_is_sharded, base);
        result.sharded.emplace_back(join_name(m.path, "weight"),
                                    sharding::ShardLayout{1, lin.in_features()});
        break;
      }
      case StyleKind::VocabParallel: {
        auto& emb = dynamic_cast<nn::Embedding&>(*m.module);
        const int64_t vocab = emb.weight.size(0);
        parallelize_vocab_embedding(emb, tp, base);
        result.sharded.emplace_back(join_name(m.path, "weight"),
                                    sharding::ShardLayout{0, vocab, padded_vocab_size(vocab, n)});
        break;
      }
      case StyleKind::Sequence:
        parallelize_sequence(*m.module, tp, base, rule.gather_output);
        break;
    }
    result.applied.emplace_back(m.path, rule.style);
  }
  for (const auto& [name, p] : root.named_parameters())
    if (result.spec(name) == nullptr) result.replicated.push_back(name);
  return result;
}

}  // namespace tessel::parallel
