// SPDX-License-Identifier: Apache-2.0
// The watchdog thread: deadline checks every 50 ms, answers to peers, and the timeout report.
#include "tessel/dist/watchdog.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "tessel/core/log.h"

namespace tessel::dist {

namespace {

constexpr auto kTick = std::chrono::milliseconds(50);

std::string_view state_name(OpState s) {
  switch (s) {
    case OpState::Issued:
      return "queued";
    case OpState::Running:
      return "running";
    case OpState::Done:
      return "done";
    case OpState::Failed:
      return "failed";
  }
  return "?";
}

}  // namespace

std::string recent_calls(const RankContext& context, size_t n) {
  std::ostringstream out;
  out << "recent calls of world rank " << context.world_rank() << " (oldest first):";
  std::vector<Record> records = context.recent(n);
  if (records.empty()) out << " none";
  for (size_t i = 0; i < records.size(); ++i)
    out << (i ? ";" : "") << " " << describe(records[i]) << " on '" << records[i].label.data()
        << "' " << state_name(records[i].state);
  return out.str();
}

Watchdog& Watchdog::instance() {
  static Watchdog* w = new Watchdog();  // never destroyed: stop() is the orderly end
  return *w;
}

void Watchdog::start(std::shared_ptr<RankContext> context, std::unique_ptr<DiagChannel> channel) {
  std::lock_guard lock(mutex_);
  if (thread_.joinable()) return;
  context_ = std::move(context);
  channel_ = std::move(channel);
  stop_ = false;
  thread_ = std::thread([this] { loop(); });
}

void Watchdog::stop() {
  {
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  channel_->shutdown();
  channel_.reset();
}

bool Watchdog::running() const {
  std::lock_guard lock(mutex_);
  return thread_.joinable();
}

void Watchdog::loop() {
  const AnswerFn answer = [ctx = context_](const PeerQuery& q) { return ctx->answer(q); };
  std::unique_lock lock(mutex_);
  while (!stop_) {
    lock.unlock();
    channel_->serve(answer);
    const double now = RankContext::now_s();
    for (const WaitInfo& w : context_->waits()) {
      if (now - w.started_s > w.deadline_s) on_timeout(w, now - w.started_s);
    }
    lock.lock();
    cv_.wait_for(lock, kTick, [&] { return stop_; });
  }
}

void Watchdog::on_timeout(const WaitInfo& wait, double waited_s) {
  const AnswerFn answer = [ctx = context_](const PeerQuery& q) { return ctx->answer(q); };
  const CommInfo& comm = *wait.comm;
  const bool p2p = !is_collective(wait.record.kind);
  PeerQuery query;
  query.label = wait.record.label;
  query.seq = wait.record.seq;
  query.p2p = p2p;
  std::vector<int> asked, asked_rank;
  for (int r = 0; r < comm.size; ++r) {
    if (r == comm.rank || (p2p && r != wait.record.peer)) continue;
    asked.push_back(comm.world_ranks[size_t(r)]);
    asked_rank.push_back(r);
  }
  const double answer_timeout = diagnosis_answer_timeout(comm_timeouts());
  std::vector<PeerReply> got = channel_->ask(asked, query, answer_timeout, answer);
  std::vector<PeerReply> replies(size_t(comm.size));
  for (size_t i = 0; i < asked_rank.size(); ++i) replies[size_t(asked_rank[i])] = got[i];
  HangReport report = diagnose_hang(wait.record, comm, waited_s, wait.deadline_s, replies);
  if (report.reporter != comm.rank) {
    // A lower rank waits in the same call and reports it; its abort ends this process too. Keep
    // answering meanwhile, and report anyway if that never happens.
    const double until = RankContext::now_s() + answer_timeout + 2.0;
    while (RankContext::now_s() < until) {
      channel_->serve(answer);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  log_message(LogLevel::Error,
              "communication timeout: " + report.message + "\n  " + recent_calls(*context_, 8));
  std::fflush(stderr);
  channel_->abort_job(kCommTimeoutExitCode);
  std::_Exit(kCommTimeoutExitCode);  // abort_job does not return; this keeps [[noreturn]] honest
}

}  // namespace tessel::dist
