// SPDX-License-Identifier: Apache-2.0
// Rotary position embeddings of the LLaMA family (Su et al. 2021, "RoFormer"), with rope_theta
// and rope_scaling computed as transformers' modeling_rope_utils computes them, with d = head_dim
// and i = 0 .. d/2 - 1:
//
//   default   inv_freq_i = 1 / theta^(2i / d)
//   linear    inv_freq_i / factor                        (positions divided by factor)
//   dynamic   theta' = theta * (factor * L / M - (factor - 1))^(d / (d - 2)) with M =
//             max_position_embeddings and L = max(seq_len, M): NTK-aware base growth once a
//             sequence is longer than M (Hugging Face's dynamic NTK; L is the length of the
//             call, max(position) + 1, so a decoding step past M rotates its new keys with the
//             grown base while the cached ones keep theirs, as transformers' KV cache does)
//   llama3    wavelength 2 pi / inv_freq: shorter than original_max / high_freq_factor: kept;
//             longer than original_max / low_freq_factor: divided by factor; between: smoothed,
//             s = (original_max / wavelength - low) / (high - low),
//             (1 - s) inv_freq / factor + s inv_freq
//
// The attention scaling of all four is 1 (the cos and sin tables are not scaled). Tables hold
// cos / sin(position * inv_freq_i) for each position, computed in double and rounded once to the
// table dtype (transformers computes inv_freq and the angles in float32, so its tables differ by
// that rounding).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "tessel/models/llama/llama_config.h"
#include "tessel/tensor/tensor.h"

namespace tessel::models {

// The d/2 inverse frequencies of `config` for a call over positions [0, seq_len).
std::vector<double> rope_inv_freq(const LlamaConfig& config, int64_t seq_len);

// cos / sin tables [P, head_dim / 2] shared by the layers of one model, built on first use and
// grown as longer sequences arrive (never beyond what a call needs, so a 128k-context model does
// not hold 128k rows for short sequences). Thread-safe.
class RotaryTables {
 public:
  explicit RotaryTables(const LlamaConfig& config);
  // Tables for a call over positions [0, seq_len) in `dtype` (F32 or F64), with at least seq_len
  // rows and the inverse frequencies such a call uses (dynamic scaling depends on seq_len).
  // On `device` (a copy of the host's tables, made once per table size).
  std::pair<Tensor, Tensor> get(int64_t seq_len, DType dtype, Device device = Device::cpu());

 private:
  struct Entry {
    int64_t key = -1;  // the length inv_freq was computed for (dynamic), else 0
    int64_t rows = 0;
    Tensor cos, sin;
    Tensor device_cos, device_sin;  // the tables on a CUDA device, when one asked
  };
  LlamaConfig config_;
  std::mutex mutex_;
  std::map<DType, Entry> tables_;
};

// positions [B, T] (i64) = start, start + 1, ..., start + T - 1 in every row.
Tensor rope_positions(int64_t batch, int64_t length, int64_t start, Device device = Device::cpu());

}  // namespace tessel::models
