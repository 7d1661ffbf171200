// SPDX-License-Identifier: Apache-2.0
#include "tessel/dist/meta/meta_communicator.h"

#include <numeric>
#include <utility>

#include "tessel/core/error.h"

namespace tessel::dist {

namespace {

thread_local MetaCallObserver current_observer;

void observe(const OpCall& call, const CommInfo& info) {
  if (current_observer) current_observer(call, info);
}

class MetaCommunicator final : public Communicator {
 public:
  MetaCommunicator(CommInfo info, std::shared_ptr<RankContext> context)
      : Communicator(std::move(info), std::move(context)) {}
  std::string_view backend() const override { return "meta"; }
  Device device() const override { return Device::meta(); }

 protected:
  void execute(const OpCall& call, const Record&) override { observe(call, info()); }
  // Asynchronous calls complete when issued: no progress lane, and the observer runs here.
  WorkPtr start(const OpCall& call, const Record&) override {
    observe(call, info());
    return completed_work();
  }
  WorkPtr start_p2p(const OpCall& call, const Record&) override {
    observe(call, info());
    return completed_work();
  }
  std::shared_ptr<Communicator> make_lane() override {
    return std::make_shared<MetaCommunicator>(info(), context_ptr());
  }
  std::shared_ptr<Communicator> split_impl(int, int, const std::string& label,
                                           const Record&) override {
    TESSEL_FAIL("meta communicator '", this->label(), "': cannot split into '", label,
                "' (a shape-only group has no peers to agree with)");
  }
};

}  // namespace

CommPtr make_meta_communicator(int size, int rank, const std::string& label) {
  TESSEL_CHECK(size >= 1 && rank >= 0 && rank < size, "meta communicator: rank ", rank,
               " of a group of ", size);
  CommInfo info{label, rank, size, std::vector<int>(size_t(size)), "meta"};
  std::iota(info.world_ranks.begin(), info.world_ranks.end(), 0);
  return std::make_shared<MetaCommunicator>(std::move(info), std::make_shared<RankContext>(rank));
}

MetaCallObserverScope::MetaCallObserverScope(MetaCallObserver observer)
    : previous_(std::exchange(current_observer, std::move(observer))) {}

MetaCallObserverScope::~MetaCallObserverScope() {
  current_observer = std::move(previous_);
}

}  // namespace tessel::dist
