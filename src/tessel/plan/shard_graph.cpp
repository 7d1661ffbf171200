// SPDX-License-Identifier: Apache-2.0
// Groups, strategies, costs and edges of the sharding ILP, from a traced step (shard_graph.h).
#include "tessel/plan/shard_graph.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "tessel/core/error.h"
#include "tessel/plan/comm_cost.h"
#include "tessel/sharding/op_rules.h"
#include "tessel/sharding/redistribute.h"

namespace tessel::plan {
namespace {

using sharding::Placement;
const Placement R = Placement::replicate();
const Placement P = Placement::partial();
Placement S(int d) {
  return Placement::shard(d);
}

// A style's placements for an op's inputs (negative dims count from the end), checked against
// sharding/op_rules.h before use: the table, not this list, says what is legal.
struct StyleSignature {
  const char* style;
  std::vector<Placement> inputs;
};

// With `sequence_parallel`, also the Sequence style's placements (the sequence is the dim before
// the features, S(-2)): a norm or a residual add on the rank's piece, an embedding that looks up
// only the rank's positions.
std::vector<StyleSignature> style_signatures(const std::string& op, bool sequence_parallel) {
  static const std::map<std::string, std::vector<StyleSignature>> table = {
      {"linear", {{"replicated", {R, R}}, {"Colwise", {R, S(0)}}, {"Rowwise", {S(-1), S(1)}}}},
      {"embedding", {{"replicated", {R, R}}, {"VocabParallel", {S(0), R}}}},
      {"layer_norm", {{"replicated", {R, R, R}}}},
      {"rms_norm", {{"replicated", {R, R}}}},
      {"attention", {{"replicated", {R, R, R}}, {"heads", {S(2), S(2), S(2)}}}},
      {"cross_entropy", {{"replicated", {R, R}}, {"vocab-parallel", {S(1), R}}}},
      {"add", {{"replicated", {R, R}}, {"features", {S(-1), S(-1)}}, {"pending sum", {P, P}}}},
      {"mul", {{"replicated", {R, R}}, {"features", {S(-1), S(-1)}}}},
  };
  static const std::map<std::string, std::vector<StyleSignature>> sequence = {
      {"embedding", {{"Sequence", {R, S(-1)}}}},
      {"layer_norm", {{"Sequence", {S(-2), R, R}}}},
      {"rms_norm", {{"Sequence", {S(-2), R}}}},
      {"add", {{"sequence", {S(-2), S(-2)}}}},
  };
  std::vector<StyleSignature> out;
  if (auto it = table.find(op); it != table.end()) out = it->second;
  if (auto it = sequence.find(op); sequence_parallel && it != sequence.end())
    out.insert(out.end(), it->second.begin(), it->second.end());
  return out;
}

// S(-2) resolved on `shape`: the sequence pieces of sequence parallelism.
bool is_sequence_shard(Placement p, const Shape& shape) {
  return p.is_shard() && shape.ndim() >= 2 && p.dim == int(shape.ndim()) - 2;
}

// A forward op computed from model state alone (a family's rotary tables converted to the compute
// dtype): the same on every rank, neither a parameter nor a placed activation.
bool is_constant(const Graph& g, int64_t id) {
  const OpNode& op = g.ops[size_t(id)];
  if (op.phase != Phase::Forward || op.kernel == "embedding") return false;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    const int64_t p = op.producers[i];
    if (p >= 0 ? !is_constant(g, p) : !dtype_is_float(op.inputs[i].dtype)) return false;
  }
  return true;
}

bool is_activation(const OpNode& op, size_t i, const Graph& g) {
  const int64_t p = op.producers[i];
  return p >= 0 && g.ops[size_t(p)].phase == Phase::Forward && !is_constant(g, p);
}

bool is_parameter(const OpNode& op, size_t i, const Graph& g) {
  return op.producers[i] < 0 && dtype_is_float(op.inputs[i].dtype);
}

// Ops that join their producer's group: they take the placement it gives them (follow() below).
bool is_follower(const OpNode& op) {
  static const std::set<std::string> kinds = {"binary", "unary", "dropout", "split",
                                              "reduce", "copy",  "convert", "rope"};
  return kinds.contains(op.kernel);
}

int activation_count(const OpNode& op, const Graph& g) {
  int n = 0;
  for (size_t i = 0; i < op.inputs.size(); ++i) n += is_activation(op, i, g) ? 1 : 0;
  return n;
}

// The sharding rule an op starts a group with, or "" for ops that follow their producer.
std::string anchor_rule(const OpNode& op, const Graph& g) {
  if (op.kernel == "embedding" || op.kernel == "layer_norm" || op.kernel == "rms_norm" ||
      op.kernel == "attention" || op.kernel == "cross_entropy")
    return op.kernel;
  if (op.kernel == "gemm")
    return op.inputs.size() == 2 && is_parameter(op, 1, g) && op.inputs[1].shape.ndim() == 2
               ? "linear"
               : "?";
  if (op.kernel == "binary" && activation_count(op, g) >= 2)
    return op.detail == "add" || op.detail == "mul" ? op.detail : "?";
  return "";
}

double fraction(Placement p, const Shape& shape, int tp) {
  if (!p.is_shard()) return 1;
  const int64_t n = shape[size_t(p.dim)];
  return double((n + tp - 1) / tp) / double(std::max<int64_t>(n, 1));
}

// A shard of a dim the tensor has (a scalar, such as an MoE layer's auxiliary loss, has none) and
// at least one element per rank.
bool fits(Placement p, const Shape& shape, int tp) {
  return !p.is_shard() || (p.dim >= 0 && p.dim < int(shape.ndim()) && shape[size_t(p.dim)] >= tp);
}

struct Builder {
  const Graph& g;
  Cluster cluster;
  const ShardGraphOptions& o;
  std::vector<int> ranks;
  ShardModel m;
  double act_scale = 1;              // saved activation bytes per forward output byte
  std::map<const void*, int> owner;  // parameter storage -> the group that counts it

