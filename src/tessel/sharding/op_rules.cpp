// SPDX-License-Identifier: Apache-2.0
// The op table: shape rules and placement signatures side by side.
#include "tessel/sharding/op_rules.h"

#include "tessel/core/error.h"

namespace tessel::sharding {
namespace {

const Placement R = Placement::replicate();
const Placement P = Placement::partial();
Placement S(int d) {
  return Placement::shard(d);
}

void need(std::span<const Shape> s, size_t n, const char* op) {
  TESSEL_CHECK(s.size() == n, op, ": ", s.size(), " input shapes, expected ", n);
}

Shape same_shape(std::span<const Shape> s, const char* op) {
  need(s, 2, op);
  TESSEL_CHECK(s[0] == s[1], op, ": shapes ", s[0], " and ", s[1], " differ");
  return s[0];
}

std::vector<OpRule> make_rules() {
  std::vector<OpRule> rules;
  // linear(x [..., in], w [out, in]) -> [..., out] (a bias is a separate add after it).
  rules.push_back({"linear",
                   2,
                   [](std::span<const Shape> s) {
                     need(s, 2, "linear");
                     TESSEL_CHECK(
                         s[0].ndim() >= 1 && s[1].ndim() == 2 && s[0][s[0].ndim() - 1] == s[1][1],
                         "linear: x ", s[0], " and weight ", s[1], " do not fit");
                     Shape out = s[0];
                     out[out.ndim() - 1] = s[1][0];
                     return out;
                   },
                   {{{R, R}, R, "replicated"},
                    {{R, S(0)}, S(-1), "Colwise: weight rows, output features"},
                    {{S(-1), S(1)}, P, "Rowwise: input features, pending sum"},
                    {{S(0), R}, S(0), "batch (data parallel)"},
                    {{S(-2), R}, S(-2), "sequence"},
                    {{P, R}, P, "linearity"}}});
  // add(a, b), same shapes.
  rules.push_back({"add",
                   2,
                   [](std::span<const Shape> s) { return same_shape(s, "add"); },
                   {{{R, R}, R, "replicated"},
                    {{S(0), S(0)}, S(0), "batch"},
                    {{S(-2), S(-2)}, S(-2), "sequence (residual adds)"},
                    {{S(-1), S(-1)}, S(-1), "features"},
                    {{P, P}, P, "sum of pending sums"}}});
  // mul(a, b), same shapes: elementwise, and linear in each operand, so a pending sum times a
  // whole tensor is still a pending sum. SwiGLU's silu(gate) * up between Colwise and Rowwise.
  rules.push_back({"mul",
                   2,
                   [](std::span<const Shape> s) { return same_shape(s, "mul"); },
                   {{{R, R}, R, "replicated"},
                    {{S(0), S(0)}, S(0), "batch"},
                    {{S(-2), S(-2)}, S(-2), "sequence"},
                    {{S(-1), S(-1)}, S(-1), "features (SwiGLU's gate times up)"},
                    {{P, R}, P, "linearity in the first operand"},
                    {{R, P}, P, "linearity in the second operand"}}});
  // gelu(x): elementwise and nonlinear (a pending sum must be reduced first).
  rules.push_back({"gelu",
                   1,
                   [](std::span<const Shape> s) {
                     need(s, 1, "gelu");
                     return s[0];
                   },
                   {{{R}, R, "replicated"},
                    {{S(0)}, S(0), "batch"},
                    {{S(-2)}, S(-2), "sequence"},
                    {{S(-1)}, S(-1), "features (between Colwise and Rowwise)"}}});
  // layer_norm(x [..., C], w [C], b [C]) over the last dim.
  rules.push_back({"layer_norm",
                   3,
                   [](std::span<const Shape> s) {
                     need(s, 3, "layer_norm");
                     const int64_t c = s[0].ndim() >= 1 ? s[0][s[0].ndim() - 1] : -1;
                     TESSEL_CHECK(s[1] == Shape({c}) && s[2] == Shape({c}), "layer_norm: x ", s[0],
                                  " with weight ", s[1], " and bias ", s[2]);
                     return s[0];
                   },
                   {{{R, R, R}, R, "replicated"},
                    {{S(0), R, R}, S(0), "batch"},
                    {{S(-2), R, R}, S(-2), "Sequence (parameter gradients are pending sums)"}}});
  // rms_norm(x [..., C], w [C]) over the last dim: x / rms(x) * w, no bias.
  rules.push_back({"rms_norm",
                   2,
                   [](std::span<const Shape> s) {
                     need(s, 2, "rms_norm");
                     const int64_t c = s[0].ndim() >= 1 ? s[0][s[0].ndim() - 1] : -1;
                     TESSEL_CHECK(s[1] == Shape({c}), "rms_norm: x ", s[0], " with weight ", s[1]);
                     return s[0];
                   },
                   {{{R, R}, R, "replicated"},
                    {{S(0), R}, S(0), "batch"},
                    {{S(-2), R}, S(-2), "Sequence (the weight's gradient is a pending sum)"}}});
  // embedding(w [V, C], ids [...]) -> [..., C].
  rules.push_back(
      {"embedding",
       2,
       [](std::span<const Shape> s) {
         need(s, 2, "embedding");
         TESSEL_CHECK(s[0].ndim() == 2, "embedding: weight ", s[0], " is not [V, C]");
         Shape out = s[1];
         out.push_back(s[0][1]);
         return out;
       },
       {{{R, R}, R, "replicated"},
        {{R, S(0)}, S(0), "batch"},
        {{R, S(-1)}, S(-2), "sequence"},
        {{S(0), R}, P, "VocabParallel: ids outside the rank's rows look up zeros", true}}});
  // attention(q [B, T, H, D], k, v [B, T, Hkv, D]) -> [B, T, H, D], Hkv dividing H (grouped-
  // query attention: query head h reads K/V head h / (H / Hkv)). Split by heads, each rank's
  // query heads read its own K/V heads only where the ranks divide both counts evenly (the
  // contiguous pieces then keep the grouping); with Hkv < H the caller checks that.
  rules.push_back({"attention",
                   3,
                   [](std::span<const Shape> s) {
                     need(s, 3, "attention");
                     const bool shapes = s[0].ndim() == 4 && s[1] == s[2] && s[1].ndim() == 4 &&
                                         s[0][0] == s[1][0] && s[0][1] == s[1][1] &&
                                         s[0][3] == s[1][3] && s[1][2] >= 1 &&
                                         s[0][2] % s[1][2] == 0;
                     TESSEL_CHECK(shapes, "attention: q ", s[0], " k ", s[1], " v ", s[2],
                                  " must be [B, T, H, D] and k = v [B, T, Hkv, D] with Hkv "
                                  "dividing H");
                     return s[0];
                   },
                   {{{R, R, R}, R, "replicated"},
                    {{S(0), S(0), S(0)}, S(0), "batch"},
                    {{S(2), S(2), S(2)}, S(2), "heads (per-head Colwise qkv)"}}});
  // cross_entropy(logits [N, V], targets [N]) -> the mean, a scalar.
  rules.push_back({"cross_entropy",
                   2,
                   [](std::span<const Shape> s) {
                     need(s, 2, "cross_entropy");
                     TESSEL_CHECK(s[0].ndim() == 2 && s[1] == Shape({s[0][0]}),
                                  "cross_entropy: logits ", s[0], " targets ", s[1]);
                     return Shape{};
                   },
                   {{{R, R}, R, "replicated"},
                    {{S(1), R},
                     R,
                     "vocab-parallel: local max, sum of exp and target logit, two all-reduces",
                     true}}});
  return rules;
}

}  // namespace

const std::vector<OpRule>& op_rules() {
  static const std::vector<OpRule> rules = make_rules();
  return rules;
}

const OpRule& op_rule(std::string_view name) {
  for (const OpRule& r : op_rules())
    if (r.name == name) return r;
  TESSEL_FAIL("no sharding rule for op '", name, "'");
}

Placement resolve(Placement p, int64_t ndim) {
  if (p.is_shard() && p.dim < 0) p.dim += int(ndim);
  return p;
}

std::optional<OpSignature> find_signature(std::string_view op, std::span<const Placement> inputs,
                                          std::span<const Shape> shapes) {
  const OpRule& rule = op_rule(op);
  TESSEL_CHECK(inputs.size() == rule.inputs && shapes.size() == rule.inputs, op, ": ",
               inputs.size(), " placements and ", shapes.size(), " shapes for ", rule.inputs,
               " inputs");
  const Shape out = rule.shape(shapes);
  for (const OpSignature& sig : rule.signatures) {
    bool ok = true;
    for (size_t i = 0; i < inputs.size() && ok; ++i)
      ok = resolve(sig.inputs[i], shapes[i].ndim()) == resolve(inputs[i], shapes[i].ndim());
    if (!ok) continue;
    OpSignature resolved = sig;
    for (size_t i = 0; i < inputs.size(); ++i)
      resolved.inputs[i] = resolve(sig.inputs[i], shapes[i].ndim());
    resolved.output = resolve(sig.output, out.ndim());
    return resolved;
  }
  return std::nullopt;
}

}  // namespace tessel::sharding
