// SPDX-License-Identifier: Apache-2.0
// Work handles of asynchronous calls, and the progress lane: one thread per communicator that runs
// its asynchronous collectives, in issue order, on a twin channel of that communicator. The lane
// makes communication progress while the caller computes, whatever the transport does on its own.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace tessel::dist {

class Work {
 public:
  virtual ~Work() = default;
  // True once the call has completed; rethrows its failure.
  virtual bool test() = 0;
  // Blocks until the call has completed; rethrows its failure. Safe to call again.
  virtual void wait() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

// Completion state shared by a task and its Work handle.
class TaskState {
 public:
  void finish(std::exception_ptr error);
  bool done();
  void wait();
  void rethrow();

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class TaskWork : public Work {
 public:
  explicit TaskWork(std::shared_ptr<TaskState> state) : state_(std::move(state)) {}
  bool test() override;
  void wait() override;

 private:
  std::shared_ptr<TaskState> state_;
};

// A Work completed by the caller's own thread: test() polls, wait() blocks (both run at most
// until the call has completed once).
class DeferredWork : public Work {
 public:
  DeferredWork(std::function<bool()> poll, std::function<void()> block)
      : poll_(std::move(poll)), block_(std::move(block)) {}
  bool test() override;
  void wait() override;

 private:
  std::mutex mutex_;
  std::function<bool()> poll_;
  std::function<void()> block_;
  bool done_ = false;
};

// A Work that is already complete (calls that finish when issued, e.g. buffered sends).
WorkPtr completed_work();

class ProgressLane {
 public:
  explicit ProgressLane(std::string name);
  ~ProgressLane();  // runs what was queued, then joins
  ProgressLane(const ProgressLane&) = delete;
  ProgressLane& operator=(const ProgressLane&) = delete;

  // The task runs on the lane's thread and is destroyed there before its Work reports completion,
  // so after wait() (or a test() that returns true) the lane holds nothing the task captured.
  WorkPtr submit(std::function<void()> task);

 private:
  void loop();

  std::string name_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<TaskState>>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tessel::dist
