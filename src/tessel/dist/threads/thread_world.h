// SPDX-License-Identifier: Apache-2.0
// The in-process backend: threads as ranks, for fast unit tests of everything built on
// communication, and the world of one of a process started without a launcher. Collectives meet
// in shared memory; bf16/f16 sums accumulate in one f32 accumulator over all ranks, in rank order.
#pragma once

#include <functional>
#include <memory>

#include "tessel/dist/communicator.h"
#include "tessel/dist/threads/thread_group.h"

namespace tessel::dist {

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<threads::Group> group, int rank,
                     std::shared_ptr<RankContext> context, const std::string& label);
  std::string_view backend() const override { return "threads"; }

 protected:
  void execute(const OpCall& call, const Record& record) override;
  WorkPtr start_p2p(const OpCall& call, const Record& record) override;
  std::shared_ptr<Communicator> make_lane() override;
  std::shared_ptr<Communicator> split_impl(int color, int key, const std::string& label,
                                           const Record& record) override;

 private:
  ThreadCommunicator(std::shared_ptr<threads::Group> group, int rank,
                     std::shared_ptr<RankContext> context, CommInfo info);
  void collective(const OpCall& call, const Record& record);
  void receive(const OpCall& call, const threads::Message& m) const;

  std::shared_ptr<threads::Group> group_;
  uint64_t splits_ = 0;
};

class ThreadWorld {
 public:
  // Runs fn(world) on n threads, one per rank, and returns when all have ended. The first failure
  // (an exception from fn, a timeout's diagnosis, a mismatch) ends the waits of every other rank
  // and is rethrown here as one Error.
  static void run(int n, const std::function<void(Communicator& world)>& fn);
  // A world of one for the calling thread.
  static CommPtr single(std::shared_ptr<RankContext> context);
};

}  // namespace tessel::dist
