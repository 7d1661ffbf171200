// SPDX-License-Identifier: Apache-2.0
// The watchdog's channel over the tcp mesh: queries and replies travel on a reserved channel, and
// the reader threads deliver them even while the application's calls are stuck.
#pragma once

#include <memory>

#include "tessel/dist/tcp/transport.h"
#include "tessel/dist/watchdog.h"

namespace tessel::dist::tcp {

class TcpDiagChannel : public DiagChannel {
 public:
  explicit TcpDiagChannel(std::shared_ptr<Transport> transport)
      : transport_(std::move(transport)) {}
  void serve(const AnswerFn& answer) override;
  std::vector<PeerReply> ask(std::span<const int> world_ranks, const PeerQuery& query,
                             double timeout_s, const AnswerFn& answer) override;
  [[noreturn]] void abort_job(int exit_code) override;
  void shutdown() override {}

 private:
  static constexpr int32_t kQueryTag = 1, kReplyTag = 2;
  std::shared_ptr<Transport> transport_;
};

}  // namespace tessel::dist::tcp
