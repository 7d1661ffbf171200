// SPDX-License-Identifier: Apache-2.0
// Progress lines and JSONL records of a training run.
#include "tessel/train/metrics/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>
#include <vector>

#include "tessel/core/error.h"

namespace tessel::train {

namespace {

// JSON has no NaN or infinity: a skipped step's loss is written as null.
nlohmann::json number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

std::string fixed(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace

double flops_per_token(int64_t matmul_params, int64_t n_layer, int64_t n_embd, int64_t seq_len) {
  return 6.0 * double(matmul_params) + 6.0 * double(n_layer) * double(n_embd) * double(seq_len);
}

std::string format_bytes(double bytes) {
  // Below a MiB in KiB (a small model's chunks were "0 MiB"), below a KiB in bytes.
  if (bytes < 1024.0) return fixed("%.0f B", bytes);
  if (bytes < 1024.0 * 1024.0) return fixed("%.0f KiB", bytes / 1024.0);
  const double mib = bytes / (1024.0 * 1024.0);
  if (mib < 1024.0) return fixed("%.0f MiB", mib);
  return fixed("%.2f GiB", mib / 1024.0);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = int64_t(std::llround(seconds));
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", (long long)s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(s / 3600),
                  (long long)(s % 3600 / 60));
  }
  return buf;
}

namespace {

// "h2d 12 MiB (3.1 GB/s)": a tier's traffic in a step and its rate over the step's time.
std::string traffic(const char* what, int64_t bytes, double step_ms) {
  return std::string(what) + " " + format_bytes(double(bytes)) +
         fixed(" (%.2f GB/s)", step_ms > 0 ? double(bytes) / (step_ms * 1e6) : 0.0);
}

}  // namespace

std::string progress_line(const StepRecord& r) {
  std::ostringstream os;
  const int width = int(std::to_string(r.steps).size());
  char step[64];
  std::snprintf(step, sizeof step, "step %*lld/%lld", width, (long long)r.step, (long long)r.steps);
  os << step << " | loss " << (r.skipped ? std::string("skipped") : fixed("%.4f", r.loss))
     << (r.has_experts ? fixed(" | aux %.4f", r.aux_loss) : std::string()) << " | lr "
     << fixed("%.2e", r.lr) << " | norm " << fixed("%.4f", r.grad_norm) << " | "
     << fixed("%.1f", r.step_ms) << " ms | " << fixed("%.0f", r.tokens_per_s) << " tok/s | MFU "
     << (r.mfu > 0 ? fixed("%.1f%%", 100.0 * r.mfu) : std::string("n/a"))
     << (r.hfu > r.mfu ? fixed(" (HFU %.1f%%)", 100.0 * r.hfu) : std::string()) << " | mem "
     << format_bytes(double(r.mem_bytes)) << " (peak " << format_bytes(double(r.mem_peak_bytes))
     << "; state " << format_bytes(double(r.state_bytes)) << ", formula "
     << format_bytes(double(r.expected_state_bytes)) << ")"
     << (r.rss_peak_bytes > 0
             ? " | RSS " + format_bytes(double(r.rss_bytes)) + " (peak " +
                   format_bytes(double(r.rss_peak_bytes)) +
                   (r.ranks.size() > 1 ? ", rank " + std::to_string(r.rss_rank) : std::string()) +
                   ")"
             : std::string())
     << " | skipped " << r.skipped_total
     << (r.loss_scale > 0 ? fixed(" | scale %g", r.loss_scale) + " (overflows " +
                                std::to_string(r.overflow_total) + ")"
                          : std::string())
     << (r.dp_comm_ms + r.tp_comm_ms + r.pp_bubble_ms > 0
             ? fixed(" | compute %.1f ms, exposed dp ", r.compute_ms) +
                   fixed("%.1f tp ", r.dp_comm_ms) + fixed("%.1f, pp bubble ", r.tp_comm_ms) +
                   fixed("%.1f", r.pp_bubble_ms)
             : std::string())
     << (r.offload ? " | offload " + traffic("h2d", r.offload_h2d_bytes, r.step_ms) + ", " +
                         traffic("d2h", r.offload_d2h_bytes, r.step_ms) + ", " +
                         traffic("nvme read", r.offload_nvme_read_bytes, r.step_ms) + ", " +
                         traffic("write", r.offload_nvme_write_bytes, r.step_ms) + "; evictions " +
                         std::to_string(r.offload_evictions) + " (clean " +
                         std::to_string(r.offload_clean_evictions) + ")" +
                         fixed("; waited %.1f s on NVMe", r.offload_io_wait_ms / 1e3) +
                         "; holds device " + format_bytes(double(r.offload_device_bytes)) +
                         ", host " + format_bytes(double(r.offload_host_bytes)) + ", NVMe " +
                         format_bytes(double(r.offload_nvme_bytes))
                   : std::string())
     << " | ETA " << format_duration(r.eta_s);
  return os.str();
}

std::string eval_line(const EvalRecord& r) {
  return "eval step " + std::to_string(r.step) + " | val loss " + fixed("%.4f", r.val_loss) +
         " | ppl " + fixed("%.2f", std::exp(r.val_loss)) + " | " + std::to_string(r.tokens) +
         " tokens in " + fixed("%.0f", r.ms) + " ms";
}

std::string step_json(const StepRecord& r) {
  nlohmann::json j{{"step", r.step},
                   {"steps", r.steps},
                   {"loss", number(r.loss)},
                   {"lr", r.lr},
                   {"grad_norm", number(r.grad_norm)},
                   {"skipped", r.skipped},
                   {"skipped_total", r.skipped_total},
                   {"loss_scale", r.loss_scale},
                   {"overflow", r.overflow},
                   {"overflow_total", r.overflow_total},
                   {"step_ms", r.step_ms},
                   {"step_cpu_ms", r.step_cpu_ms},
                   {"tokens_per_s", r.tokens_per_s},
                   {"mfu", r.mfu},
                   {"hfu", r.hfu},
                   {"comm_wait_ms", r.comm_wait_ms},
                   {"compute_ms", r.compute_ms},
                   {"dp_comm_ms", r.dp_comm_ms},
                   {"tp_comm_ms", r.tp_comm_ms},
                   {"pp_bubble_ms", r.pp_bubble_ms},
                   {"tokens", r.tokens},
                   {"mem_bytes", r.mem_bytes},
                   {"mem_peak_bytes", r.mem_peak_bytes},
                   {"step_peak_bytes", r.step_peak_bytes},
                   {"state_bytes", r.state_bytes},
                   {"expected_state_bytes", r.expected_state_bytes},
                   {"param_bytes", r.param_bytes},
                   {"grad_bytes", r.grad_bytes},
                   {"optimizer_bytes", r.optimizer_bytes},
                   {"comm_bytes", r.comm_bytes},
                   {"collectives", r.collectives},
                   {"collective_bytes", r.collective_bytes},
                   {"gathered_peak_bytes", r.gathered_peak_bytes},
                   {"rss_bytes", r.rss_bytes},
                   {"rss_peak_bytes", r.rss_peak_bytes},
                   {"rss_rank", r.rss_rank},
                   {"elapsed_s", r.elapsed_s},
                   {"eta_s", r.eta_s}};
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankMemory& m : r.ranks)
    ranks.push_back({{"rss_bytes", m.rss_bytes},
                     {"rss_peak_bytes", m.rss_peak_bytes},
                     {"mem_bytes", m.mem_bytes},
                     {"mem_peak_bytes", m.mem_peak_bytes},
                     {"state_bytes", m.state_bytes},
                     {"expected_state_bytes", m.expected_state_bytes},
                     {"step_peak_bytes", m.step_peak_bytes},
                     {"param_bytes", m.param_bytes}});
  j["ranks"] = std::move(ranks);
  if (r.predicted) {
    // Each rank's measured peak as the memory model counts it: what it holds between steps (in
    // use at the step's end) plus the step's own peak above that.
    const PlanPrediction& p = *r.predicted;
    std::vector<int64_t> measured;
    for (const RankMemory& m : r.ranks) measured.push_back(m.mem_bytes + m.step_peak_bytes);
    if (measured.empty()) measured.push_back(r.mem_bytes + r.step_peak_bytes);
    const int64_t worst = *std::max_element(measured.begin(), measured.end());
    j["predicted"] = {
        {"layout", p.layout},
        {"step_ms", p.step_ms},
        {"mem_peak_bytes", p.mem_peak_bytes},
        {"state_bytes", p.state_bytes},
        {"step_peak_bytes", p.step_peak_bytes},
        {"measured_peak_bytes", measured},
        {"step_ms_error", p.step_ms > 0 ? (r.step_ms - p.step_ms) / p.step_ms : 0.0},
        {"mem_peak_error",
         p.mem_peak_bytes > 0 ? double(worst - p.mem_peak_bytes) / double(p.mem_peak_bytes) : 0.0}};
  }
  if (r.has_experts) {
    j["aux_loss"] = number(r.aux_loss);
    nlohmann::json experts = nlohmann::json::array();
    for (const ExpertLoadRecord& e : r.experts)
      experts.push_back({{"layer", e.layer},
                         {"tokens", e.tokens},
                         {"capacity", e.capacity},
                         {"tokens_per_expert", e.tokens_per_expert},
                         {"dropped", e.dropped},
                         {"balance_loss", number(e.balance_loss)},
                         {"z_loss", number(e.z_loss)},
                         {"aux_loss", number(e.aux_loss)}});
    j["experts"] = std::move(experts);
  }
  if (r.expert_parallel) {
    j["all_to_all_calls"] = r.all_to_all_calls;
    j["all_to_all_bytes"] = r.all_to_all_bytes;
    j["expert_reductions"] = r.expert_reductions;
    j["expert_reductions_in_backward"] = r.expert_reductions_in_backward;
  }
  if (r.offload) {
    const auto gbps = [&r](int64_t bytes) {
      return r.step_ms > 0 ? double(bytes) / (r.step_ms * 1e6) : 0.0;
    };
    j["offload"] = {{"h2d_bytes", r.offload_h2d_bytes},
                    {"d2h_bytes", r.offload_d2h_bytes},
                    {"nvme_read_bytes", r.offload_nvme_read_bytes},
                    {"nvme_write_bytes", r.offload_nvme_write_bytes},
                    {"evictions", r.offload_evictions},
                    {"clean_evictions", r.offload_clean_evictions},
                    {"io_wait_ms", r.offload_io_wait_ms},
                    {"h2d_gbps", gbps(r.offload_h2d_bytes)},
                    {"d2h_gbps", gbps(r.offload_d2h_bytes)},
                    {"nvme_read_gbps", gbps(r.offload_nvme_read_bytes)},
                    {"nvme_write_gbps", gbps(r.offload_nvme_write_bytes)},
                    {"device_bytes", r.offload_device_bytes},
                    {"host_bytes", r.offload_host_bytes},
                    {"nvme_bytes", r.offload_nvme_bytes},
                    {"nvme_file_bytes", r.offload_nvme_file_bytes}};
  }
  return j.dump();
}

