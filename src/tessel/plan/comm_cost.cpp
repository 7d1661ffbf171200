// SPDX-License-Identifier: Apache-2.0
// The alpha-beta cost of each collective. One level: ring reduce-scatter / all-gather send n-1
// messages of S/n (Patarasuk & Yuan 2009), a ring all-reduce is the two in sequence, a double
// binary tree all-reduce pipelines S up and down trees of depth ceil(log2 n) with every rank
// receiving S and sending S per phase. Two levels: the bandwidth-optimal order — reduce-scatter
// inside the node first so that only S/p per device crosses the network, every device's NIC
// carrying its own share at once — which is what NCCL's multi-channel rings and trees reach
// across nodes and what hierarchical all-reduce (Horovod, BlueConnect) does explicitly.
#include "tessel/plan/comm_cost.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "tessel/core/error.h"

namespace tessel::plan {

std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::AllReduce:
      return "all_reduce";
    case Collective::ReduceScatter:
      return "reduce_scatter";
    case Collective::AllGather:
      return "all_gather";
    case Collective::Broadcast:
      return "broadcast";
    case Collective::SendRecv:
      return "send_recv";
    case Collective::AllToAll:
      return "all_to_all";
  }
  return "?";
}

Collective collective_from_name(std::string_view name) {
  for (Collective c : {Collective::AllReduce, Collective::ReduceScatter, Collective::AllGather,
                       Collective::Broadcast, Collective::SendRecv, Collective::AllToAll})
    if (collective_name(c) == name) return c;
  TESSEL_FAIL("unknown collective '", name, "' (known: all_reduce, reduce_scatter, all_gather, ",
              "broadcast, send_recv, all_to_all)");
}

namespace {

// Latency, bandwidth and reduction seconds, kept apart so callers can see which term dominates.
struct Terms {
  double lat = 0, bw = 0, reduce = 0;
  Terms& operator+=(const Terms& o) {
    lat += o.lat;
    bw += o.bw;
    reduce += o.reduce;
    return *this;
  }
};

// Thakur et al.'s gamma: the arithmetic of a reduction, which streams two operands in and one
// result out of device memory per byte reduced. Small next to a GPU link; on a CPU, where memory
// bandwidth is a few times the shared-memory transport's, it is a large share of an all-reduce.
double reduce_seconds(const Cluster& cluster, double bytes_reduced) {
  return 3.0 * bytes_reduced / cluster.device.memory_bandwidth;
}

// Ring reduce-scatter or all-gather of S bytes over n ranks: n-1 steps of S/n each.
Terms ring_half(int n, double s, const LinkSpec* l) {
  if (n <= 1) return {};
  return {(n - 1) * l->latency, (n - 1) / double(n) * s / l->rate()};
}

Terms ring_all_reduce(int n, double s, const LinkSpec* l) {
  Terms t = ring_half(n, s, l);
  t += ring_half(n, s, l);
  return t;
}

// Bytes each rank reduces in a ring reduce-scatter: n-1 blocks of S/n.
double ring_reduced(int n, double s) {
  return n <= 1 ? 0.0 : (n - 1) / double(n) * s;
}

// Double binary tree, pipelined: a reduce and a broadcast, each ceil(log2 n) hops deep, in which
// every rank receives (then sends) S in total over its two trees.
Terms tree_all_reduce(int n, double s, const LinkSpec* l) {
  if (n <= 1) return {};
  const double depth = std::ceil(std::log2(double(n)));
  return {2 * depth * l->latency, 2 * s / l->rate()};
}

struct Placement {
  int n = 0;  // ranks
  int p = 0;  // the most ranks on one node
  int m = 0;  // nodes touched
};

Placement place(const Cluster& cluster, std::span<const int> ranks) {
  TESSEL_CHECK(!ranks.empty(), "collective cost: the group has no ranks");
  std::set<int> seen;
  std::map<int, int> per_node;
  for (int r : ranks) {
    TESSEL_CHECK(seen.insert(r).second, "collective cost: rank ", r, " appears twice in the group");
    ++per_node[cluster.node_of(r)];
  }
  Placement pl;
  pl.n = int(ranks.size());
  pl.m = int(per_node.size());
  for (const auto& [node, count] : per_node) pl.p = std::max(pl.p, count);
  return pl;
}

Terms cost_terms(const Cluster& cluster, Collective op, const Placement& pl, double s,
                 Algorithm algo) {
  const int n = pl.n, p = pl.p, m = pl.m;
  const LinkSpec* intra = p > 1 ? &cluster.link(false) : nullptr;
  const LinkSpec* inter = m > 1 ? &cluster.link(true) : nullptr;
  Terms t;
  switch (op) {
    case Collective::AllReduce:
      t += ring_half(p, s, intra);  // reduce-scatter inside each node
      t += algo == Algorithm::Tree ? tree_all_reduce(m, s / p, inter)
                                   : ring_all_reduce(m, s / p, inter);
      t += ring_half(p, s, intra);  // all-gather inside each node
      // An inner rank of one double binary tree reduces two children's halves: S/p in all.
      t.reduce = reduce_seconds(
          cluster, ring_reduced(p, s) +
                       (algo == Algorithm::Tree ? (m > 1 ? s / p : 0.0) : ring_reduced(m, s / p)));
      return t;
    case Collective::ReduceScatter:
      t += ring_half(p, s, intra);
      t += ring_half(m, s / p, inter);
      t.reduce = reduce_seconds(cluster, ring_reduced(p, s) + ring_reduced(m, s / p));
      return t;
    case Collective::AllGather:
      t += ring_half(m, s / p, inter);
      t += ring_half(p, s, intra);
      return t;
    case Collective::Broadcast: {
      // A pipelined chain through the ranks node by node (NCCL's ring broadcast): n-m hops inside
      // nodes, m-1 across; the p channels leave a node through p NICs at once.
      if (intra) t.lat += (n - m) * intra->latency;
      if (inter) t.lat += (m - 1) * inter->latency;
      double bw = 0;
      if (intra) bw = std::max(bw, s / intra->rate());
      if (inter) bw = std::max(bw, s / (p * inter->rate()));
      t.bw = bw;
      return t;
    }
    case Collective::SendRecv: {
      const LinkSpec* l = m > 1 ? inter : intra;
      return {l->latency, s / l->rate()};
    }
    case Collective::AllToAll: {
      int64_t torus_devices = 0;  // the whole torus, or no torus
      if (intra && !intra->torus.empty()) {
        torus_devices = 1;
        for (int d : intra->torus) torus_devices *= d;
      }
      if (intra && !inter && n == torus_devices) {
        // The whole torus: each dimension's links carry their own traffic at once, a byte going
        // d/4 hops on average along a ring of d, so the busiest links (the longest dimension's)
        // carry S·d_max/4 bytes (Austin et al. 2025, "How to Scale Your Model", collectives:
        // a bidirectional ring's all-to-all is a quarter of its all-gather), at bandwidth / k
        // each for k dimensions longer than 1. Routed in hardware, the messages pay the hops to
        // the farthest device, not a latency per peer.
        int k = 0, longest = 1, hops = 0;
        for (int d : intra->torus) {
          if (d > 1) ++k;
          longest = std::max(longest, d);
          hops += d / 2;
        }
        t.lat = hops * intra->latency;
        t.bw = k == 0 ? 0 : s * longest / 4.0 / (intra->rate() / k);
        return t;
      }
      // Pairwise exchange: n-1 steps of S/n, p-1 of them to peers on the same node; the two
      // levels carry their shares at the same time.
      if (intra) t.lat += (p - 1) * intra->latency;
      if (inter) t.lat += (n - p) * inter->latency;
      double bw = 0;
      if (intra) bw = std::max(bw, (p - 1) / double(n) * s / intra->rate());
      if (inter) bw = std::max(bw, (n - p) / double(n) * s / inter->rate());
      t.bw = bw;
      return t;
    }
  }
  return t;
}

}  // namespace

