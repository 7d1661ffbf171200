// SPDX-License-Identifier: Apache-2.0
// Task completion and the progress lane thread.
#include "tessel/dist/work.h"

namespace tessel::dist {

void TaskState::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

bool TaskState::done() {
  std::lock_guard lock(mutex_);
  return done_;
}

void TaskState::wait() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return done_; });
}

void TaskState::rethrow() {
  std::lock_guard lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

bool TaskWork::test() {
  if (!state_->done()) return false;
  state_->rethrow();
  return true;
}

void TaskWork::wait() {
  state_->wait();
  state_->rethrow();
}

bool DeferredWork::test() {
  std::lock_guard lock(mutex_);
  if (!done_ && poll_()) done_ = true;
  return done_;
}

void DeferredWork::wait() {
  std::lock_guard lock(mutex_);
  if (done_) return;
  block_();
  done_ = true;
}

namespace {
class DoneWork : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};
}  // namespace

WorkPtr completed_work() {
  return std::make_shared<DoneWork>();
}

ProgressLane::ProgressLane(std::string name)
    : name_(std::move(name)), thread_([this] { loop(); }) {}

ProgressLane::~ProgressLane() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

WorkPtr ProgressLane::submit(std::function<void()> task) {
  auto state = std::make_shared<TaskState>();
  {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(std::move(task), state);
  }
  cv_.notify_all();
  return std::make_shared<TaskWork>(state);
}

void ProgressLane::loop() {
  for (;;) {
    std::pair<std::function<void()>, std::shared_ptr<TaskState>> item;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      item.first();
    } catch (...) {
      error = std::current_exception();
    }
    // The task goes before its completion is reported: the tensors its call holds (a gradient
    // bucket's full buffer) are then freed where the waiting code drops its own references, not
    // whenever this thread next runs, which moved a step's measured peak by a whole buffer.
    item.first = nullptr;
    item.second->finish(error);
  }
}

}  // namespace tessel::dist