std::string eval_json(const EvalRecord& r) {
  return nlohmann::json{{"eval_step", r.step},
                        {"val_loss", number(r.val_loss)},
                        {"val_tokens", r.tokens},
                        {"eval_ms", r.ms}}
      .dump();
}

std::string checkpoint_line(const CheckpointRecord& r) {
  std::string out = r.event == "build"
                        ? "model built: " + fixed("%.1f s", r.ms / 1e3)
                        : "checkpoint " + r.event + " at step " + std::to_string(r.step) + ": " +
                              fixed("%.1f s", r.ms / 1e3);
  if (r.ranks.empty() || r.ranks.front().peak_during <= 0) return out;
  // The rank that held the most beyond its state during the operation.
  size_t worst = 0;
  for (size_t i = 1; i < r.ranks.size(); ++i)
    if (r.ranks[i].overhead() > r.ranks[worst].overhead()) worst = i;
  const CheckpointMemory& m = r.ranks[worst];
  out += " | RSS " + format_bytes(double(m.rss_before)) + " before, peak " +
         format_bytes(double(m.peak_during)) + " during, " + format_bytes(double(m.rss_after)) +
         " after";
  if (r.ranks.size() > 1) out += " (rank " + std::to_string(worst) + ")";
  return out;
}

std::string checkpoint_json(const CheckpointRecord& r) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const CheckpointMemory& m : r.ranks) {
    nlohmann::json rank{
        {"rss_before_bytes", m.rss_before},     {"peak_rss_during_bytes", m.peak_during},
        {"rss_after_bytes", m.rss_after},       {"peak_rss_before_bytes", m.peak_before},
        {"peak_rss_after_bytes", m.peak_after}, {"peak_vm_after_bytes", m.peak_vm_after}};
    if (r.event == "build") rank["param_bytes"] = m.param_bytes;
    ranks.push_back(std::move(rank));
  }
  return nlohmann::json{{"checkpoint_event", r.event},
                        {"checkpoint_step", r.step},
                        {"checkpoint_ms", r.ms},
                        {"ranks", ranks}}
      .dump();
}

JsonlLog::JsonlLog(const std::string& path, int64_t resume_step) {
  namespace fs = std::filesystem;
  std::string kept;
  if (resume_step >= 0 && fs::exists(path)) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      // Keep what the resumed run will not repeat: records up to and including resume_step (and
      // lines that are not tessel records, untouched). A torn last line from a crash is dropped.
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) continue;
      const int64_t step = j.contains("step")              ? j["step"].get<int64_t>()
                           : j.contains("eval_step")       ? j["eval_step"].get<int64_t>()
                           : j.contains("checkpoint_step") ? j["checkpoint_step"].get<int64_t>()
                                                           : -1;
      if (step <= resume_step) kept += line + '\n';
    }
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TESSEL_CHECK(fd >= 0, "train: cannot open the JSONL log ", path,
               " (log.jsonl): ", std::strerror(errno));
  file_ = io::RecordFile(fd, path, "train: cannot write the JSONL log " + path + " (log.jsonl)");
  if (!kept.empty()) write(kept.substr(0, kept.size() - 1));
}

void JsonlLog::write(const std::string& line) {
  file_.append(line + '\n');
}

}  // namespace tessel::train
