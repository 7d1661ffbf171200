// SPDX-License-Identifier: Apache-2.0
// Node sequence numbers and a destructor that frees long graphs without deep recursion.
// Sequence numbers are global and increase with creation, across threads.
#include "tessel/autograd/node.h"

#include <atomic>

namespace tessel::autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

// A chain of thousands of nodes would otherwise be destroyed recursively (each node's last
// reference lives in its successor's edges) and could overflow the stack: unlink iteratively.
Node::~Node() {
  std::vector<std::shared_ptr<Node>> pending;
  for (Edge& e : next_edges_)
    if (e.node) pending.push_back(std::move(e.node));
  next_edges_.clear();
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    if (n.use_count() == 1) {
      for (Edge& e : n->next_edges_)
        if (e.node) pending.push_back(std::move(e.node));
      n->next_edges_.clear();
    }
  }
}

}  // namespace tessel::autograd