CommCost collective_cost(const Cluster& cluster, Collective op, std::span<const int> ranks,
                         double bytes, Algorithm algorithm) {
  TESSEL_CHECK(std::isfinite(bytes) && bytes >= 0, "collective cost: ", collective_name(op), " of ",
               bytes, " bytes");
  TESSEL_CHECK(algorithm != Algorithm::Tree || op == Collective::AllReduce,
               "collective cost: ", collective_name(op),
               " has no tree algorithm (only all_reduce does)");
  TESSEL_CHECK(op != Collective::SendRecv || ranks.size() == 2, "collective cost: send_recv ",
               "needs exactly two ranks (source, destination), got ", ranks.size());
  const Placement pl = place(cluster, ranks);
  CommCost c;
  c.ranks_per_node = pl.p;
  c.nodes = pl.m;
  if (pl.n == 1) return c;
  Algorithm chosen = algorithm == Algorithm::Tree ? Algorithm::Tree : Algorithm::Ring;
  Terms t = cost_terms(cluster, op, pl, bytes, chosen);
  if (algorithm == Algorithm::Best && op == Collective::AllReduce) {
    const Terms tree = cost_terms(cluster, op, pl, bytes, Algorithm::Tree);
    if (tree.lat + tree.bw + tree.reduce < t.lat + t.bw + t.reduce)
      t = tree, chosen = Algorithm::Tree;
  }
  c.latency_seconds = t.lat;
  c.bandwidth_seconds = t.bw;
  c.reduce_seconds = t.reduce;
  c.seconds = t.lat + t.bw + t.reduce;
  c.algorithm = chosen;
  return c;
}

CommCost axis_cost(const Cluster& cluster, const dist::MeshShape& mesh,
                   const std::vector<std::string>& axes, Collective op, double bytes,
                   Algorithm algorithm) {
  TESSEL_CHECK(mesh.num_ranks() <= cluster.num_devices(), "collective cost: mesh ", mesh.str(),
               " has ", mesh.num_ranks(), " ranks but ", cluster.source, " has ",
               cluster.num_devices(), " devices (", cluster.nodes, " nodes x ",
               cluster.devices_per_node, ")");
  CommCost worst;
  std::set<int> seen;  // first rank of each group already costed
  for (int r = 0; r < mesh.num_ranks(); ++r) {
    const std::vector<int> group = mesh.group(r, axes);
    if (!seen.insert(group.front()).second) continue;
    const CommCost c = collective_cost(cluster, op, group, bytes, algorithm);
    if (c.seconds > worst.seconds || seen.size() == 1) worst = c;
  }
  return worst;
}

}  // namespace tessel::plan
