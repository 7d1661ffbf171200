// SPDX-License-Identifier: Apache-2.0
// Budgets for an offloaded layout. On a CPU the device and host tiers are the same memory, so a
// rank's memory must hold what the step keeps outside the tiers (its activations and temporaries,
// traced with the gradients held elsewhere, and the state the chunks do not take over), the host
// tier and the device tier; the device tier gets the rest,
// in whole chunks, the same for every pipeline rank (memory.* is one setting for the job). The
// offload model then replays each rank's step against those budgets; its start-up checks are the
// trainer's, so a budget below the working set is refused here as the run would refuse it.
#include "tessel/plan/search_offload.h"

#include <algorithm>
#include <limits>

#include "tessel/core/error.h"

namespace tessel::plan {

namespace {

std::string bytes_text(double bytes) {
  if (bytes < double(1 << 20)) return std::to_string(int64_t(bytes / 1024.0)) + " KiB";
  return std::to_string(int64_t(bytes / double(1 << 20))) + " MiB";
}

// Why the offload model cannot plan `l` on `cluster`, or "".
std::string offload_coverage(const Layout& l, const Cluster& cluster) {
  if (cluster.device.kind.rfind("cpu", 0) != 0)
    return "offload on " + cluster.device.kind +
           " devices is not modelled (the tiers' copies over the host link)";
  if (l.dp > 1 && l.zero_stage == 0) return "offload under dp needs ZeRO-1, 2 or 3";
  return "";
}

std::string input_key(const MemoryLayout& m) {
  std::string key = std::to_string(m.dp) + "/" + std::to_string(m.zero_stage) + "/" +
                    std::to_string(m.tp) + "/" + std::to_string(m.grad_accum) + "/" +
                    std::to_string(int(m.compute_dtype)) + "/" + std::to_string(m.bucket_bytes);
  if (m.pipeline.active())
    key += "/" + m.pipeline.schedule + "/" + std::to_string(m.pipeline.ranks) + "/" +
           std::to_string(m.pipeline.rank);
  return key;
}

// One rank's host tier when the request gives none: five chunks, the longest row the step holds
// there (an update's parameter, gradient, both moments and a 16-bit copy).
int64_t default_host_bytes(int64_t chunk_bytes) {
  return 5 * chunk_bytes;
}

}  // namespace

void offload_layout(const models::ModelConfig& config, const Cluster& cluster,
                    const SearchRequest& request, const std::vector<MemoryEstimate>& memories,
                    OffloadInputs& inputs, PlanResult& r) {
  if (!request.offload_input) return;
  const std::string why_not = offload_coverage(r.layout, cluster);
  if (!why_not.empty()) {
    r.reason += "; " + why_not;
    return;
  }
  const int pp = r.layout.pp;
  const int64_t host = request.offload_host_bytes > 0
                           ? request.offload_host_bytes
                           : default_host_bytes(request.offload_chunk_bytes);
  std::vector<MemoryLayout> layouts;
  std::vector<const OffloadRank*> ranks;
  for (int p = 0; p < pp; ++p) {
    layouts.push_back(memory_layout(r.layout, request, p));
    const std::string key = input_key(layouts.back());
    auto it = inputs.find(key);
    if (it == inputs.end()) {
      OffloadRank rank;
      rank.input = request.offload_input(layouts.back(), OffloadBudgets{});
      // The state the chunks take over: a replay with every chunk in the device tier.
      OffloadInput all = rank.input;
      all.budgets.chunk_bytes = request.offload_chunk_bytes;
      all.budgets.device_budget = std::numeric_limits<int64_t>::max() / 4;
      all.budgets.host_budget = std::max(host, default_host_bytes(request.offload_chunk_bytes));
      all.budgets.nvme = true;  // the tiers need not hold every chunk: the device tier takes all
      try {
        const OffloadPrediction whole = predict_offload(all, 2);
        rank.chunk_bytes = whole.chunk_bytes;
        rank.state_bytes = whole.state_bytes;
      } catch (const Error& e) {
        rank.refused = e.what();
      }
      it = inputs.emplace(key, std::move(rank)).first;
    }
    if (!it->second.refused.empty()) {
      r.reason += "; offloaded: " + it->second.refused;
      return;
    }
    ranks.push_back(&it->second);
  }
  const double memory = double(cluster.device.memory_bytes);
  const int64_t chunk = ranks.front()->chunk_bytes;
  int64_t device_budget = std::numeric_limits<int64_t>::max();
  double plain_most = 0;
  for (int p = 0; p < pp; ++p) {
    // Outside the tiers: the step without its gradients (they go to chunks; under dp the trace
    // already holds them in buckets), and the state the chunks do not take (ZeRO-1/2's replicated
    // parameters, ZeRO-3's gather staging). One process counts its gradients in the step, not in
    // its state, and they are f32 like its masters.
    const MemoryEstimate& m = memories[size_t(p)];
    double step = m.step();
    if (r.layout.dp == 1) {
      MemoryLayout held = layouts[size_t(p)];
      held.gradients_held = true;
      step = estimate_memory(config, held).step();
    }
    const double unheld_grads = r.layout.dp == 1 ? m.param_bytes : 0;
    const double plain =
        step + std::max(0.0, m.state() + unheld_grads - double(ranks[size_t(p)]->state_bytes));
    plain_most = std::max(plain_most, plain);
    const double left = memory - plain - double(host);
    device_budget = std::min(device_budget, int64_t(std::max(0.0, left)) / chunk * chunk);
  }
  if (device_budget < chunk) {
    r.reason += "; offloaded, the step keeps " + bytes_text(plain_most) +
                " outside the tiers and the " + "host tier takes " + bytes_text(double(host)) +
                ", which leaves no " + bytes_text(double(chunk)) + " chunk for the device tier";
    return;
  }
  OffloadBudgets b;
  b.chunk_bytes = request.offload_chunk_bytes;
  b.device_budget = device_budget;
  b.host_budget = host;
  b.nvme = !request.offload_nvme_dir.empty();
  OffloadTraffic worst;
  double io_most = -1;
  for (int p = 0; p < pp; ++p) {
    OffloadInput in = ranks[size_t(p)]->input;
    in.budgets = b;
    OffloadPrediction pred;
    try {
      pred = predict_offload(in);
    } catch (const Error& e) {
      r.reason += std::string("; offloaded (device ") + bytes_text(double(device_budget)) +
                  ", host " + bytes_text(double(host)) + (b.nvme ? ", NVMe" : ", no NVMe") +
                  "): " + e.what();
      return;
    }
    const OffloadTraffic& s = pred.steady();
    const double io = s.nvme_read_bytes + s.nvme_write_bytes == 0
                          ? 0
                          : offload_io_seconds(s, cluster.storage->read_bandwidth,
                                               cluster.storage->write_bandwidth);
    if (io > io_most) io_most = io, worst = s;
  }
  r.layout.offload_device_budget = device_budget;
  r.layout.offload_host_budget = host;
  r.layout.offload_chunk_bytes = request.offload_chunk_bytes;
  r.layout.offload_nvme_dir = request.offload_nvme_dir;
  r.offload = worst;
  r.offload_io_seconds = io_most;
  r.offload_plain_bytes = plain_most;
  // The tier prefetches along the traced step and writes in flight, overlapping the disk with
  // the compute: the step is the longer of the two (as `tessel plan offload` predicts it).
  const double step = std::max(r.step_seconds, io_most);
  r.mfu *= r.step_seconds / step;
  r.tokens_per_second *= r.step_seconds / step;
  r.step_seconds = step;
  r.status = PlanStatus::Ranked;
  r.reason.clear();
}

}  // namespace tessel::plan
