// SPDX-License-Identifier: Apache-2.0
// Time of one collective for a group of ranks placed on a cluster, by the alpha-beta (Hockney)
// model: a message of S bytes over a link costs alpha + S / B, and reducing S bytes costs
// gamma * S (3 S / memory bandwidth: two operands in, one out). Each collective is costed as the
// algorithm the backends run (Thakur, Rabenseifner & Gropp 2005 for MPI's ring and
// recursive algorithms; NCCL's rings and double binary trees, Sanders, Speck & Träff 2009), and
// as a two-level algorithm (within each node, then across nodes over every device's own NIC in
// parallel) when the group spans nodes. docs/PLANNER.md, "Communication cost", gives every formula.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/dist/mesh.h"
#include "tessel/plan/cluster.h"

namespace tessel::plan {

enum class Collective { AllReduce, ReduceScatter, AllGather, Broadcast, SendRecv, AllToAll };
std::string_view collective_name(Collective c);
Collective collective_from_name(std::string_view name);  // "all_reduce", ...; throws naming them

// Ring: bandwidth-optimal, latency linear in the ranks. Tree: all-reduce only (NCCL's double
// binary tree), latency logarithmic, twice the ring's bytes per rank at large n. Best: the faster
// of the two for this size, as NCCL's tuner picks per call.
enum class Algorithm { Ring, Tree, Best };

struct CommCost {
  double seconds = 0;
  double latency_seconds = 0;             // the alpha terms
  double bandwidth_seconds = 0;           // the bytes / bandwidth terms
  double reduce_seconds = 0;              // the reduction's arithmetic (all-reduce, reduce-scatter)
  int ranks_per_node = 0;                 // p: the most group members on one node
  int nodes = 0;                          // m: nodes the group touches
  Algorithm algorithm = Algorithm::Ring;  // what was costed (Ring or Tree)
};

// `bytes` follows nccl-tests (and `tessel bench comm`): the buffer of all_reduce and broadcast,
// the whole gathered / scattered buffer of all_gather, reduce_scatter and all_to_all (each rank
// holds bytes / n of it), the message of send_recv. `ranks` are world ranks (send_recv: exactly
// two, source then destination); their nodes come from Cluster::node_of. A group of one rank costs
// nothing. Throws on an empty group, a repeated or out-of-range rank.
CommCost collective_cost(const Cluster& cluster, Collective op, std::span<const int> ranks,
                         double bytes, Algorithm algorithm = Algorithm::Best);

// The same collective issued by every group along mesh `axes` at once (as a step issues it): the
// slowest group's cost, groups taken from the mesh's documented rank order (dist::MeshShape). A
// tp group that straddles two nodes makes the whole axis that slow. Throws when the mesh has more
// ranks than the cluster has devices.
CommCost axis_cost(const Cluster& cluster, const dist::MeshShape& mesh,
                   const std::vector<std::string>& axes, Collective op, double bytes,
                   Algorithm algorithm = Algorithm::Best);

}  // namespace tessel::plan
