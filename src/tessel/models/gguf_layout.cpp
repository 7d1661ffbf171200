// SPDX-License-Identifier: Apache-2.0
// GGUF layouts: the checked name map every family's gguf_layout builds (gguf_layout.h).
#include "tessel/models/gguf_layout.h"

#include <sstream>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/models/gguf_expert_stack.h"
#include "tessel/nn/module.h"

namespace tessel::models {

ConfigPtr Family::probe_config(int64_t, int64_t, int64_t) const {
  TESSEL_FAIL("the ", name(), " family has no probe model (GPT-2 has one)");
}

GgufLayout Family::gguf_layout(const CausalLM&, const io::GgufFile& file) const {
  // No parallelism named here: the loader that asked puts its own in front (--tp or --pp).
  TESSEL_FAIL(file.path(), ": the ", name(),
              " family has no GGUF layout, which loading a rank's part of the file needs (GPT-2, "
              "LLaMA and Mixtral have one); run the file on one process");
}

GgufLayout make_gguf_layout(const CausalLM& model, const io::GgufFile& file,
                            const std::string& context,
                            const std::function<std::string(const std::string&)>& gguf_name,
                            const std::function<int64_t(const std::string&)>& rope_heads,
                            const std::set<std::string>& skip) {
  GgufLayout layout;
  layout.skip = skip;
  std::set<std::string> wanted;
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, t] : model.state_dict()) {
    // The tensor itself, or a stack's experts' tensors (gguf_expert_stack.h).
    std::optional<GgufStored> stored =
        find_gguf_stored(file, gguf_name(name), t.shape(), wanted, missing, mismatched);
    if (!stored) continue;
    stored->rope_heads = rope_heads ? rope_heads(name) : 0;
    layout.tensors[name] = std::move(*stored);
  }
  for (const io::GgufTensorInfo& info : file.tensors()) {
    if (!wanted.count(info.name) && !skip.count(info.name)) {
      std::ostringstream s;
      s << info.name << " " << info.shape();
      unexpected.push_back(s.str());
    }
  }
  nn::check_state_names(context + " " + file.path(), missing, unexpected, mismatched);
  return layout;
}

int64_t gguf_stored_row(int64_t row, int64_t rows, int64_t heads) {
  if (heads <= 0) return row;
  TESSEL_CHECK(rows % (2 * heads) == 0, "GGUF layout: ", rows, " rows do not split into ", heads,
               " heads of an even size");
  const int64_t head_dim = rows / heads, half = head_dim / 2;
  const int64_t head = row / head_dim, within = row % head_dim;
  const int64_t pair = within / half, i = within % half;
  return head * head_dim + 2 * i + pair;
}

}  // namespace tessel::models