  Builder(const Graph& graph, const Cluster& c, const ShardGraphOptions& options)
      : g(graph),
        cluster(c.num_devices() >= options.tp ? c : c.with_devices(options.tp)),
        o(options) {
    for (int r = 0; r < o.tp; ++r) ranks.push_back(r);
  }

  double op_seconds(const OpNode& op) const {
    double eff = 1;
    if (op.kernel == "gemm" && op.inputs.size() == 2 && op.inputs[1].shape.ndim() == 2) {
      const int64_t k = op.inputs[1].shape[1], n = op.inputs[1].shape[0];
      eff = cluster.gemm_efficiency(o.dtype, op.inputs[0].shape.numel() / std::max<int64_t>(k, 1),
                                    n, k);
    }
    const double compute = op.cost.flops / (cluster.peak_flops(o.dtype) * eff);
    const double memory =
        (op.cost.bytes_read + op.cost.bytes_written) / cluster.device.memory_bandwidth;
    return std::max(compute, memory);
  }

  double collective_seconds(Collective c, double bytes) const {
    return collective_cost(cluster, c, ranks, bytes).seconds;
  }

  // Time of moving a tensor of `shape` from `from` to `to`. What the styles do (`styles` set,
  // kForbidden otherwise): nothing (R, or the same shard), a local slice of a whole input by a
  // Rowwise product (`into_linear`; attention or an add cannot slice what they are given), and
  // the all-reduce that completes a pending sum right where it is made (Rowwise, VocabParallel):
  // a pending sum never travels further. Under sequence parallelism the styles move activations
  // differently: a pending sum is reduce-scattered into sequence pieces where it is made, a
  // Colwise product (`into_colwise`) all-gathers its input from sequence pieces and takes no whole
  // one, and nothing is sliced.
  enum class Rule { Any, Styles, StylesIntoLinear };
  double transfer(Placement from, Placement to, const Shape& shape, DType dtype, Rule rule,
                  bool into_colwise = false) const {
    if (rule != Rule::Any && o.sequence_parallel) {
      const bool reduce_scatter = from.is_partial() && is_sequence_shard(to, shape);
      const bool gather = into_colwise && is_sequence_shard(from, shape) && to.is_replicate();
      const bool keep = from == to && !from.is_partial() && !into_colwise;
      if (!reduce_scatter && !gather && !keep) return kForbidden;
    } else if (rule != Rule::Any) {
      if (from.is_partial() && !to.is_replicate()) return kForbidden;
      const bool slice = from.is_replicate() && to.is_shard() && rule == Rule::StylesIntoLinear;
      if (!(from == to) && !slice && !(from.is_partial() && to.is_replicate())) return kForbidden;
    }
    if (from == to) return 0;
    const sharding::RedistributeCost rc = sharding::redistribute_cost(from, to, shape, dtype, o.tp);
    if (rc.collective == "none") return 0;
    std::string name = rc.collective;
    if (name.size() > 2 && name.substr(name.size() - 2) == "_v") name.resize(name.size() - 2);
    const double bytes = double(shape.numel()) * double(dtype_size(dtype));
    return collective_seconds(collective_from_name(name), bytes);
  }

