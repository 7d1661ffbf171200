// SPDX-License-Identifier: Apache-2.0
// Collective costs against the alpha-beta formulas worked by hand (docs/PLANNER.md,
// "Communication cost"), on odd group sizes and message sizes, one node and spanning nodes.
#include "tessel/plan/comm_cost.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/dist/mesh.h"

namespace tessel::plan {
namespace {

// Links: a1/B1 inside a node, a2/B2 between nodes; g: seconds per byte reduced (two operands
// read, one written at the device's memory bandwidth).
constexpr double a1 = 2e-6, B1 = 100e9, a2 = 10e-6, B2 = 10e9, kMemBw = 1e11, g = 3 / kMemBw;
constexpr double S = 13e6;  // 13 MB

Cluster make_cluster(int per_node, int nodes) {
  Cluster c;
  c.name = "hand";
  c.source = "hand.toml";
  c.device.kind = "X";
  c.device.peak_flops = {1e12, 0, 0, 0, 0};
  c.device.memory_bytes = 1 << 30;
  c.device.memory_bandwidth = kMemBw;
  c.devices_per_node = per_node;
  c.nodes = nodes;
  c.intra_node = LinkSpec{B1, a1, {}};
  c.inter_node = LinkSpec{B2, a2, {}};
  return c;
}

std::vector<int> iota(int n, int first = 0) {
  std::vector<int> v(size_t(n), 0);
  std::iota(v.begin(), v.end(), first);
  return v;
}

double cost(const Cluster& c, Collective op, const std::vector<int>& ranks, double bytes,
            Algorithm a = Algorithm::Ring) {
  return collective_cost(c, op, ranks, bytes, a).seconds;
}

TEST(CommCost, SevenRanksOnOneNode) {
  const Cluster c = make_cluster(8, 2);
  const std::vector<int> r7 = iota(7);
  // Ring all-reduce: 2(n-1) steps of S/n; each rank reduces n-1 blocks of S/n.
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllReduce, r7, S),
                   12 * a1 + 12.0 / 7 * S / B1 + g * 6.0 / 7 * S);
  // NCCL's trees run as chains inside a node: on one node the tree costs what the ring does.
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllReduce, r7, S, Algorithm::Tree),
                   12 * a1 + 12.0 / 7 * S / B1 + g * 6.0 / 7 * S);
  EXPECT_DOUBLE_EQ(cost(c, Collective::ReduceScatter, r7, S),
                   6 * a1 + 6.0 / 7 * S / B1 + g * 6.0 / 7 * S);
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllGather, r7, S), 6 * a1 + 6.0 / 7 * S / B1);
  EXPECT_DOUBLE_EQ(cost(c, Collective::Broadcast, r7, S), 6 * a1 + S / B1);
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllToAll, r7, S), 6 * a1 + 6.0 / 7 * S / B1);
  EXPECT_DOUBLE_EQ(cost(c, Collective::SendRecv, {3, 5}, S), a1 + S / B1);
  const CommCost r = collective_cost(c, Collective::AllReduce, r7, S, Algorithm::Ring);
  EXPECT_EQ(r.nodes, 1);
  EXPECT_EQ(r.ranks_per_node, 7);
  EXPECT_DOUBLE_EQ(r.latency_seconds, 12 * a1);
  EXPECT_DOUBLE_EQ(r.bandwidth_seconds, 12.0 / 7 * S / B1);
  EXPECT_DOUBLE_EQ(r.reduce_seconds, g * 6.0 / 7 * S);
}

// A link's efficiency scales the bandwidth term of every collective that crosses it, and only
// that term: latency and reduction stay.
TEST(CommCost, ALinksEfficiencyScalesItsBandwidthTerm) {
  Cluster c = make_cluster(8, 2);
  c.intra_node->efficiency = 0.8;
  const std::vector<int> r7 = iota(7);
  const CommCost r = collective_cost(c, Collective::AllReduce, r7, S, Algorithm::Ring);
  EXPECT_DOUBLE_EQ(r.latency_seconds, 12 * a1);
  EXPECT_DOUBLE_EQ(r.bandwidth_seconds, 12.0 / 7 * S / (0.8 * B1));
  EXPECT_DOUBLE_EQ(r.reduce_seconds, g * 6.0 / 7 * S);
  EXPECT_DOUBLE_EQ(cost(c, Collective::SendRecv, {3, 5}, S), a1 + S / (0.8 * B1));
  // Across nodes only the inter-node link's share changes when only it is derated.
  Cluster d = make_cluster(4, 2);
  d.inter_node->efficiency = 0.5;
  EXPECT_DOUBLE_EQ(cost(d, Collective::SendRecv, {1, 6}, S), a2 + S / (0.5 * B2));
  EXPECT_DOUBLE_EQ(cost(d, Collective::SendRecv, {1, 2}, S), a1 + S / B1);
}

