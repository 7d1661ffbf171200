// SPDX-License-Identifier: Apache-2.0
// The dense f32 peak MFU is measured against when the configuration gives none: the best of a few
// square GEMMs through the kernel backend, the same measurement `tessel bench peak` reports.
#pragma once

namespace tessel::train {

// GFLOP/s of the fastest of a few 1024^3 f32 GEMMs run for about `budget_s` seconds.
double measure_gemm_peak_gflops(double budget_s = 0.5);

}  // namespace tessel::train
