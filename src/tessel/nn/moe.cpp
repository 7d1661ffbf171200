// SPDX-License-Identifier: Apache-2.0
// The MoE layer's forward: routing on the host from the probabilities, every differentiable step
// an op. The gates are gathered from the softmax (ops::embedding over the [T*E, 1] view), the
// tokens gathered into expert order the same way, and the combine gathers each (token, choice)
// pair's expert row back: its backward is the scatter-add. A dropped pair is multiplied by 0, so
// neither its gate nor any expert receives gradient from it.
#include "tessel/nn/moe.h"

#include <sstream>

#include "tessel/ops/ops.h"
#include "tessel/tensor/default_device.h"

namespace tessel::nn {

namespace {

// Host values as a tensor; shape-only on the meta device (the planner's traces), which holds none.
template <typename T>
Tensor values_tensor(const std::vector<T>& values, const Shape& shape) {
  if (default_device().is_meta()) return empty(shape, DTypeOf<T>::value);
  return from_data(values, shape);
}

Tensor i64_tensor(const std::vector<int64_t>& values) {
  return values_tensor(values, Shape{int64_t(values.size())});
}

// The planner traces a forward on meta, where the router's probabilities have no values: each
// token then routes to k consecutive experts in turn (t k, t k + 1, ... mod E), which spreads the
// T k rows evenly. Without drops (inference) every routing makes tensors of the same sizes, so
// the trace allocates what a real forward does.
std::vector<double> meta_probabilities(int64_t tokens, int64_t experts, int64_t k) {
  std::vector<double> p(size_t(tokens * experts), 0.0);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < experts; ++j)
      p[size_t(t * experts + (t * k + j) % experts)] = double(experts - j) / double(experts * 2);
  return p;
}

void append_list(std::ostringstream& out, const std::vector<int64_t>& v) {
  out << '[';
  for (size_t i = 0; i < v.size(); ++i) out << (i ? "," : "") << v[i];
  out << ']';
}

double scalar(const Tensor& t) {
  if (t.device().is_meta()) return 0.0;
  return t.detach().to(DType::F64).to_vector<double>()[0];
}

}  // namespace

std::string MoEStats::json() const {
  std::ostringstream out;
  out.precision(17);
  out << "{\"tokens\":" << tokens << ",\"capacity\":" << capacity << ",\"tokens_per_expert\":";
  append_list(out, tokens_per_expert);
  out << ",\"routed_per_expert\":";
  append_list(out, routed_per_expert);
  out << ",\"dropped\":" << dropped << ",\"balance_loss\":" << balance_loss
      << ",\"z_loss\":" << z_loss << ",\"aux_loss\":" << aux_loss << '}';
  return out.str();
}

MoE::MoE(const MoEConfig& config, Init init, Generator* jitter_generator)
    : Module("MoE"), config_(config), jitter_generator_(jitter_generator) {
  config_.validate();
  router = register_module(
      "router", std::make_shared<Linear>(config_.hidden, config_.num_experts, false, init));
  experts = register_module("experts",
                            std::make_shared<ExpertMLPs>(config_.num_experts, config_.hidden,
                                                         config_.ffn_hidden, config_.expert, init));
  if (config_.residual)
    dense = register_module("dense", std::make_shared<DenseMLP>(config_.hidden, config_.ffn_hidden,
                                                                config_.expert, init));
}

// Switch's multiplicative jitter on the router's input, x * U[1 - eps, 1 + eps), drawn by the
// counter-based generator (element i of the reserved range), so a replay gives the same noise.
// Drawn positionally (the trainer's), each token's noise is the one-process batch's for its row.
Tensor MoE::jittered(const Tensor& x) {
  if (!is_training() || config_.jitter == 0) return x;
  Generator& gen = jitter_generator_ != nullptr ? *jitter_generator_ : default_generator();
  const uint64_t n = uint64_t(x.numel());
  const auto [seed, offset] = positional_ ? positional_stream(gen, *positional_, n)
                                          : std::array<uint64_t, 2>{gen.seed(), gen.reserve(n)};
  std::vector<double> noise(n);
  for (uint64_t i = 0; i < n; ++i)
    noise[i] = 1.0 - config_.jitter + 2.0 * config_.jitter * double(uniform_at(seed, offset, i));
  return ops::mul(x, values_tensor(noise, x.shape()).to(x.dtype()));
}