  void form_groups() {
    m.group_of.assign(g.ops.size(), -1);
    for (size_t i = 0; i < g.ops.size(); ++i) {
      const OpNode& op = g.ops[i];
      if (op.phase != Phase::Forward || is_constant(g, int64_t(i))) continue;
      std::string rule = anchor_rule(op, g);
      if (rule.empty() && !is_follower(op)) rule = "?";  // no rule: a replicated node
      int join = -1;
      if (rule.empty()) {
        std::set<int> from;
        for (size_t k = 0; k < op.inputs.size(); ++k)
          if (is_activation(op, k, g)) from.insert(m.group_of[size_t(op.producers[k])]);
        if (from.size() == 1) join = *from.begin();
      }
      if (join >= 0) {
        m.groups[size_t(join)].members.push_back(int(i));
      } else {
        ShardGroup group;
        group.anchor = int(i);
        group.members = {int(i)};
        group.op = rule == "?" ? "" : rule;
        if (op.module >= 0) {
          group.module = g.modules[size_t(op.module)].path;
          group.module_type = g.modules[size_t(op.module)].type;
        }
        join = int(m.groups.size());
        m.groups.push_back(std::move(group));
      }
      m.group_of[i] = join;
      for (size_t k = 0; k < op.inputs.size(); ++k)
        if (is_parameter(op, k, g)) owner.emplace(op.inputs[k].storage, join);
    }
  }

  // The placement of input k of `op` inside the group (its producer's output seen through the
  // input's view), or nullopt.
  std::optional<Placement> inner_input(const OpNode& op, size_t k, const GroupStrategy& st) const {
    const int64_t p = op.producers[k];
    const OpNode& prod = g.ops[size_t(p)];
    for (size_t out = 0; out < prod.outputs.size(); ++out) {
      if (prod.outputs[out].storage != op.inputs[k].storage) continue;
      auto it = st.outputs.find({int(p), int(out)});
      if (it == st.outputs.end()) return std::nullopt;
      return view_placement(it->second, prod.outputs[out].shape, op.inputs[k].shape, o.tp);
    }
    return std::nullopt;
  }

