// SPDX-License-Identifier: Apache-2.0
// Diagnosis queries over the mesh. Errors (a peer that is gone) only mean "no answer" here: the
// watchdog must go on to report and end the job.
#include "tessel/dist/tcp/tcp_diag.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace tessel::dist::tcp {

void TcpDiagChannel::serve(const AnswerFn& answer) {
  for (int p = 0; p < transport_->size(); ++p) {
    if (p == transport_->rank()) continue;
    try {
      while (std::optional<Message> m = transport_->try_take(p, kDiagChannel, kQueryTag)) {
        PeerQuery q;
        if (m->bytes != sizeof(q)) continue;
        std::memcpy(&q, m->data.get(), sizeof(q));
        PeerReply reply = answer(q);
        transport_->send(p, kDiagChannel, kReplyTag, DType::I8, &reply, sizeof(reply));
      }
    } catch (const std::exception&) {
    }
  }
}

std::vector<PeerReply> TcpDiagChannel::ask(std::span<const int> world_ranks, const PeerQuery& query,
                                           double timeout_s, const AnswerFn& answer) {
  const size_t n = world_ranks.size();
  std::vector<PeerReply> replies(n);
  std::vector<bool> pending(n, true);
  for (size_t i = 0; i < n; ++i) {
    try {
      transport_->send(world_ranks[i], kDiagChannel, kQueryTag, DType::I8, &query, sizeof(query));
    } catch (const std::exception&) {
      pending[i] = false;  // gone: answered stays false
    }
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    serve(answer);  // peers that time out at the same moment ask us too
    bool any = false;
    for (size_t i = 0; i < n; ++i) {
      if (!pending[i]) continue;
      try {
        if (std::optional<Message> m =
                transport_->try_take(world_ranks[i], kDiagChannel, kReplyTag)) {
          if (m->bytes == sizeof(PeerReply)) std::memcpy(&replies[i], m->data.get(), m->bytes);
          pending[i] = false;
          continue;
        }
      } catch (const std::exception&) {
        pending[i] = false;
        continue;
      }
      any = true;
    }
    if (!any) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return replies;
}

void TcpDiagChannel::abort_job(int exit_code) {
  transport_->send_abort(exit_code);
  std::_Exit(exit_code);
}

}  // namespace tessel::dist::tcp