void MoE::set_positional(int64_t part, int64_t parts) {
  TESSEL_CHECK(parts >= 1 && part >= 0 && part < parts, "MoE '", path(), "': part ", part, " of ",
               parts, " (expected 0 <= part < parts)");
  positional_ = PositionalDraw{site_id(path()), part, parts};
}

std::vector<int64_t> TokenRegion::whole_choices(const Tensor&, const std::vector<int64_t>&, int64_t,
                                                std::vector<int64_t>&, const MetaChoices&) {
  TESSEL_CHECK(false, "MoE: this token region does not route pieces");
  return {};
}

Tensor TokenRegion::whole_value(const Tensor&) {
  TESSEL_CHECK(false, "MoE: this token region does not route pieces");
  return {};
}

bool MoE::routes_pieces() const {
  return region_ && region_->routes_pieces() && experts->tensor_region() == nullptr;
}

MoE::Output MoE::forward(const Tensor& given) {
  if (routes_pieces())
    return forward_tokens(given, region_->pieces_active() ? region_.get() : nullptr);
  if (region_) {  // route every token of the region, give back this caller's piece
    Output out = forward_tokens(region_->enter(given));
    out.output = region_->leave(out.output);
    return out;
  }
  return forward_tokens(given);
}

MoE::Output MoE::forward_tokens(const Tensor& x, TokenRegion* pieces) {
  const int64_t c = config_.hidden, e_count = config_.num_experts, k = config_.top_k;
  TESSEL_CHECK(x.defined() && x.ndim() >= 1 && x.size(-1) == c, "MoE: input ",
               x.defined() ? x.shape().str() : std::string("undefined"), " must be [..., ", c,
               "] (hidden)");
  const int64_t tokens = x.numel() / c;
  TESSEL_CHECK(tokens > 0, "MoE: input ", x.shape().str(), " has no tokens");
  Output out;
  out.output = run_forward({x}, [&] {
    Tensor x2 = ops::reshape(x, {tokens, c});
    // Selective precision (Switch Transformer, section 2.4): under a LowPrecisionScope the router
    // keeps its f32 weight (autocast.cpp leaves it), so its input is cast up and the
    // probabilities, gates and auxiliary losses stay f32: the choice of experts does not hang on
    // 16-bit ties, and layouts that round the weights alike route alike.
    MoEConfig routing_config = config_;
    if (!is_training() && !config_.drop_in_eval) routing_config.drop_tokens = false;
    // A piece's peers' choices on the meta device (TokenRegion::whole_choices).
    const auto meta_choices = [&](int64_t n) {
      return route_tokens(meta_probabilities(n, e_count, k), n, routing_config).choice;
    };
    const bool upcast = router->weight.dtype() == DType::F32 && x2.dtype() != DType::F32;
    Tensor router_in = upcast ? ops::cast(x2, DType::F32) : x2;
    if (pieces != nullptr && is_training() && config_.jitter != 0) {
      // A piece of the call: the whole call's noise range, this piece's tokens' elements of it,
      // so each token gets one process's noise. Their places in the call come from the region's
      // layout of the whole call's choices (one all-gather of k integers a token, placeholders).
      std::vector<int64_t> positions;
      const int64_t whole = int64_t(pieces
                                        ->whole_choices(x, std::vector<int64_t>(size_t(tokens * k)),
                                                        k, positions, meta_choices)
                                        .size()) /
                            k;
      Generator& gen = jitter_generator_ != nullptr ? *jitter_generator_ : default_generator();
      const uint64_t n = uint64_t(whole * c);
      const auto [seed, offset] = positional_ ? positional_stream(gen, *positional_, n)
                                              : std::array<uint64_t, 2>{gen.seed(), gen.reserve(n)};
      std::vector<double> noise(size_t(tokens * c));
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t j = 0; j < c; ++j)
          noise[size_t(t * c + j)] =
              1.0 - config_.jitter +
              2.0 * config_.jitter *
                  double(uniform_at(seed, offset, uint64_t(positions[size_t(t)] * c + j)));
      router_in =
          ops::mul(router_in, values_tensor(noise, router_in.shape()).to(router_in.dtype()));
    } else {
      router_in = jittered(router_in);
    }
    Tensor logits = router->forward(router_in);
    Tensor probs = ops::softmax(logits);
    routing_ =
        route_tokens(probs.device().is_meta() ? meta_probabilities(tokens, e_count, k)
                                              : probs.detach().to(DType::F64).to_vector<double>(),
                     tokens, routing_config);
    if (pieces != nullptr) {  // admitted over the whole call's choices, as one process admits
      std::vector<int64_t> positions;
      const std::vector<int64_t> all =
          pieces->whole_choices(x, routing_.choice, k, positions, meta_choices);
      routing_ = route_piece(all, int64_t(all.size()) / k, positions, routing_config, &whole_);
    }
    const Routing& r = routing_;
    const Routing& whole = pieces != nullptr ? whole_ : routing_;

    // Gates [T, k]: the chosen probabilities, renormalised over the k in Mixtral's form.
    std::vector<int64_t> flat(size_t(tokens * k)), pos(size_t(tokens * k));
    std::vector<double> keep(size_t(tokens * k));
    for (int64_t i = 0; i < tokens * k; ++i) {
      flat[size_t(i)] = (i / k) * e_count + r.choice[size_t(i)];
      pos[size_t(i)] = r.kept[size_t(i)] ? r.row[size_t(i)] : 0;
      keep[size_t(i)] = r.kept[size_t(i)] ? 1.0 : 0.0;
    }
    Tensor gates = ops::reshape(
        ops::embedding(ops::reshape(probs, {tokens * e_count, 1}), i64_tensor(flat)), {tokens, k});
    if (config_.gate_form == GateForm::Mixtral) gates = ops::div(gates, ops::sum(gates, {1}, true));
    Tensor weights = ops::mul(gates, values_tensor(keep, Shape{tokens, k}).to(gates.dtype()));
    if (upcast) weights = ops::cast(weights, x.dtype());

    // Experts over their contiguous rows, then each pair's row weighted back into its token.
    Tensor xs = ops::embedding(x2, i64_tensor(r.source));
    Tensor ys = dispatch_
                    ? dispatch_->run(*experts, xs, r)
                    : experts->forward(xs, i64_tensor(r.offsets), i64_tensor(r.expert_of_row));
    Tensor picked = ops::reshape(ops::embedding(ys, i64_tensor(pos)), {tokens, k, c});
    Tensor y = ops::sum(ops::mul(picked, ops::reshape(weights, {tokens, k, 1})), {1});
    if (config_.residual) y = ops::add(dense->forward(x2), y);

    // Load balance (Switch eq. 4): f_i = share of tokens whose first choice is i (a count, no
    // gradient), P_i = mean router probability of i. Over a piece both are the whole call's: f
    // from the whole routing, P the sum of every piece's addend.
    const double per_token = 1.0 / double(whole.tokens);
    std::vector<double> f(static_cast<size_t>(e_count));
    for (int64_t e = 0; e < e_count; ++e)
      f[size_t(e)] = double(whole.first_choice_count[size_t(e)]) * per_token;
    Tensor p_mean = pieces != nullptr
                        ? pieces->whole_value(ops::mul(ops::sum(probs, {0}), per_token))
                        : ops::mean(probs, {0});
    out.balance_loss =
        ops::mul(ops::sum(ops::mul(p_mean, values_tensor(f, Shape{e_count}).to(p_mean.dtype()))),
                 double(e_count));
    // z-loss (ST-MoE eq. 5): logsumexp by the max shift; the shift carries no gradient and the
    // derivative of the whole is the softmax either way.
    Tensor shift = ops::max(logits, {1}, true).detach();
    Tensor lse = ops::add(ops::log(ops::sum(ops::exp(ops::sub(logits, shift)), {1}, true)), shift);
    out.z_loss = pieces != nullptr
                     ? pieces->whole_value(ops::mul(ops::sum(ops::square(lse)), per_token))
                     : ops::mean(ops::square(lse));
    out.aux_loss = ops::add(ops::mul(out.balance_loss, config_.aux_loss_coef),
                            ops::mul(out.z_loss, config_.z_loss_coef));
    return ops::reshape(y, x.shape());
  });

  // The statistics are the whole call's (a piece's are the same on every rank of its call).
  const Routing& r = pieces != nullptr ? whole_ : routing_;
  stats_.tokens = r.tokens;
  stats_.capacity = r.capacity;
  stats_.routed_per_expert = r.routed;
  stats_.tokens_per_expert.assign(size_t(e_count), 0);
  for (int64_t e = 0; e < e_count; ++e)
    stats_.tokens_per_expert[size_t(e)] = r.offsets[size_t(e + 1)] - r.offsets[size_t(e)];
  stats_.dropped = r.dropped();
  stats_.rows = routing_.rows();
  stats_.balance_loss = scalar(out.balance_loss);
  stats_.z_loss = scalar(out.z_loss);
  stats_.aux_loss = scalar(out.aux_loss);
  return out;
}

}  // namespace tessel::nn
