// SPDX-License-Identifier: Apache-2.0
// What a training run reports: one record per optimizer step (and one per evaluation), printed as
// a progress line every log interval and appended to a JSONL file with the same fields. Model
// FLOPs utilisation follows the PaLM/llm.c convention: 6 FLOPs per parameter per token for the
// matmuls of forward + backward, plus 6 * n_layer * n_embd * T for causal attention's scores and
// weighted sums, against the machine's dense peak.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessel/io/record_file.h"

namespace tessel::train {

// Forward + backward FLOPs per trained token. `matmul_params` excludes parameters used only as
// lookups (GPT-2's position embedding); the tied token embedding counts, as the LM head uses it.
double flops_per_token(int64_t matmul_params, int64_t n_layer, int64_t n_embd, int64_t seq_len);

// One rank's memory as its allocator and the operating system count it.
struct RankMemory {
  int64_t rss_bytes = 0, rss_peak_bytes = 0;  // VmRSS now, VmHWM (the process's peak so far)
  int64_t mem_bytes = 0, mem_peak_bytes = 0;  // tensor allocator: in use, peak of the run
  int64_t state_bytes = 0;                    // parameters, gradients, moments, buffers
  int64_t expected_state_bytes = 0;           // what the ZeRO formula gives this rank
  int64_t step_peak_bytes = 0;                // the step's activations and temporaries
  int64_t param_bytes = 0;                    // the parameters it holds between steps
};

// One mixture-of-experts layer over a step (models' ExpertLayerStats summed over the step's
// micro-batches on this rank): the tokens it routed, the (token, choice) pairs each expert computed
// and the pairs the capacity dropped; its losses are the micro-batches' means, unweighted
// (balance, z) and weighted (aux).
struct ExpertLoadRecord {
  int64_t layer = 0;
  int64_t tokens = 0, capacity = 0, dropped = 0;
  std::vector<int64_t> tokens_per_expert;
  double balance_loss = 0, z_loss = 0, aux_loss = 0;
};

// What the planner predicted for the run's layout (`tessel train --cluster FILE`, docs/PLANNER.md
// "Plan search"), written into every step's record beside the measured figures.
struct PlanPrediction {
  std::string layout;  // plan::Layout::str()
  double step_ms = 0;
  int64_t mem_peak_bytes = 0;  // per rank: state + step peak (the fullest rank)
  int64_t state_bytes = 0, step_peak_bytes = 0;
};

struct StepRecord {
  int64_t step = 0, steps = 0;
  double loss = 0;  // mean over the step's micro-batches (NaN/inf when skipped)
  double lr = 0;
  double grad_norm = 0;  // before clipping
  bool skipped = false;  // non-finite loss or gradient: no update
  int64_t skipped_total = 0;
  // fp16 dynamic loss scaling: the scale this step's backward used (0 without scaling), whether
  // its gradients overflowed (the step was skipped and the scale halved), overflows so far.
  double loss_scale = 0;
  bool overflow = false;
  int64_t overflow_total = 0;
  double step_ms = 0;
  // The step's CPU time, every thread of the process (MPI's polling included): what the step
  // cost on a loaded machine, where step_ms also counts the waits for a core.
  double step_cpu_ms = 0;
  double tokens_per_s = 0;
  double mfu = 0;  // fraction of the peak, 0 when unknown
  double hfu = 0;  // as mfu, counting the forward work activation recomputation repeats
  // Data parallelism: time the step blocked waiting for gradient averaging after backward (the
  // communication the overlap did not hide).
  double comm_wait_ms = 0;
  // The per-step breakdown (the slowest rank's, gathered over every axis): forward + backward
  // compute (less the blocking tp calls inside it), exposed communication per axis (dp: the wait
  // above plus blocking dp calls such as ZeRO's all-gathers; tp: every blocking tp call, in the
  // layers and after them), and pp: the schedule's idle time, bubble and message waits together.
  double compute_ms = 0, dp_comm_ms = 0, tp_comm_ms = 0, pp_bubble_ms = 0;
  int64_t tokens = 0;                         // trained so far
  int64_t mem_bytes = 0, mem_peak_bytes = 0;  // tensor allocator: in use now, peak so far
  // Peak of the step\'s forward + backward above what was in use when it began: activations,
  // gradients and temporaries.
  int64_t step_peak_bytes = 0;
  // Per-rank model state (parameters, gradients, optimizer moments, communication buffers) and
  // what the ZeRO paper's formula expects for the stage (f32: 4 + 4 + 8 bytes per parameter,
  // divided over the dp ranks as the stage partitions them).
  int64_t state_bytes = 0, expected_state_bytes = 0;
  int64_t param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0, comm_bytes = 0;
  // Collectives this rank issued on the dp axis during the step, by kind ("all_gather": 12), and
  // the bytes of the tensors they were given (an all_gather's: this rank's block).
  std::map<std::string, int64_t> collectives;
  int64_t collective_bytes = 0;
  // ZeRO-3: the most bytes of gathered parameters (and their gather buffers) held at once.
  int64_t gathered_peak_bytes = 0;
  // The operating system's count: the resident set now and the process's peak (VmHWM) of the
  // rank with the largest peak (rss_rank), and every rank's figures (one entry per world rank).
  int64_t rss_bytes = 0, rss_peak_bytes = 0;
  int rss_rank = 0;
  std::vector<RankMemory> ranks;
  // Memory offload (memory.device_budget set): the step's chunk traffic between the tiers, and
  // the bytes each tier holds at its end.
  bool offload = false;
  int64_t offload_h2d_bytes = 0, offload_d2h_bytes = 0;
  int64_t offload_nvme_read_bytes = 0, offload_nvme_write_bytes = 0;
  // Chunks sent to NVMe in the step, and those of them that were clean (their NVMe copy was
  // current, so nothing was written): nvme_write_bytes is the others' chunks.
  int64_t offload_evictions = 0, offload_clean_evictions = 0;
  // Milliseconds of the step its thread waited for NVMe transfers (not overlapped with compute).
  double offload_io_wait_ms = 0;
  int64_t offload_device_bytes = 0, offload_host_bytes = 0, offload_nvme_bytes = 0;
  int64_t offload_nvme_file_bytes = 0;  // the NVMe tier's swap file (reserved at start)
  double elapsed_s = 0;
  double eta_s = 0;
  // Mixture-of-experts models: the weighted auxiliary loss added to `loss` for backward (mean over
  // the micro-batches and dp ranks; `loss` itself is the language-model loss), and each MoE
  // layer's load (every dp rank's micro-batches, summed; its losses the mean). Written only for
  // such models.
  bool has_experts = false;
  double aux_loss = 0;
  std::vector<ExpertLoadRecord> experts;
  // The planner's prediction for this layout, when the run was given one.
  std::optional<PlanPrediction> predicted;
  // Expert parallelism (--ep): the all-to-all calls one data-parallel replica issued on the ep
  // axis during the step (the counts' exchange, dispatch and combine, forward and backward; under
  // pp summed over the stages, so every MoE layer counts on every layout), and the bytes of the
  // tensors every rank gave them, summed over the ranks.
  bool expert_parallel = false;
  int64_t all_to_all_calls = 0, all_to_all_bytes = 0;
  // This rank's collectives summing the experts' gradients over their data-parallel group (one
  // per bucket), and how many of them were launched before the step's last backward had ended
  // (overlapped with it, docs/MOE.md "Gradients").
  int64_t expert_reductions = 0, expert_reductions_in_backward = 0;
};

// A checkpoint save or load and the resident set around it, per rank: before (after freed heap
// was returned to the system), the most it reached during the operation (sampled), after, and the
// process's peak (VmHWM) before and after. What the operation held beyond the state it reads or
// writes is peak_during - max(rss_before, rss_after) (a load makes its destination resident).
struct CheckpointMemory {
  int64_t rss_before = 0, peak_during = 0, rss_after = 0, peak_before = 0, peak_after = 0;
  int64_t peak_vm_after = 0;  // the address space's peak afterwards (VmPeak)
  int64_t param_bytes = 0;    // "build": the parameter bytes the rank holds (allocated)
  int64_t overhead() const { return peak_during - std::max(rss_before, rss_after); }
};
struct CheckpointRecord {
  std::string event;  // "save", "load", or "build" (the model's construction in its layout)
  int64_t step = 0;
  double ms = 0;
  std::vector<CheckpointMemory> ranks;
};

struct EvalRecord {
  int64_t step = 0;
  double val_loss = 0;
  int64_t tokens = 0;  // validation tokens scored
  double ms = 0;
};

// "step 120/1000 | loss 5.1234 | lr 6.00e-04 | norm 0.8123 | 412.3 ms | 1242 tok/s | MFU 23.1% |
//  mem 812 MiB (peak 1.20 GiB) | skipped 0 | ETA 6m03s"
std::string progress_line(const StepRecord& r);
std::string eval_line(const EvalRecord& r);
std::string step_json(const StepRecord& r);  // one line, no newline
std::string eval_json(const EvalRecord& r);
// "checkpoint save at step 2: 12.3 s | RSS 5.60 GiB before, peak 5.62 GiB during (rank 0)"
std::string checkpoint_line(const CheckpointRecord& r);
std::string checkpoint_json(const CheckpointRecord& r);

std::string format_bytes(double bytes);       // "40 KiB", "812 MiB", "1.20 GiB"
std::string format_duration(double seconds);  // "45s", "6m03s", "2h05m"

// Appends records to a JSONL file. Opening for a resumed run first drops the records of steps
// after `resume_step` (the steps the run is about to repeat), so the file reads as one run. Every
// write is checked: a record that cannot be written whole (disk full, file-size limit, I/O error)
// is cut back off the file, so it never holds a torn line, and write() throws an Error naming the
// file and the operating system's reason.
class JsonlLog {
 public:
  JsonlLog() = default;
  JsonlLog(const std::string& path, int64_t resume_step);
  bool enabled() const { return file_.is_open(); }
  const std::string& path() const { return file_.path(); }
  void write(const std::string& line);

 private:
  io::RecordFile file_;  // one line per record
};

}  // namespace tessel::train
