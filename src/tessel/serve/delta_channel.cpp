// SPDX-License-Identifier: Apache-2.0
// DeltaChannel: a mutex-guarded queue with the latency bookkeeping of the deltas it carries.
#include "tessel/serve/delta_channel.h"

#include "tessel/serve/server_metrics.h"

namespace tessel::serve {

namespace {

double seconds(DeltaChannel::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

DeltaChannel::DeltaChannel(int64_t n, Clock::time_point arrival, ServerMetrics* metrics)
    : arrival_(arrival), metrics_(metrics), last_token_(size_t(n)), open_choices_(n) {}

void DeltaChannel::push(const Delta& delta) {
  const Clock::time_point now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto i = size_t(delta.index);
    if (i < last_token_.size() && !delta.tokens.empty()) {
      if (!first_token_) {
        first_token_ = now;
        if (metrics_) metrics_->observe_time_to_first_token(seconds(now - arrival_));
      }
      // Several tokens in one delta arrived together: the interval is shared between them.
      if (last_token_[i] && metrics_) {
        const double each = seconds(now - *last_token_[i]) / double(delta.tokens.size());
        for (size_t k = 0; k < delta.tokens.size(); ++k)
          metrics_->observe_inter_token_latency(each);
      }
      last_token_[i] = now;
    }
    if (delta.finish != FinishReason::kNone) {
      if (metrics_) metrics_->count_finished_choice(delta.finish);
      if (--open_choices_ == 0) all_finished_ = now;
    }
    queue_.push_back(delta);
  }
  ready_.notify_one();
}

std::vector<Delta> DeltaChannel::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !queue_.empty(); });
  std::vector<Delta> out;
  out.swap(queue_);
  return out;
}

bool DeltaChannel::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return open_choices_ <= 0 && queue_.empty();
}

std::optional<double> DeltaChannel::time_to_first_token() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!first_token_) return std::nullopt;
  return seconds(*first_token_ - arrival_);
}

std::optional<double> DeltaChannel::latency() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!all_finished_) return std::nullopt;
  return seconds(*all_finished_ - arrival_);
}

}  // namespace tessel::serve
