// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the data-parallel and ZeRO checks, both the GoogleTest files on thread worlds
// and the programs launched by mpirun (which do not link GoogleTest): small GPT-2 configurations
// without dropout, deterministic token streams, and the relative error the tolerances refer to.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tessel/models/gpt2/gpt2_config.h"

namespace tessel::parallel::test_util {

// Dropout off: ranks and the single-process reference must compute the same function.
inline models::GPT2Config without_dropout(models::GPT2Config c) {
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  return c;
}

inline models::GPT2Config small_gpt2(int64_t vocab, int64_t positions, int64_t embd, int64_t layers,
                                     int64_t heads) {
  models::GPT2Config c;
  c.vocab_size = vocab;
  c.n_positions = positions;
  c.n_embd = embd;
  c.n_layer = layers;
  c.n_head = heads;
  return without_dropout(c);
}

// n token ids below `vocab`; another salt gives another stream.
inline std::vector<int64_t> tokens(int64_t n, uint64_t salt, int64_t vocab) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = int64_t((uint64_t(i) * 31 + salt * 7 + 3) % uint64_t(vocab));
  return v;
}

// ||got - want|| / ||want||, accumulated in double whatever the element types.
template <typename A, typename B>
double rel_err(const std::vector<A>& got, const std::vector<B>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace tessel::parallel::test_util
