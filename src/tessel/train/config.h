// SPDX-License-Identifier: Apache-2.0
// The training configuration: one struct with a section per concern, read from TOML (toml++),
// overridden by `--set section.key=value`, validated key by key (an unknown key or a value outside
// its range is an Error naming the key and what it allows), and printed resolved at start. Every
// key, its default and its range live in one table (config.cpp), which also feeds the printer and
// the documentation check, so the three cannot disagree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::train {

struct ModelSection {
  // Model to train: a preset name (model_presets.h: "tiny", "small", "124M", ...), a path to
  // an HF config.json, or a model directory (config.json + weights) to continue from.
  std::string config = "tiny";
  std::string init_from;  // optional HF-layout model directory whose weights start training
};

struct DataSection {
  std::string dir = "data/fortunes";  // written by `tessel data prepare`
  uint64_t seed = 1234;               // shuffles the training windows
};

struct TrainSection {
  int64_t steps = 1000;     // optimizer steps
  int64_t micro_batch = 8;  // B: rows per micro-batch
  int64_t seq_len = 64;     // T: tokens per row (<= the model's n_positions)
  int64_t grad_accum = 1;   // micro-batches per optimizer step
  // Sequences per optimizer step over every dp rank; 0: micro_batch x grad_accum x dp. When set,
  // grad_accum follows from it (global_batch.h), so a resume in another layout keeps it.
  int64_t global_batch = 0;
  uint64_t seed = 1337;       // model initialisation and dropout
  int threads = 0;            // 0: TESSEL_NUM_THREADS or all cores
  int64_t max_bad_steps = 5;  // abort after this many non-finite steps in a row
  // Activation recomputation per block (nn::Recompute): none | selective | full.
  std::string recompute = "none";
  // Mixed precision (strategy/precision_strategy.h): fp32 | bf16 | fp16, f32 master weights
  // either way.
  std::string precision = "fp32";
  // Where the step runs: cpu, cuda or cuda:N (one process on a CUDA device; docs/TRAINING.md).
  std::string device = "cpu";
  double loss_scale_init = 65536;    // fp16: initial dynamic loss scale (2^16)
  int64_t loss_scale_window = 1000;  // fp16: clean steps before the scale doubles
};

struct ParallelSection {
  int64_t zero_stage = 0;  // 0: replicated optimizer state; 1: partitioned; 2: gradients; 3: params
  int64_t bucket_mb = 25;  // gradient bucket size for data parallelism (MiB)
  bool overlap = true;     // launch each bucket's averaging as soon as its gradients are ready
  std::string schedule = "1f1b";        // pipeline schedule: gpipe | 1f1b | interleaved:V
  std::string pipeline_split;           // blocks per pipeline stage, "3,4,4,2"; "": balanced
  bool sequence_parallel = false;       // with tp > 1: norms and dropouts on sequence pieces (--sp)
  bool expert_tensor_parallel = false;  // with tp > 1: each expert's FFN split over tp (--etp)
  std::string tp_plan;  // tensor-parallel plan JSON; "": the model family's built-in plan
};

struct OptimSection {
  double lr = 1e-3;
  double min_lr_ratio = 0.1;     // the schedule ends at lr * min_lr_ratio
  int64_t warmup_steps = 50;     // linear warmup from lr / warmup_steps to lr
  std::string decay = "cosine";  // cosine | linear | constant (after warmup)
  double weight_decay = 0.1;     // decoupled; never on biases and norm weights (1-D tensors)
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // global L2 norm; 0 disables clipping
};

struct EvalSection {
  int64_t interval = 100;  // optimizer steps between evaluations; 0: only at the end
  int64_t batches = 8;     // validation micro-batches per evaluation
};

struct CheckpointSection {
  std::string dir = "runs/default";  // the run directory (checkpoints, log, resolved config)
  int64_t interval = 200;            // steps between checkpoints; 0: only at the end
  int64_t keep = 3;                  // newest complete checkpoints kept
};

struct LogSection {
  int64_t interval = 10;              // steps between progress lines (the JSONL has every step)
  std::string jsonl = "train.jsonl";  // relative to checkpoint.dir; "" disables
  bool tensorboard = false;           // event files in checkpoint.dir/tensorboard (metric_sinks.h)
};

struct SampleSection {
  int64_t tokens = 64;      // generated at the end; 0 disables
  std::string prompt = "";  // text (needs the dataset's tokenizer); "" starts from end-of-text
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 7;
};

struct MachineSection {
  double peak_gflops = 0;  // dense f32 peak for MFU; 0: measured at start (GEMM, about 1 s)
};

// Heterogeneous memory (docs/MEMORY.md): with device_budget set, parameters, gradients and
// AdamW moments live in chunks moved between the device, host and NVMe tiers under these budgets.
// Sizes are bytes with an optional unit: "96MiB", "2GiB", "4096".
struct MemorySection {
  std::string device_budget;  // "": no offload (every state stays in plain memory)
  std::string host_budget = "0";
  std::string nvme_dir;              // "": no NVMe tier
  std::string nvme_budget = "0";     // bytes of swap-file slots; 0: one for every chunk
  std::string chunk_size = "64MiB";  // one chunk's payload
  int64_t prefetch = 8;              // chunk accesses read ahead along the traced step; 0: none
  bool enabled() const { return !device_budget.empty(); }
};

// "96MiB" -> 100663296 (B, KB/KiB, MB/MiB, GB/GiB, TB/TiB; K = 1024); an Error naming `key` and
// the value otherwise.
size_t parse_byte_size(const std::string& key, const std::string& text);

// Test and drill hooks: deliberately break a run at a chosen step to prove recovery works.
struct FaultSection {
  int64_t nan_at_step = 0;   // poison one gradient with NaN at this step (0: never)
  int64_t kill_at_step = 0;  // raise SIGKILL on this process midway through this step (0: never)
  // Every checkpoint save waits this long before it commits, as a big model's save would: proves
  // that a stop signal's checkpoint survives the launcher's grace period (0: no delay).
  int64_t save_delay_ms = 0;
};

struct TrainConfig {
  ModelSection model;
  DataSection data;
  TrainSection train;
  ParallelSection parallel;
  OptimSection optim;
  EvalSection eval;
  CheckpointSection checkpoint;
  LogSection log;
  SampleSection sample;
  MachineSection machine;
  MemorySection memory;
  FaultSection fault;

  // Defaults, then `toml_text` (may be empty), then each "section.key=value" override in order.
  // `source` names the text in errors (a file path, or "<defaults>").
  static TrainConfig parse(const std::string& toml_text, const std::vector<std::string>& overrides,
                           const std::string& source = "<config>");
  static TrainConfig from_file(const std::string& path, const std::vector<std::string>& overrides);

  // Cross-key checks (e.g. warmup_steps <= steps); parse() calls it.
  void validate() const;
  // The resolved configuration as TOML, every key present; parse(to_toml(), {}) reproduces it.
  std::string to_toml() const;
};

// The memory.* keys' own checks (the sizes parse); validate() calls it.
void validate_memory(const TrainConfig& config);
// What an offloaded run refuses across sections (not built yet: 16-bit compute, recomputation,
// periodic checkpoints, the NaN drill; an NVMe directory without offload); the trainer calls it
// before any work.
void check_offload_settings(const TrainConfig& config);

// Every key as "section.key", in table order, with its documentation line and allowed range
// (the documentation test checks docs/TRAINING.md mentions each).
struct ConfigKeyInfo {
  std::string key, type, default_value, range, doc;
};
std::vector<ConfigKeyInfo> config_keys();

}  // namespace tessel::train
