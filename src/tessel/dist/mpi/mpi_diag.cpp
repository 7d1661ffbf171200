// SPDX-License-Identifier: Apache-2.0
// Queries and answers between watchdogs, over their own communicator.
#include "tessel/dist/mpi/mpi_diag.h"

#include <chrono>
#include <cstdlib>
#include <thread>

namespace tessel::dist::mpi {

MpiDiagChannel::MpiDiagChannel() : comm_(Comm(MPI_COMM_WORLD).dup("diagnosis")) {
  post_receive();
}

void MpiDiagChannel::post_receive() {
  MPI_Irecv(&incoming_, sizeof(PeerQuery), MPI_BYTE, MPI_ANY_SOURCE, kQueryTag, comm_.get(),
            &incoming_request_);
}

void MpiDiagChannel::serve(const AnswerFn& answer) {
  for (;;) {
    int done = 0;
    MPI_Status status;
    if (incoming_request_ == MPI_REQUEST_NULL ||
        MPI_Test(&incoming_request_, &done, &status) != MPI_SUCCESS || !done)
      break;
    auto reply = std::make_unique<PeerReply>(answer(incoming_));
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Isend(reply.get(), sizeof(PeerReply), MPI_BYTE, status.MPI_SOURCE, kReplyTag, comm_.get(),
              &request);
    replies_in_flight_.emplace_back(std::move(reply), request);
    post_receive();
  }
  std::erase_if(replies_in_flight_, [](auto& item) {
    int done = 0;
    MPI_Test(&item.second, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}

std::vector<PeerReply> MpiDiagChannel::ask(std::span<const int> world_ranks, const PeerQuery& query,
                                           double timeout_s, const AnswerFn& answer) {
  const size_t n = world_ranks.size();
  std::vector<PeerReply> replies(n);
  // Never freed: a send to a rank that is gone may stay pending until the job is aborted.
  static PeerQuery* outgoing = new PeerQuery();
  *outgoing = query;
  std::vector<MPI_Request> receives(n, MPI_REQUEST_NULL), sends(n, MPI_REQUEST_NULL);
  for (size_t i = 0; i < n; ++i) {
    MPI_Irecv(&replies[i], sizeof(PeerReply), MPI_BYTE, world_ranks[i], kReplyTag, comm_.get(),
              &receives[i]);
    MPI_Isend(outgoing, sizeof(PeerQuery), MPI_BYTE, world_ranks[i], kQueryTag, comm_.get(),
              &sends[i]);
  }
  std::vector<bool> received(n, false);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  size_t pending = n;
  while (pending > 0 && std::chrono::steady_clock::now() < until) {
    serve(answer);  // peers that time out at the same moment ask us too
    for (size_t i = 0; i < n; ++i) {
      if (received[i]) continue;
      int done = 0;
      MPI_Test(&receives[i], &done, MPI_STATUS_IGNORE);
      if (done) {
        received[i] = true;
        --pending;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (size_t i = 0; i < n; ++i) {
    if (!received[i]) {
      MPI_Cancel(&receives[i]);
      MPI_Wait(&receives[i], MPI_STATUS_IGNORE);
      replies[i] = PeerReply();  // answered = false
    }
    if (sends[i] != MPI_REQUEST_NULL) MPI_Request_free(&sends[i]);
  }
  return replies;
}

void MpiDiagChannel::abort_job(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

void MpiDiagChannel::shutdown() {
  if (incoming_request_ != MPI_REQUEST_NULL && is_active()) {
    MPI_Cancel(&incoming_request_);
    MPI_Wait(&incoming_request_, MPI_STATUS_IGNORE);
  }
  for (auto& item : replies_in_flight_) {
    if (item.second == MPI_REQUEST_NULL || !is_active()) continue;
    int done = 0;
    MPI_Test(&item.second, &done, MPI_STATUS_IGNORE);
    if (done) continue;
    MPI_Request_free(&item.second);
    (void)item.first.release();  // MPI may still read it: leaked rather than freed under it
  }
  replies_in_flight_.clear();
  comm_ = Comm();
}

}  // namespace tessel::dist::mpi
