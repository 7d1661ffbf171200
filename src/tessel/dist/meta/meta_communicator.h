// SPDX-License-Identifier: Apache-2.0
// A communicator for shape-only runs: one rank's view of a group of `size` ranks whose tensors
// are on the meta device (shapes and dtypes, no bytes; tensor/device.h), so every call is checked
// as any backend checks it and then moves nothing. The planner runs the runtime's own parallel
// code through it (tensor parallelism's sharding and collectives), so what it traces and counts
// is what a rank of a real group would allocate. Splitting is refused: it would need the peers.
#pragma once

#include <functional>
#include <string>

#include "tessel/dist/communicator.h"

namespace tessel::dist {

CommPtr make_meta_communicator(int size, int rank, const std::string& label);

// Sees every call a meta communicator accepts, on the thread that issues it (asynchronous calls
// too, when they are issued): the planner's trace records them as the step's communication.
using MetaCallObserver = std::function<void(const OpCall& call, const CommInfo& info)>;

class MetaCallObserverScope {
 public:
  explicit MetaCallObserverScope(MetaCallObserver observer);
  ~MetaCallObserverScope();
  MetaCallObserverScope(const MetaCallObserverScope&) = delete;
  MetaCallObserverScope& operator=(const MetaCallObserverScope&) = delete;

 private:
  MetaCallObserver previous_;
};

}  // namespace tessel::dist