// One rank on each of 7 nodes: a double binary tree of depth ceil(log2 7) = 3 each way, every
// rank receiving S and sending S per phase.
// A 4 x 4 x 4 torus of 64 devices (a TPU v4 slice): the all-to-all's busiest links are any
// dimension's, carrying S·4/4 bytes at B1/3 each (three dimensions share the device's ring
// bandwidth), and the messages pay the 2 + 2 + 2 hops to the farthest device; the pairwise
// exchange of a switch would pay 63 latencies. Other collectives, and a group that is not the
// whole torus, are costed as before.
TEST(CommCost, AllToAllOverATorusPaysItsDiameterAndItsBusiestDimension) {
  Cluster c = make_cluster(64, 1);
  const double switched = cost(c, Collective::AllToAll, iota(64), S);
  EXPECT_DOUBLE_EQ(switched, 63 * a1 + 63.0 / 64 * S / B1);
  c.intra_node->torus = {4, 4, 4};
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllToAll, iota(64), S), 6 * a1 + S * 4 / 4 / (B1 / 3));
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllToAll, iota(8), S), 7 * a1 + 7.0 / 8 * S / B1);
  c.intra_node->torus = {16, 4, 1};  // a dimension of 1 has no links
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllToAll, iota(64), S), 10 * a1 + S * 16 / 4 / (B1 / 2));
  // 32 of the 64 devices are no torus of those dimensions: the switched model.
  EXPECT_DOUBLE_EQ(cost(c.with_devices(32), Collective::AllToAll, iota(32), S),
                   31 * a1 + 31.0 / 32 * S / B1);
  Cluster plain = make_cluster(64, 1);
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllReduce, iota(64), S),
                   cost(plain, Collective::AllReduce, iota(64), S));
}

TEST(CommCost, TreeAcrossSevenNodes) {
  const Cluster c = make_cluster(1, 7);
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllReduce, iota(7), S, Algorithm::Tree),
                   6 * a2 + 2 * S / B2 + g * S);
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllReduce, iota(7), S),
                   12 * a2 + 12.0 / 7 * S / B2 + g * 6.0 / 7 * S);
}

TEST(CommCost, GroupSpanningThreeNodes) {
  const Cluster c = make_cluster(4, 3);
  const std::vector<int> r12 = iota(12);  // p = 4 per node, m = 3 nodes
  // Reduce-scatter in the node, ring all-reduce of S/4 across nodes, all-gather in the node.
  const double intra_half = 3 * a1 + 3.0 / 4 * S / B1;
  const double reduced = 3.0 / 4 * S + 2.0 / 3 * (S / 4);  // in the node, then across
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllReduce, r12, S),
                   2 * intra_half + 4 * a2 + 4.0 / 3 * (S / 4) / B2 + g * reduced);
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllReduce, r12, S, Algorithm::Tree),
                   2 * intra_half + 4 * a2 + 2 * (S / 4) / B2 + g * (3.0 / 4 * S + S / 4));
  EXPECT_DOUBLE_EQ(cost(c, Collective::ReduceScatter, r12, S),
                   intra_half + 2 * a2 + 2.0 / 3 * (S / 4) / B2 + g * reduced);
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllGather, r12, S),
                   intra_half + 2 * a2 + 2.0 / 3 * (S / 4) / B2);
  // Chain through 12 ranks: 9 hops inside nodes, 2 across; 4 NICs per node carry 4 channels.
  EXPECT_DOUBLE_EQ(cost(c, Collective::Broadcast, r12, S),
                   9 * a1 + 2 * a2 + std::max(S / B1, S / (4 * B2)));
  // Pairwise exchange: 3 local peers, 8 remote ones, both levels at once.
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllToAll, r12, S),
                   3 * a1 + 8 * a2 + std::max(3.0 / 12 * S / B1, 8.0 / 12 * S / B2));
  EXPECT_DOUBLE_EQ(cost(c, Collective::SendRecv, {3, 4}, S), a2 + S / B2);
}

// A mesh axis placed by the documented rank order: with tp=4 fastest, the dp groups of
// "tp=4,dp=4" over 2 nodes of 8 are {0,4,8,12}: 2 ranks on each of 2 nodes.
TEST(CommCost, DataParallelGroupOfAMeshSpansNodes) {
  const Cluster c = make_cluster(8, 2);
  const dist::MeshShape mesh = dist::MeshShape::parse("tp=4,dp=4");
  const std::vector<int> dp = mesh.group(0, {"dp"});
  ASSERT_EQ(dp, (std::vector<int>{0, 4, 8, 12}));
  const CommCost r = collective_cost(c, Collective::AllReduce, dp, S, Algorithm::Ring);
  EXPECT_EQ(r.nodes, 2);
  EXPECT_EQ(r.ranks_per_node, 2);
  EXPECT_DOUBLE_EQ(r.seconds,
                   2 * (a1 + 0.5 * S / B1) + 2 * a2 + (S / 2) / B2 + g * (0.5 * S + 0.5 * (S / 2)));
  // The tp groups stay on one node.
  const std::vector<int> tp = mesh.group(9, {"tp"});
  EXPECT_EQ(tp, (std::vector<int>{8, 9, 10, 11}));
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllReduce, tp, S),
                   6 * a1 + 6.0 / 4 * S / B1 + g * 3.0 / 4 * S);
}

