// SPDX-License-Identifier: Apache-2.0
// The run's memory as the operating system counts it, beside the allocator's figures and the
// ZeRO formula: every step records each rank's resident set and peak (VmRSS, VmHWM), and every
// checkpoint save or load records its resident set before, during (sampled) and after. Freed heap
// is returned to the system (core/process_memory.h) before and after a save or load, so "before"
// is what is in use and a copy of the state made while saving shows in "during".
#include "tessel/core/process_memory.h"
#include "tessel/tensor/host_memory.h"
#include "tessel/train/trainer.h"

namespace tessel::train {

std::vector<double> Trainer::gather_world(const std::vector<double>& mine) const {
  if (!layout_.mesh || layout_.world_size() == 1) return mine;
  const size_t k = mine.size();
  Tensor t = zeros({int64_t(k) * layout_.world_size()}, DType::F64);
  double* v = t.data<double>();
  for (size_t i = 0; i < k; ++i) v[size_t(layout_.world_rank()) * k + i] = mine[i];
  layout_.mesh->world().all_reduce(t, dist::ReduceOp::Sum);
  return std::vector<double>(v, v + t.numel());
}

void Trainer::record_memory(StepRecord& r) const {
  const ProcessMemory pm = process_memory();
  const std::vector<double> all =
      gather_world({double(pm.rss_bytes), double(pm.peak_rss_bytes), double(r.mem_bytes),
                    double(r.mem_peak_bytes), double(r.state_bytes), double(r.expected_state_bytes),
                    double(r.step_peak_bytes), double(r.param_bytes)});
  r.ranks.clear();
  for (size_t i = 0; i + 7 < all.size(); i += 8)
    r.ranks.push_back({int64_t(all[i]), int64_t(all[i + 1]), int64_t(all[i + 2]),
                       int64_t(all[i + 3]), int64_t(all[i + 4]), int64_t(all[i + 5]),
                       int64_t(all[i + 6]), int64_t(all[i + 7])});
  r.rss_rank = 0;
  for (size_t i = 1; i < r.ranks.size(); ++i)
    if (r.ranks[i].rss_peak_bytes > r.ranks[size_t(r.rss_rank)].rss_peak_bytes) r.rss_rank = int(i);
  r.rss_bytes = r.ranks[size_t(r.rss_rank)].rss_bytes;
  r.rss_peak_bytes = r.ranks[size_t(r.rss_rank)].rss_peak_bytes;
}

CheckpointMemory Trainer::checkpoint_memory_before() {
  release_free_host_memory();
  const ProcessMemory pm = process_memory();
  CheckpointMemory m;
  m.rss_before = pm.rss_bytes;
  m.peak_before = pm.peak_rss_bytes;
  peak_sampler_ = std::make_unique<ResidentPeakSampler>();
  return m;
}

CheckpointRecord Trainer::checkpoint_record(const std::string& event, double ms,
                                            CheckpointMemory m) {
  m.peak_during = peak_sampler_ ? peak_sampler_->stop() : 0;
  peak_sampler_.reset();
  release_free_host_memory();
  const ProcessMemory pm = process_memory();
  m.peak_after = pm.peak_rss_bytes;
  m.rss_after = pm.rss_bytes;
  // A peak the process reached for the first time was this operation's, sampled or not.
  if (m.peak_after > m.peak_before) m.peak_during = std::max(m.peak_during, m.peak_after);
  m.peak_vm_after = pm.peak_vm_bytes;
  const std::vector<double> all = gather_world(
      {double(m.rss_before), double(m.peak_during), double(m.rss_after), double(m.peak_before),
       double(m.peak_after), double(m.peak_vm_after), double(m.param_bytes)});
  CheckpointRecord r;
  r.event = event;
  r.step = step_;
  r.ms = ms;
  for (size_t i = 0; i + 6 < all.size(); i += 7)
    r.ranks.push_back({int64_t(all[i]), int64_t(all[i + 1]), int64_t(all[i + 2]),
                       int64_t(all[i + 3]), int64_t(all[i + 4]), int64_t(all[i + 5]),
                       int64_t(all[i + 6])});
  return r;
}

void Trainer::write_record(const CheckpointRecord& c) {
  sinks_.on_checkpoint(c);
  if (write_failure_.empty()) write_failure_ = sinks_.failure();
}

}  // namespace tessel::train
