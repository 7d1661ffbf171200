// SPDX-License-Identifier: Apache-2.0
// A Backend that forwards every call to another one and times it with core/profile.h, named by
// kernel (GEMMs by transposes and shape, attention with its FLOPs), so a training step can be
// broken down per op. cpu_backend() hands it out while profiling is on; otherwise nothing of it
// runs.
#pragma once

#include "tessel/kernels/backend.h"

namespace tessel::kernels {

// The profiling wrapper around `inner` (one per inner backend, kept for the program's lifetime).
Backend& profiled(Backend& inner);

}  // namespace tessel::kernels
