// SPDX-License-Identifier: Apache-2.0
// The watchdog of a process in a multi-process job: a thread that watches every blocking wait
// against its deadline and answers peers' questions about this rank's records. When a wait passes
// its deadline it asks the other members of that communicator what they issued, writes one message
// naming the collective, the axis and the ranks that are behind, and aborts the whole job.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "tessel/dist/diagnosis.h"
#include "tessel/dist/record.h"

namespace tessel::dist {

using AnswerFn = std::function<PeerReply(const PeerQuery&)>;

// How ranks reach each other for diagnosis: a channel separate from the one that is stuck.
class DiagChannel {
 public:
  virtual ~DiagChannel() = default;
  // Answers the queries that have arrived; never blocks.
  virtual void serve(const AnswerFn& answer) = 0;
  // Asks every rank in `world_ranks` and waits at most timeout_s, serving others meanwhile.
  // Entry i has answered == false when world_ranks[i] did not reply in time.
  virtual std::vector<PeerReply> ask(std::span<const int> world_ranks, const PeerQuery& query,
                                     double timeout_s, const AnswerFn& answer) = 0;
  [[noreturn]] virtual void abort_job(int exit_code) = 0;
  virtual void shutdown() = 0;  // cancels what is pending; the channel is unusable afterwards
};

class Watchdog {
 public:
  static Watchdog& instance();
  // Starts the thread (once); `context` is the recorder it watches and answers from.
  void start(std::shared_ptr<RankContext> context, std::unique_ptr<DiagChannel> channel);
  // Joins the thread and shuts the channel down (before the transport is finalised).
  void stop();
  bool running() const;

 private:
  Watchdog() = default;
  void loop();
  [[noreturn]] void on_timeout(const WaitInfo& wait, double waited_s);

  std::shared_ptr<RankContext> context_;
  std::unique_ptr<DiagChannel> channel_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// "recent calls of world rank 3 (oldest first): all_reduce(sum) #7 f32 [33] on 'tp' done; ..."
std::string recent_calls(const RankContext& context, size_t n);

}  // namespace tessel::dist
