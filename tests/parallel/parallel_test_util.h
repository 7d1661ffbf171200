// SPDX-License-Identifier: Apache-2.0
// GoogleTest helpers shared by the data-parallel and ZeRO tests on in-process thread worlds: the
// world runner, expectations checked on every rank thread and reported once on the test thread,
// and the tiny GPT-2 with its deterministic batch that both compare against one process.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/thread_checks.h"
#include "parallel_test_common.h"
#include "tessel/core/error.h"
#include "tessel/dist/threads/thread_world.h"
#include "tessel/models/gpt2/gpt2.h"
#include "tessel/tensor/tensor.h"

namespace tessel::parallel::test_util {

using Grads = std::vector<std::vector<double>>;

inline void run_world(int n, const std::function<void(dist::CommPtr)>& body) {
  tessel::test::run_thread_world(n, body);
}

// The shared thread-world checks, plus gradients compared parameter by parameter.
class Checks : public tessel::test::ThreadChecks {
 public:
  void expect_grads(const Grads& got, const Grads& want, double tol, const std::string& what) {
    for (size_t i = 0; i < want.size(); ++i) {
      double e = rel_err(got[i], want[i]);
      expect(e <= tol,
             what + ": parameter " + std::to_string(i) + " relative error " + std::to_string(e));
    }
  }
};

// A GPT-2 small enough for every test on thread worlds (tied embeddings, two blocks) with `rows`
// sequences of 13 tokens, the same on every rank; every model() starts from the same weights, so
// ranks and the single-process reference begin equal.
struct TinyGpt2Case {
  explicit TinyGpt2Case(int64_t rows) {
    const int64_t t = 13;
    std::vector<int64_t> id(size_t(rows * t)), target(size_t(rows * t));
    for (size_t i = 0; i < id.size(); ++i) {
      id[i] = int64_t((i * 7 + 3) % 37);
      target[i] = int64_t((i * 11 + 5) % 37);
    }
    ids = from_data(id, {rows, t});
    targets = from_data(target, {rows, t});
  }
  std::shared_ptr<models::GPT2> model() const {
    Generator g(5);
    return models::GPT2::random(config, g);
  }

  models::GPT2Config config = small_gpt2(37, 16, 16, 2, 2);
  Tensor ids, targets;
};

// Parameter values as plain floats, for bitwise comparisons between runs.
using Values = std::vector<std::vector<float>>;

inline Values values_of(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  Values out;
  for (const auto& [name, t] : tensors) out.push_back(t.to_vector<float>());
  return out;
}

inline bool same_bits(const Values& a, const Values& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  }
  return true;
}

}  // namespace tessel::parallel::test_util