  // A merged op takes the placement its producer gives it; false when it cannot (a nonlinear
  // op on a pending sum, a reduction of a sharded tensor, ...).
  bool follow(int id, GroupStrategy& st) const {
    const OpNode& op = g.ops[size_t(id)];
    std::optional<Placement> a;
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      if (!is_activation(op, k, g)) continue;
      const auto p = inner_input(op, k, st);
      if (!p || (a && !(*a == *p))) return false;
      a = p;
    }
    if (!a) return false;
    const Shape in = op.outputs[0].shape;
    auto set_all = [&](Placement p) {
      for (size_t out = 0; out < op.outputs.size(); ++out) st.outputs[{id, int(out)}] = p;
    };
    if (op.kernel == "binary") {
      if (a->is_partial() && op.detail != "add" && op.detail != "sub" &&
          activation_count(op, g) > 1)
        return false;
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        if (!is_parameter(op, k, g)) continue;
        const Shape& ps = op.inputs[k].shape;
        const bool cut = a->is_shard() && a->dim == int(in.ndim()) - 1 && ps.ndim() == 1 &&
                         ps[0] == in[in.ndim() - 1];
        if (a->is_shard() && !cut && ps.numel() > 1) return false;
        st.parameters[op.inputs[k].storage] = cut ? S(0) : R;
      }
      set_all(*a);
      return true;
    }
    if (op.kernel == "unary") {
      if (a->is_partial() && op.detail != "scale" && op.detail != "neg") return false;
      set_all(*a);
      return true;
    }
    if (op.kernel == "dropout") {
      set_all(*a);
      return true;
    }
    if (op.kernel == "rope") {
      // Rotates pairs within the last dim, per position: any other dim may be split.
      if (a->is_partial() || (a->is_shard() && a->dim == int(in.ndim()) - 1)) return false;
      set_all(*a);
      return true;
    }
    if (op.kernel == "split") {
      const Shape& from = op.inputs[0].shape;
      for (const kernels::TensorDesc& t : op.outputs)
        if (a->is_shard() && !fits(*a, t.shape, o.tp)) return false;
      if (a->is_shard() && op.outputs.size() > 1 &&
          op.outputs[0].shape[size_t(a->dim)] != from[size_t(a->dim)])
        st.blocks = int(op.outputs.size());
      set_all(*a);
      return true;
    }
    if (a->is_replicate()) {
      set_all(R);
      return true;
    }
    if ((op.kernel == "copy" || op.kernel == "convert") && op.outputs.size() == 1 &&
        op.outputs[0].shape == op.inputs[0].shape) {
      set_all(*a);
      return true;
    }
    return false;
  }

  // The strategies of a group: each style signature of its op that the rule table declares and
  // the shapes allow, followed through the merged ops.
  std::vector<GroupStrategy> strategies(const ShardGroup& group) const {
    const OpNode& op = g.ops[size_t(group.anchor)];
    std::string rule = group.op;
    std::vector<Shape> shapes;
    for (const kernels::TensorDesc& t : op.inputs) shapes.push_back(t.shape);
    if (rule == "add" || rule == "mul")
      shapes[1] = shapes[0];  // the rule's shapes; a broadcast keeps the dims
    if (!rule.empty()) {
      // Shapes the rule does not cover (K and V heads that do not divide the query heads): the
      // op stays whole.
      try {
        sharding::op_rule(rule).shape(shapes);
      } catch (const Error&) {
        rule.clear();
      }
    }
    std::vector<StyleSignature> candidates = style_signatures(rule, o.sequence_parallel);
    if (candidates.empty()) candidates.push_back({"replicated", {}});
    std::vector<GroupStrategy> out;
    for (const StyleSignature& cand : candidates) {
      GroupStrategy st;
      st.style = cand.style;
      Placement output = R;
      if (!rule.empty()) {
        const auto sig = sharding::find_signature(rule, cand.inputs, shapes);
        if (!sig) continue;
        output = sig->output;
        bool ok = true;
        for (size_t k = 0; k < op.inputs.size() && ok; ++k) {
          const Placement p = sharding::resolve(cand.inputs[k], op.inputs[k].shape.ndim());
          ok = fits(p, op.inputs[k].shape, o.tp);
          st.inputs.push_back(p);
          if (is_parameter(op, k, g)) st.parameters[op.inputs[k].storage] = p;
          st.split = st.split || p.is_shard();
        }
        if (!ok || !fits(output, op.outputs[0].shape, o.tp)) continue;
        // Grouped-query attention split by heads: each rank's query heads must find their K/V
        // heads on the rank, so tp divides both counts (sharding/op_rules.cpp).
        if (rule == "attention" && st.split && shapes[1][2] != shapes[0][2] &&
            (shapes[0][2] % o.tp != 0 || shapes[1][2] % o.tp != 0))
          continue;
        st.split = st.split || output.is_shard();
      } else {
        st.inputs.assign(op.inputs.size(), R);
        for (size_t k = 0; k < op.inputs.size(); ++k)
          if (is_parameter(op, k, g)) st.parameters[op.inputs[k].storage] = R;
      }
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        const Placement p = st.inputs[k];
        st.grads.push_back(p.is_partial() ? R : (p.is_replicate() && st.split ? P : p));
      }
      st.outputs[{group.anchor, 0}] = output;
      for (size_t out = 1; out < op.outputs.size(); ++out) st.outputs[{group.anchor, int(out)}] = R;
      bool ok = true;
      for (size_t k = 1; k < group.members.size() && ok; ++k) ok = follow(group.members[k], st);
      if (ok) out.push_back(std::move(st));
    }
    return out;
  }

  ShardStrategy cost(const ShardGroup& group, const GroupStrategy& st, int index) const {
    ShardStrategy s;
    s.name = st.style;
    double seconds = 0;
    for (int id : group.members) seconds += op_seconds(g.ops[size_t(id)]);
    s.compute_seconds = seconds * m.backward_factor / (st.split ? o.tp : 1);
    if (group.op == "cross_entropy" && st.style == "vocab-parallel") {
      // Megatron's vocab-parallel loss: all-reduces of the rows' max, sum of exponentials and
      // target logit.
      const OpNode& op = g.ops[size_t(group.anchor)];
      s.compute_seconds +=
          3 * collective_seconds(Collective::AllReduce, double(op.inputs[0].shape[0]) * 4.0);
    }
    for (int id : group.members) {
      const OpNode& op = g.ops[size_t(id)];
      for (size_t out = 0; out < op.outputs.size(); ++out)
        s.memory_bytes += act_scale * op.outputs[out].bytes() *
                          fraction(st.outputs.at({id, int(out)}), op.outputs[out].shape, o.tp);
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        if (!is_parameter(op, k, g) || owner.at(op.inputs[k].storage) != index) continue;
        auto it = st.parameters.find(op.inputs[k].storage);
        const Placement p = it == st.parameters.end() ? R : it->second;
        // The weights, their gradients and Adam's two moments, all f32.
        s.memory_bytes += 4.0 * op.inputs[k].bytes() * fraction(p, op.inputs[k].shape, o.tp);
      }
    }
    return s;
  }

  void build() {
    const double fwd = g.phase_total(Phase::Forward).flops;
    m.backward_factor = fwd > 0 ? g.total().flops / fwd : 1;
    double out_bytes = 0;
    for (const OpNode& op : g.ops)
      if (op.phase == Phase::Forward)
        for (const kernels::TensorDesc& t : op.outputs) out_bytes += t.bytes();
    act_scale = out_bytes > 0 ? g.saved_bytes / out_bytes : 0;
    form_groups();
    for (size_t v = 0; v < m.groups.size(); ++v) {
      ShardGroup& group = m.groups[v];
      group.strategies = strategies(group);
      const bool pinned =
          std::find(o.vocab_parallel_modules.begin(), o.vocab_parallel_modules.end(),
                    group.module) != o.vocab_parallel_modules.end() &&
          (group.op == "embedding" || group.op == "linear");
      if (pinned) {
        std::erase_if(group.strategies, [](const GroupStrategy& s) {
          return s.style != "VocabParallel" && s.style != "Colwise";
        });
        TESSEL_CHECK(!group.strategies.empty(), "shard ILP: '", group.module,
                     "' must be split by vocabulary, but its ", group.op,
                     " has no such placement on tp = ", o.tp);
      }
      TESSEL_CHECK(!group.strategies.empty(), "shard ILP: op ", group.anchor, " (",
                   g.ops[size_t(group.anchor)].kernel, " in '", group.module,
                   "') has no placement, not even replicated");
      ShardNode node;
      node.label = (group.module.empty() ? "<model>" : group.module) + ":" +
                   g.ops[size_t(group.anchor)].kernel;
      for (const GroupStrategy& st : group.strategies)
        node.strategies.push_back(cost(group, st, int(v)));
      m.problem.nodes.push_back(std::move(node));
    }
    add_edges();
    add_ties();
  }

  void add_edges() {
    for (size_t v = 0; v < m.groups.size(); ++v) {
      const ShardGroup& cg = m.groups[v];
      const OpNode& op = g.ops[size_t(cg.anchor)];
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        if (!is_activation(op, k, g)) continue;
        const int p = int(op.producers[k]);
        const int u = m.group_of[size_t(p)];
        const OpNode& prod = g.ops[size_t(p)];
        int out = -1;
        for (size_t j = 0; j < prod.outputs.size(); ++j)
          if (prod.outputs[j].storage == op.inputs[k].storage) out = int(j);
        TESSEL_CHECK(out >= 0, "shard ILP: op ", cg.anchor, " reads no output of its producer ", p);
        m.uses.push_back({p, out, cg.anchor, int(k)});
        const ShardGroup& pg = m.groups[size_t(u)];
        const Shape& shape = op.inputs[k].shape;
        const DType dtype = op.inputs[k].dtype;
        ShardEdge e{u, int(v), {}};
        for (const GroupStrategy& a : pg.strategies) {
          std::vector<double> row;
          for (const GroupStrategy& b : cg.strategies) {
            const auto from = view_placement(a.outputs.at({p, out}),
                                             prod.outputs[size_t(out)].shape, shape, o.tp);
            if (!from) {
              row.push_back(kForbidden);
              continue;
            }
            const Placement grad_out = from->is_partial() ? R : *from;
            const Rule rule = cg.op == "linear" ? Rule::StylesIntoLinear : Rule::Styles;
            const bool into_colwise = cg.op == "linear" && k == 0 && b.style == "Colwise";
            row.push_back(transfer(*from, b.inputs[k], shape, dtype, rule, into_colwise) +
                          transfer(b.grads[k], grad_out, shape, dtype, Rule::Any));
          }
          e.cost.push_back(std::move(row));
        }
        m.problem.edges.push_back(std::move(e));
      }
    }
  }

  // Every further use of a parameter must place it as its first use does.
  void add_ties() {
    for (size_t v = 0; v < m.groups.size(); ++v)
      for (int id : m.groups[v].members) {
        const OpNode& op = g.ops[size_t(id)];
        for (size_t k = 0; k < op.inputs.size(); ++k) {
          if (!is_parameter(op, k, g)) continue;
          const void* storage = op.inputs[k].storage;
          const int u = owner.at(storage);
          if (u == int(v)) continue;
          auto placed = [storage](const GroupStrategy& s) {
            auto it = s.parameters.find(storage);
            return it == s.parameters.end() ? R : it->second;
          };
          ShardEdge e{u, int(v), {}};
          for (const GroupStrategy& a : m.groups[size_t(u)].strategies) {
            std::vector<double> row;
            for (const GroupStrategy& b : m.groups[v].strategies)
              row.push_back(placed(a) == placed(b) ? 0.0 : kForbidden);
            e.cost.push_back(std::move(row));
          }
          m.problem.edges.push_back(std::move(e));
        }
      }
  }
};

}  // namespace

ShardModel build_shard_model(const Graph& graph, const Cluster& cluster,
                             const ShardGraphOptions& options) {
  TESSEL_CHECK(options.tp >= 1, "shard ILP: tp = ", options.tp, " must be >= 1");
  Builder b(graph, cluster, options);
  b.m.tp = options.tp;
  b.m.sequence_parallel = options.sequence_parallel;
  b.m.graph = &graph;
  b.build();
  b.m.problem.memory_budget =
      options.memory_budget > 0 ? options.memory_budget : double(b.cluster.device.memory_bytes);
  return std::move(b.m);
}

}  // namespace tessel::plan
