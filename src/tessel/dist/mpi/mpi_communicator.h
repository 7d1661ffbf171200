// SPDX-License-Identifier: Apache-2.0
// The MPI backend, for CPU tensors across processes and machines. Blocking calls are the blocking
// MPI collectives (the tuned algorithms of the MPI library); asynchronous collectives run on a
// progress lane over a duplicate communicator; send/recv are MPI_Isend/MPI_Irecv.
#pragma once

#include "tessel/dist/communicator.h"
#include "tessel/dist/mpi/mpi_runtime.h"

namespace tessel::dist {

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(mpi::Comm comm, CommInfo info, std::shared_ptr<RankContext> context);
  std::string_view backend() const override { return "mpi"; }
  MPI_Comm handle() const { return comm_.get(); }

  // The world of this process: initialises MPI, duplicates MPI_COMM_WORLD, starts the watchdog.
  static CommPtr create_world();

 protected:
  void execute(const OpCall& call, const Record& record) override;
  WorkPtr start_p2p(const OpCall& call, const Record& record) override;
  std::shared_ptr<Communicator> make_lane() override;
  std::shared_ptr<Communicator> split_impl(int color, int key, const std::string& label,
                                           const Record& record) override;

 private:
  mpi::Comm comm_;
};

}  // namespace tessel::dist
