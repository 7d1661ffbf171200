// SPDX-License-Identifier: Apache-2.0
// A Backend that forwards every call to another one and times it with core/profile.h, named by
// kernel (GEMMs by transposes and shape, attention with its FLOPs), so a training step can be
// broken down per op. cpu_backend() hands it out while profiling is on; otherwise nothing of it
// runs.
#pragma once

#include <functional>

#include "tessel/kernels/backend.h"

namespace tessel::kernels {

// The profiling wrapper around `inner` (one per inner backend, kept for the program's lifetime).
// `settle`, when given, runs at the end of every timed call: a device backend's wait for its
// queued kernels, so that each call's time is its kernels' and not their launch's.
Backend& profiled(Backend& inner, std::function<void()> settle = {});

}  // namespace tessel::kernels
