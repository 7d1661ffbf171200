// SPDX-License-Identifier: Apache-2.0
// The TESSEL_DUMP_DIR activation dump of one forward (or one chunked evaluation) of a model: every
// named intermediate its observers see, copied, then written as one safetensors file for
// layer-by-layer comparison with another implementation. A chunked evaluation runs the head a few
// positions at a time (causal_lm_eval_loss.cpp); the pieces the head reports are joined along the
// positions, so its file holds the same tensors as the whole forward's.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tessel/io/safetensors.h"
#include "tessel/nn/module.h"

namespace tessel::models {

class ActivationDump {
 public:
  // The directory TESSEL_DUMP_DIR names, or nothing when it is unset or empty.
  static std::optional<std::string> directory();

  // Observes every named intermediate of `model` until destroyed.
  explicit ActivationDump(nn::Module& model);
  ~ActivationDump();
  ActivationDump(const ActivationDump&) = delete;
  ActivationDump& operator=(const ActivationDump&) = delete;

  // From now on the model runs in pieces of positions (dim 1): a name first seen after this is
  // kept for every piece and written as their concatenation; a name seen before keeps its first
  // value, as in a whole forward.
  void begin_pieces() { pieces_ = true; }

  // Writes DIR/activations-NNNN.safetensors (NNNN = index, four digits or more).
  void write(const std::string& dir, int64_t index) const;

 private:
  nn::Module& model_;
  int64_t handle_ = 0;
  bool pieces_ = false;
  io::NamedTensors whole_;
  std::set<std::string> seen_;
  std::vector<std::string> piece_names_;  // in order of first appearance
  std::map<std::string, std::vector<Tensor>> piece_values_;
};

}  // namespace tessel::models
