// SPDX-License-Identifier: Apache-2.0
// The watchdog's channel over MPI: a duplicate of MPI_COMM_WORLD used only for diagnosis, so its
// messages never match the application's. Only non-blocking calls, each with its own deadline.
#pragma once

#include <list>
#include <memory>

#include "tessel/dist/mpi/mpi_runtime.h"
#include "tessel/dist/watchdog.h"

namespace tessel::dist::mpi {

class MpiDiagChannel : public DiagChannel {
 public:
  MpiDiagChannel();  // collective over MPI_COMM_WORLD
  void serve(const AnswerFn& answer) override;
  std::vector<PeerReply> ask(std::span<const int> world_ranks, const PeerQuery& query,
                             double timeout_s, const AnswerFn& answer) override;
  [[noreturn]] void abort_job(int exit_code) override;
  void shutdown() override;

 private:
  void post_receive();

  static constexpr int kQueryTag = 1, kReplyTag = 2;
  Comm comm_;
  PeerQuery incoming_;
  MPI_Request incoming_request_ = MPI_REQUEST_NULL;
  std::list<std::pair<std::unique_ptr<PeerReply>, MPI_Request>> replies_in_flight_;
};

}  // namespace tessel::dist::mpi
