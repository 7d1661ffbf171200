// SPDX-License-Identifier: Apache-2.0
// Helpers of the sharding tests: a thread world runner whose checks, made on every rank thread,
// are reported once on the test thread, and deterministic data every rank can recompute.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "common/thread_checks.h"
#include "tessel/core/rng.h"
#include "tessel/dist/threads/thread_world.h"
#include "tessel/tensor/tensor.h"

namespace tessel::sharding::test {

using Checks = tessel::test::ThreadChecks;

inline void run_world(int n, const std::function<void(dist::CommPtr)>& body) {
  tessel::test::run_thread_world(n, body);
}

// The same values on every rank that asks with the same seed.
inline Tensor random(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, DType::F32, &g);
}

}  // namespace tessel::sharding::test
