// SPDX-License-Identifier: Apache-2.0
// Cutting an engine step into micro-batches of whole sequences (step_microbatches.h).
#include "tessel/serve/step_microbatches.h"

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel::serve {
namespace {

std::vector<int64_t> values(const Tensor& t) {
  const int64_t* p = t.data<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

// Sequences [s0, s1) of tokens [q0, q1).
StepTensors piece(const StepTensors& step, const std::vector<int64_t>& starts, int64_t s0,
                  int64_t s1) {
  const int64_t q0 = starts[size_t(s0)], q1 = starts[size_t(s1)];
  StepTensors p;
  p.ids = step.ids.narrow(1, q0, q1 - q0).clone();
  p.positions = step.positions.narrow(1, q0, q1 - q0).clone();
  p.slots = step.slots.narrow(0, q0, q1 - q0).clone();
  p.block_tables = step.block_tables.narrow(0, s0, s1 - s0).clone();
  p.seq_lens = step.seq_lens.narrow(0, s0, s1 - s0).clone();
  std::vector<int64_t> local_starts;
  for (int64_t s = s0; s <= s1; ++s) local_starts.push_back(starts[size_t(s)] - q0);
  p.query_starts = from_data(local_starts, Shape{s1 - s0 + 1});
  std::vector<int64_t> rows;
  if (step.rows.defined())
    for (int64_t r : values(step.rows))
      if (r >= q0 && r < q1) rows.push_back(r - q0);
  p.rows = from_data(rows, Shape{int64_t(rows.size())});
  return p;
}

}  // namespace

std::vector<StepTensors> split_step(const StepTensors& step, int parts) {
  TESSEL_CHECK(parts >= 1, "split_step: ", parts, " micro-batches, expected >= 1");
  const int64_t sequences = step.seq_lens.numel();
  const int64_t count = std::min<int64_t>(parts, sequences);
  if (count <= 1) return {step};
  const std::vector<int64_t> starts = values(step.query_starts);
  const int64_t tokens = starts.back();
  std::vector<StepTensors> out;
  int64_t s0 = 0;
  for (int64_t m = 0; m < count; ++m) {
    int64_t s1 = sequences;
    if (m + 1 < count) {
      // The first boundary at or past this piece's share, leaving a sequence for each later one.
      const int64_t share = tokens * (m + 1) / count;
      s1 = s0 + 1;
      while (s1 < sequences - (count - m - 1) && starts[size_t(s1)] < share) ++s1;
    }
    out.push_back(piece(step, starts, s0, s1));
    s0 = s1;
  }
  return out;
}

}  // namespace tessel::serve