// tp=3 over nodes of 4: tp groups {0,1,2} and {9,10,11} sit on one node, {3,4,5} and {6,7,8}
// straddle two; every group all-reduces at once, so the axis costs what a straddling group does.
TEST(CommCost, AxisCostIsTheSlowestGroupOfTheAxis) {
  const Cluster c = make_cluster(4, 3);
  const dist::MeshShape mesh = dist::MeshShape::parse("tp=3,dp=4");
  const CommCost tp = axis_cost(c, mesh, {"tp"}, Collective::AllReduce, S, Algorithm::Ring);
  EXPECT_EQ(tp.nodes, 2);
  EXPECT_EQ(tp.ranks_per_node, 2);
  EXPECT_DOUBLE_EQ(tp.seconds,
                   2 * (a1 + 0.5 * S / B1) + 2 * a2 + (S / 2) / B2 + g * (0.5 * S + 0.5 * (S / 2)));
  EXPECT_DOUBLE_EQ(tp.seconds, cost(c, Collective::AllReduce, {3, 4, 5}, S));
  // dp groups {0,3,6,9}, {1,4,7,10}, {2,5,8,11}: 4 ranks on 3 nodes, at most 2 on one.
  const CommCost dp = axis_cost(c, mesh, {"dp"}, Collective::AllGather, S);
  EXPECT_EQ(dp.nodes, 3);
  EXPECT_EQ(dp.ranks_per_node, 2);
  EXPECT_DOUBLE_EQ(dp.seconds, 2 * a2 + 2.0 / 3 * (S / 2) / B2 + a1 + 0.5 * S / B1);
  EXPECT_THROW(axis_cost(c, dist::MeshShape::parse("tp=4,dp=4"), {"tp"}, Collective::AllReduce, S),
               Error);
}

TEST(CommCost, UnevenGroupsAreBoundByTheFullestNode) {
  const Cluster c = make_cluster(4, 3);
  const std::vector<int> uneven = {0, 1, 2, 5, 9};  // 3 on node 0, 1 on node 1, 1 on node 2
  const CommCost r = collective_cost(c, Collective::ReduceScatter, uneven, S);
  EXPECT_EQ(r.ranks_per_node, 3);
  EXPECT_EQ(r.nodes, 3);
  EXPECT_DOUBLE_EQ(r.seconds, 2 * a1 + 2.0 / 3 * S / B1 + 2 * a2 + 2.0 / 3 * (S / 3) / B2 +
                                  g * (2.0 / 3 * S + 2.0 / 3 * (S / 3)));
}

TEST(CommCost, BestAllReduceIsTreeForSmallMessagesOverManyNodes) {
  const Cluster c = make_cluster(1, 16);
  const std::vector<int> r16 = iota(16);
  const CommCost small = collective_cost(c, Collective::AllReduce, r16, 1000);
  EXPECT_EQ(small.algorithm, Algorithm::Tree);
  EXPECT_DOUBLE_EQ(small.seconds, 8 * a2 + 2 * 1000 / B2 + g * 1000);
  const CommCost large = collective_cost(c, Collective::AllReduce, r16, 10 * S);
  EXPECT_EQ(large.algorithm, Algorithm::Ring);
  EXPECT_DOUBLE_EQ(large.seconds, 30 * a2 + 30.0 / 16 * 10 * S / B2 + g * 15.0 / 16 * 10 * S);
}

TEST(CommCost, TrivialGroupsAndBadArgumentsAreHandled) {
  const Cluster c = make_cluster(4, 3);
  EXPECT_EQ(cost(c, Collective::AllReduce, {5}, S), 0.0);
  // 7 ranks: 4 on node 0, 3 on node 1; zero bytes leave the latency terms only.
  EXPECT_DOUBLE_EQ(cost(c, Collective::AllReduce, iota(7), 0), 6 * a1 + 2 * a2);
  EXPECT_THROW(cost(c, Collective::AllReduce, {}, S), Error);
  EXPECT_THROW(cost(c, Collective::AllReduce, {1, 2, 1}, S), Error);
  EXPECT_THROW(cost(c, Collective::AllReduce, {0, 12}, S), Error);  // 12 devices: 0..11
  EXPECT_THROW(cost(c, Collective::ReduceScatter, {0, 1}, S, Algorithm::Tree), Error);
  EXPECT_THROW(cost(c, Collective::SendRecv, {0, 1, 2}, S), Error);
  EXPECT_THROW(cost(c, Collective::AllGather, {0, 1}, -1), Error);
  Cluster one_level = c;
  one_level.inter_node.reset();
  try {
    cost(one_level, Collective::AllGather, {0, 4}, S);
    FAIL() << "costed a group across nodes without an inter-node link";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no [links.inter_node]"), std::string::npos) << e.what();
  }
  EXPECT_EQ(collective_from_name("all_to_all"), Collective::AllToAll);
  EXPECT_THROW(collective_from_name("allreduce"), Error);
}

}  // namespace
}  // namespace tessel::plan
